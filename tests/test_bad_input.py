"""Bad input of every kind, on every command: exit 2 with one line naming the field, nothing written in the
output directory, before any work starts (the output directory is never created). No wall-clock limit is asserted:
a time would test the machine's load, not the tool.

Each case is (command line, what the one line must contain). ``{suite}`` is a suite file written from the case's
text, ``{out}`` an output directory that must not be created (or, where it exists, must stay as it was).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from privaudit.audit.cli import main

SUITE = """
name = "bad"
out = "{out}"
allow_plugins = true
epsilons = [1.0]

[[defenses]]
name = "leaky_defense:NoisyKernelSum"
label = "kernel"
params = { dim = 64 }

[[defenses]]
name = "nonprivate"
params = { epochs = 1 }

[[attacks]]
name = "loss"
"""


def suite(*pairs: tuple[str, str]) -> str:
    text = SUITE
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def top(line: str) -> str:
    """The suite with ``line`` added at the top level."""
    return suite(("epsilons = [1.0]\n", f"epsilons = [1.0]\n{line}\n"))


NESTED = "x = " + "[" * 5000 + "]" * 5000 + "\n"
STEP = "[step_audit]\ndefenses = ['dp-gcl']\n"

# (suite text or None, extra argv, expected fragment). Suite cases run `privaudit run {suite}`.
SUITE_CASES = {
    "attack label escapes": (SUITE + 'label = "../../../x"\n', "attacks[0].label: must be 1-64 characters"),
    "absolute attack label": (SUITE + 'label = "/tmp/privaudit-escape"\n', "attacks[0].label: must be 1-64"),
    "dot-dot label": (SUITE + 'label = ".."\n', "attacks[0].label: must be 1-64 characters"),
    "defense label with slash": (suite(('label = "kernel"', 'label = "a/b"')), "defenses[0].label: must be 1-64"),
    "empty label": (suite(('label = "kernel"', 'label = ""')), "defenses[0].label: must be 1-64 characters"),
    "duplicate labels": (SUITE + '[[attacks]]\nname = "loss"\n', "attacks[1].label: duplicate label 'loss'"),
    "near-equal epsilons": (suite(("epsilons = [1.0]", "epsilons = [1.0, 1.0000001]")),
                            "epsilons: values [1.0, 1.0000001] are too close"),
    "inf epsilon": (suite(("epsilons = [1.0]", "epsilons = [inf]")), "epsilons[0]: must be a finite number > 0"),
    "nan epsilon": (suite(("epsilons = [1.0]", "epsilons = [nan]")), "epsilons[0]: must be a finite number > 0"),
    "zero epsilon": (suite(("epsilons = [1.0]", "epsilons = [0.0]")), "epsilons[0]: must be a finite number > 0"),
    "empty epsilons": (suite(("epsilons = [1.0]", "epsilons = []")), "epsilons: expected a non-empty list"),
    "negative seed": (top("seeds = [-1]"), "seeds[0]: must lie in [0, 2^32)"),
    "huge seed": (top("seeds = [4294967296]"), "seeds[0]: must lie in [0, 2^32)"),
    "absurd threads": (top("threads = 100000"), "threads: must lie in [1, 256]"),
    "knn_k zero": (top("knn_k = 0"), "knn_k: must be >= 1"),
    "delta above 1": (top("delta = 1.5"), "delta: must lie in (0, 1)"),
    "nan hyper-parameter": (suite(("dim = 64", "dim = 64, leak_factor = nan")), "leak_factor: expected a finite"),
    "inf hyper-parameter": (suite(("dim = 64", "dim = 64, leak_factor = inf")), "leak_factor: expected a finite"),
    "nan noise multiplier": (suite(('label = "kernel"', 'label = "kernel"\nnoise_multiplier = nan')),
                             "defenses[0].noise_multiplier: must be a finite number >= 0"),
    "inf noise multiplier": (suite(('label = "kernel"', 'label = "kernel"\nnoise_multiplier = inf')),
                             "defenses[0].noise_multiplier: must be a finite number >= 0"),
    "epochs 1e12": (suite(("epochs = 1 ", "epochs = 1e12 ")), "epochs: must lie in [1, 1e+06]"),
    "epochs 2e6": (suite(("epochs = 1 ", "epochs = 2000000 ")), "epochs: must lie in [1, 1e+06]"),
    "device cuda:99": (top('device = "cuda:99"'), "device: "),
    "device unknown": (top('device = "tpu"'), "device: unknown value 'tpu'"),
    "inf sensitivity budget": (SUITE + "[sensitivity]\nclaims = ['dpcl.mean']\nbudget_seconds = inf\n",
                               "sensitivity.budget_seconds: must lie in (0, "),
    "nan sensitivity budget": (SUITE + "[sensitivity]\nclaims = ['dpcl.mean']\nbudget_seconds = nan\n",
                               "sensitivity.budget_seconds: must lie in (0, "),
    "negative sensitivity seed": (SUITE + "[sensitivity]\nclaims = ['dpcl.mean']\nseed = -1\n",
                                  "sensitivity.seed: must lie in [0, "),
    "nan ray setting": (SUITE + "[ray]\ncpus_per_cell = nan\n", "ray.cpus_per_cell: expected a finite number"),
    "inf ray setting": (SUITE + "[ray]\ngpus_per_task = inf\n", "ray.gpus_per_task: expected a finite number"),
    "negative ray setting": (SUITE + "[ray]\ncpus_per_task = -1\n", "cpus_per_task: must be > 0"),
    "inf gate slack": (SUITE + "[gate]\nepsilon_slack = inf\n", "gate.epsilon_slack: expected a finite number"),
    "TOML nested 5000 deep": (NESTED + SUITE, "nested too deep"),
    "plugin without opt-in": (suite(("allow_plugins = true\n", "")), "defenses[0].name: 'leaky_defense:NoisyKernelSum' "
                              "is a plugin: importing it runs its code; set allow_plugins = true"),
    "this:X without opt-in": (suite(("allow_plugins = true\n", ""), ('"leaky_defense:NoisyKernelSum"', '"this:X"')),
                              "defenses[0].name: 'this:X' is a plugin"),
    "allow_plugins not a boolean": (suite(("allow_plugins = true", 'allow_plugins = "yes"')),
                                    "allow_plugins: expected true or false"),
    "unknown top-level key": (top("colour = 1"), "colour: unknown key"),
    "unknown dataset": (top("datasets = ['imagenet']"), "datasets[0]: unknown value 'imagenet'"),
    "1001-cell grid": (top("seeds = [" + ", ".join(map(str, range(501))) + "]"),
                       "suite too large: 1002 cells (1 datasets x 501 seeds x 2 defense/epsilon pairs), 1002 attack "
                       "runs, more than 1000 cells; pass --yes-large"),
    "invalid TOML": ("name = 'bad'\n[[defenses]\n", "invalid TOML"),
    "empty out": (suite(('out = "{out}"', 'out = ""')), "out: must be a directory path, got ''"),
    "blank out": (suite(('out = "{out}"', 'out = "  "')), "out: must be a directory path, got '  '"),
    "knn_k above the training set": (top("knn_k = 100000"), "knn_k: must be at most the training set's size ("),
    "inf step-audit epsilon": (SUITE + STEP + "target_epsilon = inf\n",
                               "step_audit.target_epsilon: must be a finite number > 0, got inf"),
    "nan step-audit epsilon": (SUITE + STEP + "target_epsilon = nan\n",
                               "step_audit.target_epsilon: must be a finite number > 0, got nan"),
    "zero step-audit witness evaluations": (SUITE + STEP + "witness_evaluations = 0\n",
                                            "step_audit.witness_evaluations: must lie in [1, "),
    "huge step-audit draws": (SUITE + STEP + "draws = 1000000000000\n", "step_audit.draws: must lie in [8, "),
}

FILE = "{tmp}/a-file"
WITNESS = "{tmp}/not-a-witness.safetensors"
# (argv, expected fragment); {tmp} is the test's directory (holding FILE, WITNESS), {out} the output directory.
CLI_CASES = {
    "epsilon --steps 1e12": (["epsilon", "--noise-multiplier", "1", "--steps", "1000000000000", "--sample-rate",
                              "0.01", "--delta", "1e-5"], "argument --steps: must be an integer in [1, 1000000]"),
    "epsilon inf noise": (["epsilon", "--noise-multiplier", "inf", "--steps", "10", "--sample-rate", "0.01",
                           "--delta", "1e-5"], "argument --noise-multiplier: expected a finite number"),
    "calibrate --steps 1e12": (["calibrate", "--target-epsilon", "1", "--steps", "1000000000000", "--sample-rate",
                                "0.01", "--delta", "1e-5"], "argument --steps: must be an integer in [1, 1000000]"),
    "calibrate inf target": (["calibrate", "--target-epsilon", "inf", "--steps", "10", "--sample-rate", "0.01",
                              "--delta", "1e-5"], "argument --target-epsilon: expected a finite number"),
    "train --seed -1": (["train", "--seed", "-1", "--out", "{out}"], "argument --seed: must be an integer in [0, "),
    "attack --seed -1": (["attack", "--seed", "-1", "--out", "{out}"], "argument --seed: must be an integer in [0, "),
    "alm-curve --seed -1": (["alm-curve", "--seed", "-1"], "argument --seed: must be an integer in [0, "),
    "sensitivity --seed -1": (["sensitivity", "--all", "--seed", "-1"], "argument --seed: must be an integer"),
    "sensitivity inf budget": (["sensitivity", "--all", "--budget-seconds", "inf"],
                               "argument --budget-seconds: expected a finite number"),
    "sensitivity --replay non-safetensors": (["sensitivity", "--replay", WITNESS],
                                             "--replay: '{tmp}/not-a-witness.safetensors' is not a privaudit"),
    "train inf target epsilon": (["train", "--defense", "dp-gcl", "--target-epsilon", "inf", "--out", "{out}"],
                                 "argument --target-epsilon: expected a finite number"),
    "train nan noise multiplier": (["train", "--defense", "dp-gcl", "--noise-multiplier", "nan", "--out", "{out}"],
                                   "argument --noise-multiplier: expected a finite number"),
    "train absurd epochs": (["train", "--epochs", "10000000", "--out", "{out}"],
                            "epochs: must lie in [1, 1e+06], got 10000000"),
    "train absurd epochs param": (["train", "--param", "epochs=1e12", "--out", "{out}"],
                                  "epochs: must lie in [1, 1e+06]"),
    "attack inf target epsilon": (["attack", "--defense", "dp-gcl", "--target-epsilon", "inf", "--out", "{out}"],
                                  "argument --target-epsilon: expected a finite number"),
    "train --out is a file": (["train", "--epochs", "1", "--out", FILE], f"--out: '{FILE}' exists and is not a"),
    "attack --out is a file": (["attack", "--attack", "loss", "--out", FILE], f"--out: '{FILE}' exists and is not"),
    "attack --out under a file": (["attack", "--attack", "loss", "--out", FILE + "/sub"],
                                  f"--out: '{FILE}/sub' cannot be created: '{FILE}' is not a directory"),
    "run --out is a file": (["run", "{suite}", "--out", FILE], f"--out: '{FILE}' exists and is not a directory"),
    "attack --plot bad format": (["attack", "--attack", "loss", "--plot", "{tmp}/roc.txt"], "--plot: unknown value"),
    "attack plugin without opt-in": (["attack", "--defense", "leaky_defense:NoisyKernelSum", "--out", "{out}"],
                                     "--defense: 'leaky_defense:NoisyKernelSum' is a plugin"),
    "train cuda:99": (["train", "--device", "cuda:99", "--out", "{out}"], "device: 'cuda:99'"),
    "run --jobs 0": (["run", "{suite}", "--jobs", "0"], "--jobs: must be an integer in [1, 256]"),
    "run --executor slurm": (["run", "{suite}", "--executor", "slurm"], "--executor: unknown value 'slurm'"),
    "run --only matches nothing": (["run", "{suite}", "--only", "cifar10/*"], "--only: no cell matches"),
    "report on garbled report.json": (["report", "{tmp}/garbled"], "not a readable report"),
    "report on empty report.json": (["report", "{tmp}/empty"], "not a readable report"),
    "report on a JSON list": (["report", "{tmp}/listed"], "not a privaudit report (the top level: expected an "
                                                          "object, got a list)"),
    "report without report.json": (["report", "{tmp}"], "no report.json here"),
    "run --out ''": (["run", "{suite}", "--out", ""], "--out: must be a directory path, got ''"),
    "train --out ''": (["train", "--epochs", "1", "--out", ""], "--out: must be a directory path, got ''"),
    "attack --out ''": (["attack", "--attack", "loss", "--out", ""], "--out: must be a directory path, got ''"),
    "audit-step --out ''": (["audit-step", "--defense", "dp-gcl", "--out", ""], "--out: must be a directory path"),
    "train --knn-k above the training set": (["train", "--knn-k", "100000", "--out", "{out}"],
                                             "--knn-k: must be at most the training set's size ("),
    "audit-step inf target epsilon": (["audit-step", "--defense", "dp-gcl", "--target-epsilon", "inf", "--out",
                                       "{out}"], "argument --target-epsilon: expected a finite number, got inf"),
    "audit-step inf noise": (["audit-step", "--defense", "dp-gcl", "--noise-multiplier", "inf", "--out", "{out}"],
                             "argument --noise-multiplier: expected a finite number, got inf"),
    "audit-step zero noise": (["audit-step", "--defense", "dp-gcl", "--noise-multiplier", "0", "--out", "{out}"],
                              "argument --noise-multiplier: must be a number > 0, got 0"),
    "audit-step zero witness evaluations": (["audit-step", "--defense", "dp-gcl", "--witness-evaluations", "0",
                                             "--out", "{out}"], "argument --witness-evaluations: must be an integer "
                                                                "in [1, 2147483647], got 0"),
    "audit-step negative witness evaluations": (["audit-step", "--defense", "dp-gcl", "--witness-evaluations", "-5",
                                                 "--out", "{out}"], "argument --witness-evaluations: must be an "
                                                                    "integer in [1, 2147483647], got -5"),
    "audit-step --draws 1e12": (["audit-step", "--defense", "dp-gcl", "--draws", "1000000000000", "--out", "{out}"],
                                "argument --draws: must be an integer in [8, 2147483647]"),
    "audit-step nan delta": (["audit-step", "--defense", "dp-gcl", "--delta", "nan", "--out", "{out}"],
                             "argument --delta: expected a finite number, got nan"),
}


def _prepare(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("user data\n")
    (tmp_path / "not-a-witness.safetensors").write_bytes(b"PK\x03\x04 this is a zip, not safetensors")
    for name, text in (("garbled", '{"suite": {"na'), ("empty", ""), ("listed", "[1, 2]")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(text)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _check(tmp_path: Path, capsys, argv: list[str], fragment: str, text: str | None = None) -> None:
    _prepare(tmp_path)
    out = tmp_path / "out"
    path = tmp_path / "suite.toml"
    path.write_text((text if text is not None else SUITE).replace("{out}", str(out)))
    argv = [a.replace("{suite}", str(path)).replace("{out}", str(out)).replace("{tmp}", str(tmp_path)) for a in argv]
    fragment = fragment.replace("{tmp}", str(tmp_path))
    before = _snapshot(tmp_path)
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.err.count("\n") == 1 and captured.err.startswith("privaudit: error: "), captured.err
    assert fragment in captured.err, captured.err
    assert "Zen of Python" not in captured.out and captured.out == ""  # no plugin was imported (this:X)
    assert not out.exists(), "the output directory was created"
    assert _snapshot(tmp_path) == before, "a file was written or changed"
    assert not Path("/tmp/privaudit-escape").exists()


@pytest.mark.parametrize("text, fragment", list(SUITE_CASES.values()), ids=list(SUITE_CASES))
def test_bad_suite_exits_2_naming_the_field_writing_nothing(tmp_path, capsys, text, fragment):
    _check(tmp_path, capsys, ["run", "{suite}"], fragment, text)


@pytest.mark.parametrize("argv, fragment", list(CLI_CASES.values()), ids=list(CLI_CASES))
def test_bad_flags_exit_2_naming_the_field_writing_nothing(tmp_path, capsys, argv, fragment):
    if "cuda:99" in " ".join(argv) and torch.cuda.device_count() > 99:
        pytest.skip("this machine has a cuda:99")
    _check(tmp_path, capsys, argv, fragment)


def test_cuda_without_cuda_is_refused_at_validation(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    _check(tmp_path, capsys, ["run", "{suite}"], "device: 'cuda' requested but no CUDA device is available",
           top('device = "cuda"'))


def test_at_least_forty_kinds():
    assert len(SUITE_CASES) + len(CLI_CASES) >= 40


def test_a_large_suite_runs_with_yes_large_only(tmp_path):
    """The size check is the only thing --yes-large lifts (validated here without running the 1002 cells)."""
    from privaudit.audit.suite.load import load_suite
    from privaudit.core.errors import ConfigError

    path = tmp_path / "s.toml"
    path.write_text(SUITE_CASES["1001-cell grid"][0].replace("{out}", str(tmp_path / "out")))
    big = load_suite(path)
    assert big.n_cells == 1002 and len(big.cells()) == 1002
    with pytest.raises(ConfigError, match="suite too large"):
        big.check_size(False)
    big.check_size(True)


@pytest.mark.parametrize("argv", [["run", "{suite}", "--out", "{tmp}/ro"],
                                  ["train", "--epochs", "1", "--out", "{tmp}/ro"],
                                  ["attack", "--attack", "loss", "--out", "{tmp}/ro/new"]],
                         ids=["run", "train", "attack"])
def test_a_read_only_output_directory_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, argv):
    """A read-only --out (here a read-only mount, simulated: permissions do not stop root) is refused before any
    training, by run, train and attack."""
    import privaudit.core.io

    read_only = tmp_path / "ro"
    read_only.mkdir()
    real = privaudit.core.io.tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        if Path(kwargs.get("dir", "")).resolve() == read_only.resolve():
            raise OSError(30, "Read-only file system")
        return real(*args, **kwargs)

    monkeypatch.setattr(privaudit.core.io.tempfile, "mkstemp", mkstemp)
    shown = str(read_only) + ("/new" if argv[0] == "attack" else "")
    what = "cannot be created: '" + str(read_only) + "' is not writable" if argv[0] == "attack" else "is not writable"
    _check(tmp_path, capsys, argv, f"--out: '{shown}' {what} (Read-only file system)")
    assert list(read_only.iterdir()) == []


# -- your own scores, model and claim (audit-scores, audit-model, plan) -------------------------------------------

SCORES = ["audit-scores", "--members", "{tmp}/m.npy", "--nonmembers", "{tmp}/n.npy"]
MODEL = ["audit-model", "--factory", "user_classifier:make_net", "--weights", "{tmp}/net.pt", "--members",
         "{tmp}/members.npz", "--nonmembers", "{tmp}/nonmembers.npz"]


def _with(base: list[str], flag: str, value: str) -> list[str]:
    argv = list(base)
    argv[argv.index(flag) + 1] = value
    return argv


USER_CASES = {
    "negative probabilities": (_with(_with(SCORES, "--members", "{tmp}/neg-probs.npz"), "--nonmembers",
                                     "{tmp}/probs.npz") + ["--out", "{out}"], "probabilities must lie in [0, 1]"),
    "probabilities up to 5": (_with(SCORES, "--members", "{tmp}/big-probs.npz") + ["--kind", "probs"],
                              "big-probs.npz[probs]: probabilities must lie in [0, 1], found values from"),
    "string labels": (_with(SCORES, "--members", "{tmp}/str-labels.npz") + ["--out", "{out}"],
                      "labels must be integer class indices 0..C-1, got dtype <U3"),
    "labels out of range": (_with(SCORES, "--members", "{tmp}/label-9.npz"), "label 9 out of range"),
    "corrupt npz": (_with(SCORES, "--members", "{tmp}/corrupt.npz") + ["--out", "{out}"],
                    "corrupt.npz: not a readable .npz file"),
    "npy header claiming 1e12 rows": (_with(SCORES, "--members", "{tmp}/huge.npy") + ["--out", "{out}"],
                                      "the header claims shape (1000000000000,)"),
    "npz entry claiming 1e12 rows": (_with(SCORES, "--members", "{tmp}/huge.npz"), "huge.npz[scores]: the header "
                                     "claims shape (1000000000000,)"),
    "200,000-character CSV field": (_with(SCORES, "--members", "{tmp}/long.csv") + ["--out", "{out}"],
                                    "long.csv: line 3: a field longer than"),
    "scores --out under a file": (SCORES + ["--out", "{tmp}/a-file/sub"], "--out: '{tmp}/a-file/sub' cannot be "
                                  "created: '{tmp}/a-file' is not a directory"),
    "scores overwrite the user's report": (SCORES + ["--out", "{tmp}/mine"], "--out: '{tmp}/mine/report.md' exists "
                                           "and was not written by privaudit; pass --force"),
    "unknown relation": (SCORES + ["--claimed-epsilon", "8", "--relation", "sideways"],
                         "--relation: unknown value 'sideways'; accepted: add-remove, replace-one"),
    "replace-one with a one-run design": (SCORES + ["--claimed-epsilon", "8", "--relation", "replace-one"],
                                          "--relation replace-one: the one-run design bounds add/remove"),
    "corrupt Opacus state": (SCORES + ["--opacus-state", "{tmp}/a-file"],
                             "--opacus-state: {tmp}/a-file: not a readable file of torch.save"),
    "Opacus state without history": (SCORES + ["--opacus-state", "{tmp}/state.json"],
                                     "history[0]: noise_multiplier must be a finite number > 0"),
    "plan without a claim": (["plan", "--delta", "1e-5"], "--claimed-epsilon: required"),
    "plan inf epsilon": (["plan", "--claimed-epsilon", "inf", "--delta", "1e-5"], "argument --claimed-epsilon: "
                         "expected a finite number"),
    "model without members": (MODEL[:5] + ["--out", "{out}"], "--members and --nonmembers: both required"),
    "model members CSV without a label column": (_with(MODEL, "--members", "{tmp}/features.csv"),
                                                 "no label column (accepted names: label, y, target, class"),
    "model string labels in a CSV": (_with(MODEL, "--members", "{tmp}/string-labels.csv") + ["--out", "{out}"],
                                     "label 'cat' is not a number; labels must be integer class indices"),
    "model image 30000x30000": (_with(MODEL, "--members", "{tmp}/bomb") + ["--out", "{out}"],
                                "more pixels than the 16777216 an image may have"),
    "model factory not callable": (_with(MODEL, "--factory", "user_classifier:__doc__"),
                                   "factory 'user_classifier:__doc__': is a str, not a function"),
    "model factory module not found": (_with(MODEL, "--factory", "no_such_pkg.models:make"),
                                       "No module named 'no_such_pkg'; put the directory that holds no_such_pkg.py"),
    "model train_fn not callable": (MODEL + ["--train-fn", "user_classifier:__doc__"],
                                    "train_fn 'user_classifier:__doc__': is a str, not a function"),
    "model --out under a file": (MODEL + ["--out", "{tmp}/a-file/sub"], "cannot be created: '{tmp}/a-file' is not a "
                                 "directory"),
    "model labels beyond the logits": (_with(MODEL, "--members", "{tmp}/label-12.npz"),
                                       "label 12 out of range; labels must lie in [0, 10)"),
    "model lira without a population": (MODEL + ["--attacks", "lira"], "lira and rmia compare with other examples"),
    "model user unit": (MODEL + ["--claimed-epsilon", "8", "--delta", "1e-5", "--unit", "user"],
                        "--unit user: audit-model's designs add or remove one example"),
    "suite user-model factory without opt-in": (["run", "{tmp}/user-model.toml"], "defenses[0].params.factory: "
                                                "'user_classifier:make_net' is a plugin: importing it runs its code"),
    "attack user-model factory without opt-in": (["attack", "--defense", "user-model", "--param",
                                                  "factory=user_classifier:make_net", "--out", "{out}"],
                                                 "--param factory: 'user_classifier:make_net' is a plugin"),
    "train user-model factory without opt-in": (["train", "--defense", "user-model", "--param",
                                                 "factory=user_classifier:make_net", "--out", "{out}"],
                                                "--param factory: 'user_classifier:make_net' is a plugin"),
}


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` pixels (its data is a few bytes)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" * 10)) + chunk(b"IEND", b""))


def _prepare_user(tmp: Path) -> None:
    import numpy as np

    import user_classifier

    rng = np.random.default_rng(0)
    np.save(tmp / "m.npy", rng.normal(1, 1, 40))
    np.save(tmp / "n.npy", rng.normal(0, 1, 40))
    probs = rng.dirichlet(np.ones(3), 40)
    np.savez(tmp / "probs.npz", probs=probs, labels=rng.integers(0, 3, 40))
    np.savez(tmp / "neg-probs.npz", probs=probs - 0.5, labels=rng.integers(0, 3, 40))
    np.savez(tmp / "big-probs.npz", probs=probs * 5, labels=rng.integers(0, 3, 40))
    np.savez(tmp / "str-labels.npz", logits=probs, labels=np.array(["cat"] * 40))
    np.savez(tmp / "label-9.npz", logits=probs, labels=np.full(40, 9))
    (tmp / "corrupt.npz").write_bytes((tmp / "probs.npz").read_bytes()[:300])
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }"
    header += b" " * (117 - len(header)) + b"\n"
    (tmp / "huge.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 64)
    import zipfile

    with zipfile.ZipFile(tmp / "huge.npz", "w") as archive:
        archive.writestr("scores.npy", (tmp / "huge.npy").read_bytes())
    (tmp / "long.csv").write_text("score\n0.5\n" + "1" * 200_000 + "\n")
    (tmp / "mine").mkdir()
    (tmp / "mine" / "report.md").write_text("# my own notes\n")
    (tmp / "state.json").write_text('{"history": [[-1.0, 0.1, 10]], "mechanism": "rdp"}')
    x = rng.random((30, 64)).astype(np.float32)
    np.savez(tmp / "members.npz", x=x, y=rng.integers(0, 10, 30))
    np.savez(tmp / "nonmembers.npz", x=x, y=rng.integers(0, 10, 30))
    np.savez(tmp / "label-12.npz", x=x, y=np.full(30, 12))
    (tmp / "features.csv").write_text("a,b\n1,2\n3,4\n")
    (tmp / "string-labels.csv").write_text("\ufeff" + "f1,label\n0.5,cat\n")
    for cls in ("a", "b"):
        (tmp / "bomb" / cls).mkdir(parents=True)
        (tmp / "bomb" / cls / "x.png").write_bytes(_png_header(30000, 30000))
    torch.save(user_classifier.make_net().state_dict(), tmp / "net.pt")
    (tmp / "user-model.toml").write_text(SUITE.replace("allow_plugins = true\n", "").replace(
        'name = "leaky_defense:NoisyKernelSum"\nlabel = "kernel"\nparams = { dim = 64 }',
        'name = "user-model"\nparams = { factory = "user_classifier:make_net" }').replace(
        "{out}", str(tmp / "out")))


@pytest.mark.parametrize("argv, fragment", list(USER_CASES.values()), ids=list(USER_CASES))
def test_bad_user_input_exits_2_naming_the_field_writing_nothing(tmp_path, capsys, argv, fragment):
    _prepare_user(tmp_path)
    _check(tmp_path, capsys, argv, fragment)


def test_a_bom_does_not_change_the_scores(tmp_path):
    """A CSV saved with a UTF-8 byte-order mark reads as the same scores (the BOM is not part of the header)."""
    import numpy as np

    from privaudit.audit.user.scores.score_audit import audit_scores

    rng = np.random.default_rng(0)
    mem, non = rng.normal(1, 1, 300), rng.normal(0, 1, 300)
    for side, values in (("m", mem), ("n", non)):
        text = "score\n" + "\n".join(map(str, values)) + "\n"
        (tmp_path / f"{side}.csv").write_text(text)
        (tmp_path / f"{side}-bom.csv").write_bytes(b"\xef\xbb\xbf" + text.encode())
    plain = audit_scores(tmp_path / "m.csv", tmp_path / "n.csv")
    bom = audit_scores(tmp_path / "m-bom.csv", tmp_path / "n-bom.csv")
    assert bom.auc == plain.auc and abs(plain.auc - audit_scores(mem, non).auc) < 1e-12
    assert bom.summary["n_members"] == 300


@pytest.mark.parametrize("argv", [SCORES + ["--out", "{out}"], MODEL + ["--out", "{out}"]],
                         ids=["audit-scores", "audit-model"])
def test_a_full_disk_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, argv):
    """An --out on a disk without room for the report (simulated: 1 kB free) is refused before any scoring."""
    import shutil

    import privaudit.audit.user.out_dir

    _prepare_user(tmp_path)
    monkeypatch.setattr(privaudit.audit.user.out_dir.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(
        10**9, 10**9 - 1000, 1000))
    _check(tmp_path, capsys, argv, "--out: '{tmp}/out' has 0.0 MB free on its disk; this audit writes up to ")
