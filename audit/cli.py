"""The ``privaudit`` command line: one entry point, one subcommand per module in ``privaudit.audit.commands``.

Exit codes: 0 success, 1 gate failed (``run``, ``gate``) or a claim refuted (``sensitivity``, ``audit-step``,
``audit-scores``, ``audit-model``), 2 bad input or a full disk (one line on stderr naming the
problem), 3 error while running (traceback on stderr), 128 + N after the terminating signal N (143: SIGTERM;
one line), 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
import traceback
from typing import Iterator, Sequence

from privaudit.audit import __version__
from privaudit.audit.commands.common import document_ranges
from privaudit.core.errors import NO_SPACE, ConfigError, DiskFull, RunStopped, Terminated

# Each module defines ``register(subparsers)`` which adds its subcommand and sets ``func``. Only the module of
# the command being run is imported (``privaudit epsilon`` never imports torch unless an accountant needs it);
# the others appear in ``--help`` with the one-line help below (``tests/test_cli_lazy.py`` keeps them equal).
COMMANDS: dict[str, tuple[str, str]] = {
    "datasets": ("privaudit.audit.commands.datasets", "list datasets and whether their files are present"),
    "train": ("privaudit.audit.commands.train", "train a defense and report its utility and privacy claim"),
    "attack": ("privaudit.audit.commands.attack", "attack a defense's model: AUC, TPR at low FPR and an epsilon lower bound"),
    "run": ("privaudit.audit.commands.run", "run an audit suite (TOML): train, attack, check claims, report, gate"),
    "report": ("privaudit.audit.commands.report", "regenerate a run's Markdown, HTML and plots from its report.json"),
    "gate": ("privaudit.audit.commands.gate", "print a run's gate per cell (bound, claim, margin) and exit 1 if it failed"),
    "epsilon": ("privaudit.audit.commands.epsilon", "epsilon of a sampled Gaussian mechanism under each accountant"),
    "calibrate": ("privaudit.audit.commands.calibrate", "smallest noise multiplier meeting a target epsilon, per accountant"),
    "claims": ("privaudit.audit.commands.claims", "check the papers' stated privacy claims against every accountant"),
    "alm-curve": ("privaudit.audit.commands.alm_curve",
                  "privacy-utility table of the ALM's logistic, Laplace and Gaussian noise"),
    "sensitivity": ("privaudit.audit.commands.sensitivity",
                    "search each paper's sensitivity claim for a violating neighbouring pair"),
    "suites": ("privaudit.audit.commands.suites", "list the shipped audit suites (run one by name: privaudit run quickstart)"),
    "audit-model": ("privaudit.audit.commands.audit_model",
                    "audit your own PyTorch classifier on your own members and non-members (LOSS, LiRA, RMIA) and its "
                    "training function by canary runs: a verdict on your claim and the design's ceiling"),
    "audit-training": ("privaudit.audit.commands.audit_training",
                       "audit your Opacus training function white-box in one run (every release observed, gradient "
                       "canaries in its optimizer step, neighbouring dataset sizes replayed): a verdict on its "
                       "accountant's claim, each check named"),
    "audit-scores": ("privaudit.audit.commands.audit_scores",
                     "audit your own member / non-member scores: ROC, AUC, advantage, TPR at low FPR, an epsilon lower "
                     "bound, and a verdict on your claim with the design's ceiling"),
    "audit-step": ("privaudit.audit.commands.audit_step", "audit one privatised step of a defense on neighbouring batches"),
    "gate-power": ("privaudit.audit.commands.gate_power",
                   "plant noise shortfalls into a suite's DP defenses and report the smallest one its gate catches, "
                   "per epsilon"),
    "plan": ("privaudit.audit.commands.plan",
             "size an audit before training: the candidates, guesses or runs a design needs to refute a claimed "
             "epsilon"),
    "validate": ("privaudit.audit.commands.validate",
                 "check suite files (TOML) without running them: exit 0 when valid, 2 with the reason when not"),
}

# Two examples per command, shown under its --help.
EXAMPLES: dict[str, tuple[str, str]] = {
    "datasets": ("privaudit datasets", "privaudit datasets --data-dir ~/data --json"),
    "train": ("privaudit train --defense dp-gcl --dataset digits --target-epsilon 8 --epochs 3",
              "privaudit train --defense alm --target-epsilon 1 --param sensitivity_m=100 --json"),
    "attack": ("privaudit attack --defense nonprivate --dataset digits --attack lira --plot roc.png",
               "privaudit attack --defense dp-gcl --target-epsilon 8 --attack gradient-canary --json"),
    "run": ("privaudit run quickstart", "privaudit run suites/quickstart.toml --resume --only 'digits/dp-gcl/*'"),
    "report": ("privaudit report reports/quickstart", "privaudit report /tmp/my-run"),
    "gate": ("privaudit gate reports/quickstart", "privaudit gate reports/quickstart || echo 'the gate failed'"),
    "epsilon": ("privaudit epsilon --noise-multiplier 1.1 --steps 1000 --sample-rate 0.01 --delta 1e-5",
                "privaudit epsilon --noise-multiplier 0.4 --steps 78125 --dataset-size 50000 --batch-size 128 "
                "--sampling without-replacement --delta 1e-5 --accountant pld --json"),
    "calibrate": ("privaudit calibrate --target-epsilon 8 --steps 1000 --sample-rate 0.01 --delta 1e-5",
                  "privaudit calibrate --target-epsilon 1 --steps 500 --dataset-size 10000 --batch-size 100 "
                  "--sampling without-replacement --delta 1e-5 --accountant pld"),
    "claims": ("privaudit claims --paper DP-GCL", "privaudit claims --id dpcl-simclr-dpsim --json"),
    "alm-curve": ("privaudit alm-curve --dataset digits", "privaudit alm-curve --epsilons 1,8 --draws 5 --json"),
    "sensitivity": ("privaudit sensitivity --all", "privaudit sensitivity --claim dpcl.mean --evaluations 400 --json"),
    "suites": ("privaudit suites", "privaudit suites --json"),
    "audit-model": ("privaudit audit-model --factory mypkg.models:make_net --weights net.pt --members members.npz "
                    "--nonmembers nonmembers.npz --claimed-epsilon 8 --delta 1e-5 --out audit/",
                    "privaudit audit-model --factory mypkg.models:make_net --weights net.safetensors --members train/ "
                    "--nonmembers held-out/ --train-fn mypkg.train:fit --opacus-state accountant.pt --delta 1e-5"),
    "audit-training": ("privaudit audit-training --factory mypkg.models:make_net --train-fn mypkg.train:fit "
                       "--members members.npz --delta 1e-5 --out audit/",
                       "privaudit audit-training --factory mypkg.models:make_net --train-fn mypkg.train:fit "
                       "--members train.csv --delta 1e-5 --claimed-epsilon 8 --json"),
    "audit-scores": ("privaudit audit-scores --members train_loss.npy --nonmembers test_loss.npy --kind loss --out r/",
                     "privaudit audit-scores --tf-privacy attack_input.npz --claimed-epsilon 8 --delta 1e-5 --json"),
    "audit-step": ("privaudit audit-step --defense dpcl-simclr",
                   "privaudit audit-step --defense dp-gcl --pair canonical --draws 1000000 --json"),
    "gate-power": ("privaudit gate-power quickstart",
                   "privaudit gate-power suites/quickstart.toml --defenses dp-gcl --epsilons 8 --plants noise --seeds 5 "
                   "--needed 5"),
    "plan": ("privaudit plan --claimed-epsilon 8 --delta 1e-5",
             "privaudit plan --opacus-state accountant.pt --delta 1e-5 --json"),
    "validate": ("privaudit validate suites/*.toml", "privaudit validate my-suite.toml --allow-plugins --json"),
}

EXIT_OK, EXIT_GATE_FAILED, EXIT_BAD_INPUT, EXIT_RUN_ERROR = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and raise ConfigError (exit 2) instead of exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)


def _selected(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the first argument that is not an option), if it is one of ours."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser: every subcommand in full, or (given ``argv``) only the one ``argv`` runs in full."""
    parser = _Parser(prog="privaudit", description="Privacy auditing for differentially private "
                     "representation learning: train defenses, attack them, check their claims.")
    parser.add_argument("--version", action="version", version=f"privaudit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    selected = None if argv is None else _selected(argv)
    for name, (module, help_text) in COMMANDS.items():
        if argv is None or name == selected:
            importlib.import_module(module).register(sub)
            command = sub.choices[name]
            document_ranges(command)
            command.formatter_class = argparse.RawDescriptionHelpFormatter
            command.epilog = "examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES.get(name, ()))
        else:
            sub.add_parser(name, help=help_text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    with _terminate_on_signals():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(argv).parse_args(argv)
        code = args.func(args)
        return EXIT_OK if code is None else int(code)
    except ConfigError as exc:
        print(f"privaudit: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RunStopped as exc:  # SIGTERM or a full disk: workers stopped, nothing half-written
        print(exc.line(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("privaudit: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            traceback.print_exc()
            return EXIT_RUN_ERROR
        print(DiskFull(str(exc.filename or "the output"), exc.strerror or "no space left").line(), file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception:  # noqa: BLE001 - the CLI boundary reports any failure as a run error
        traceback.print_exc()
        return EXIT_RUN_ERROR


#: The signals that end a command like SIGTERM does: stop the workers, write nothing more, one line, 128 + N.
TERMINATING = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _terminate_on_signals() -> Iterator[None]:
    """While a command runs (in the main thread), a terminating signal raises :class:`Terminated` (the first
    one: later ones are ignored while the command stops its workers), so it unwinds like Ctrl-C does; the
    previous handlers come back afterwards. A signal the caller ignores stays ignored (``nohup``)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = [sig for sig in TERMINATING if signal.getsignal(sig) is not signal.SIG_IGN]

    def stop(signum: int, frame: object) -> None:
        for sig in caught:
            signal.signal(sig, lambda *_: None)
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, stop) for sig in caught}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
