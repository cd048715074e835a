"""One cell of a suite: train a defense, evaluate utility, account epsilon, run the attacks.

:func:`run_cell` is a plain function of a :class:`privaudit.audit.suite.model.CellSpec` that returns a
:class:`CellOutcome` (the cell's report record, its attack results with per-example scores, stage
timings, or the error). It writes nothing: the runner persists outcomes, so a cell can run in this
process or on a Ray worker on another machine. Everything goes through the registries (defenses,
attacks, accountants), so a new defense or attack needs no change here.
"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from privaudit.attacks.result import AttackResult
from privaudit.audit.failures import failure_line
from privaudit.audit.suite.model import CellSpec

# The attack summary keys every report carries first (the report's schema), in this order.
ATTACK_KEYS = ("auc", "tpr_at_fpr", "eps_lower_bound", "eps_lb_method", "n_members", "n_nonmembers")
MECHANISM_KEYS = ("eps_lb_mechanism", "eps_lb_mechanism_method", "eps_lb_trajectory", "eps_lb_trajectory_method")
CLAIM_KEYS = ("mechanism", "relation", "unit", "paper_accountant", "delta", "sampler", "source", "notes")


@dataclass(frozen=True)
class CellOutcome:
    """What running a cell produced: its record as built (plain data, no ``gate`` yet; read through the schema into
    a :class:`~privaudit.audit.report.records.CellRecord` when :func:`privaudit.audit.run.cache.persist` writes it),
    attack results, stage timings, error."""

    spec: CellSpec
    record: dict[str, Any]
    results: dict[str, AttackResult] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    evidence: dict[str, Any] | None = None  # the claim checks' evidence (claim and trace), saved beside the record
    peak_rss_mb: float | None = None  # the process's peak resident memory when the cell ended (timings.json only)


def peak_rss_mb() -> float | None:
    """This process's peak resident set size so far, in MiB (None where the platform does not say)."""
    try:
        import resource
    except ImportError:  # not on every platform
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 / (1024 if sys.platform == "darwin" else 1)  # bytes on macOS, KiB on Linux


@dataclass(frozen=True)
class ExecutorSpec:
    """How a cell fans out its shadow/reference models: ``local`` or ``ray`` with per-task resources."""

    name: str = "local"
    options: tuple[tuple[str, Any], ...] = ()

    def make(self, progress: bool):
        from privaudit.attacks.executor import make_executor

        return make_executor(self.name, progress=progress, **dict(self.options))


def base_record(spec: CellSpec) -> dict[str, Any]:
    """The cell's identity fields, in report order."""
    return {"id": spec.id, "dataset": spec.dataset, "defense": spec.defense.label,
            "target_epsilon": spec.target_epsilon, "delta": spec.delta, "seed": spec.seed,
            "claim": None, "epsilon": {}, "utility": {}, "attacks": {},
            "details": {"key": spec.key, "defense_name": spec.defense.name, "params": spec.defense.resolved,
                        "noise_multiplier": spec.defense.noise_multiplier, "error": None}}


def claim_record(claim) -> dict[str, Any]:
    d = claim.to_dict()
    return {k: d[k] for k in CLAIM_KEYS}


def attack_record(result: AttackResult, scores_path: str | None = None) -> dict[str, Any]:
    """The report object of one attack: the schema's keys first, then where the scores are, then details."""
    summary = result.summary()
    out = {k: summary[k] for k in ATTACK_KEYS}
    for k in MECHANISM_KEYS:  # the bounds against the claim's own mechanism, beside the (eps, delta) one
        if k in summary:
            out[k] = summary[k]
    out["variant"] = result.variant
    out["scores"] = scores_path
    out["details"] = {k: v for k, v in summary.items() if k not in ATTACK_KEYS + MECHANISM_KEYS and k != "variant"}
    return out


class _StageClock:
    """Times a cell's stages into ``timings`` and remembers the one running (an error names it)."""

    def __init__(self, timings: dict[str, float], on_stage: Callable[[str], None] | None):
        self.timings, self.on_stage, self.current = timings, on_stage, "setup"

    def __call__(self, name: str, fn: Callable[[], Any]) -> Any:
        self.current = name
        if self.on_stage is not None:
            self.on_stage(name)
        start = time.perf_counter()
        value = fn()
        self.timings[name] = time.perf_counter() - start
        return value


def run_cell(spec: CellSpec, executor: ExecutorSpec = ExecutorSpec(), progress: bool = False,
             on_stage: Callable[[str], None] | None = None) -> CellOutcome:
    """Run one cell; exceptions become an outcome with ``error`` set (the runner's gate reports them).

    ``on_stage(name)`` is called as each stage starts (train, utility, epsilon, then each attack's label).
    """
    import torch
    from threadpoolctl import threadpool_limits

    record = base_record(spec)
    results: dict[str, AttackResult] = {}
    clock = _StageClock({}, on_stage)
    error, evidence = None, None
    threads = torch.get_num_threads()
    torch.set_num_threads(spec.threads)  # the same arithmetic in every executor (see audit.suite: threads)
    try:
        # BLAS and OpenMP (scikit-learn's probe, numpy) at the same count: two threads per cell on a loaded 2-core
        # machine made the linear probe 6x slower than one (their threads wait for each other)
        with threadpool_limits(limits=spec.threads):
            evidence = _run_stages(spec, executor, progress, record, results, clock)
    except Exception as exc:  # noqa: BLE001 - a failing cell is reported, not fatal to the suite
        error = failure_line(clock.current, exc)
        record["details"]["error"] = error
        record["details"]["traceback"] = traceback.format_exc()
    finally:
        torch.set_num_threads(threads)
    return CellOutcome(spec, record, results, clock.timings, error, evidence, peak_rss_mb())


def _run_stages(spec: CellSpec, executor: ExecutorSpec, progress: bool, record: dict[str, Any],
                results: dict[str, AttackResult], clock: _StageClock) -> dict[str, Any] | None:
    """Load the data, train the defense, then fill ``record`` stage by stage (utility, epsilon, the claim checks,
    each attack); return the claim checks' evidence (None for a run without a trace)."""
    from privaudit.audit.run.claim_checks import run_claim_checks
    from privaudit.attacks import DataRef, Target
    from privaudit.attacks.membership.shadow_models import resolve_defense
    from privaudit.audit.device import resolve_device
    from privaudit.core.datasets import SplitConfig, load_dataset
    from privaudit.defenses.base import Budget

    device = resolve_device(spec.device)
    splits = SplitConfig(**spec.splits) if spec.splits else None
    data = load_dataset(spec.dataset, seed=spec.seed, data_dir=spec.data_dir, splits=splits)
    data_ref = DataRef(spec.dataset, spec.seed, spec.data_dir, splits)
    defense = resolve_defense(spec.defense.name, spec.defense.params)
    budget = Budget(target_epsilon=spec.target_epsilon, delta=spec.delta,
                    noise_multiplier=spec.defense.noise_multiplier)
    trained = clock("train", lambda: defense.fit(data, budget, spec.seed, device=device, progress=progress))
    record["delta"] = float(trained.claim.delta)
    record["claim"] = claim_record(trained.claim)
    record["details"]["claim"] = trained.claim.to_dict()  # the whole claim (its event): the gate re-accounts it
    _record_init(trained, record, clock)
    record["utility"] = clock("utility", lambda: _utility(spec, trained, data, device))
    _account(trained, data, record, clock)
    checks = clock("claim checks", lambda: run_claim_checks(
        spec.defense.name, dict(spec.defense.params), trained, data, target_epsilon=spec.target_epsilon,
        delta=float(trained.claim.delta), seed=spec.seed))
    if checks is not None:
        record["claim_checks"] = checks[0]
    target = Target(trained, data, spec.defense.name, dict(spec.defense.params), budget, spec.seed, str(device),
                    data_ref)
    _attack(spec, target, executor, progress, record, results, clock)
    return None if checks is None else checks[1]


#: How the init was obtained this time (pretrained now, or read from the memory or disk cache) and how long it
#: took: they depend on which cell ran first, so they stay out of the record (the seconds go to timings.json).
INIT_RUN_KEYS = ("cached", "seconds")


def _record_init(trained: Any, record: dict[str, Any], clock: _StageClock) -> None:
    """Put the encoder's init (what it is: public pretraining's recipe, key, split) in the record; the time its
    pretraining took goes to the cell's timings as ``train.pretrain`` (a part of ``train``)."""
    if trained.classifier is not None or "init" not in trained.extras:
        return
    init = dict(trained.extras["init"])
    run = {k: init.pop(k) for k in INIT_RUN_KEYS if k in init}
    if run.get("seconds") is not None:
        clock.timings["train.pretrain"] = float(run["seconds"])
    record["details"]["init"] = init


def _utility(spec: CellSpec, trained: Any, data: Any, device: Any) -> dict[str, Any]:
    """The encoder's k-NN and linear-probe accuracy and the defense's own metrics; for an encoder trained from
    an init (every cell's encoder under ``[utility] per_example``), the utility panel beside it: its init, a random
    encoder, non-private training with the same steps (unless ``[utility] reference = false``), and the fraction
    of the random -> non-private gap closed (:mod:`privaudit.defenses.evaluation.utility`)."""
    from privaudit.defenses.evaluation.evaluation import encoder_utility
    from privaudit.defenses.evaluation.utility import utility_panel

    trained.model.eval()
    if spec.utility.per_example or (trained.classifier is None and "init" in trained.extras):
        panel = utility_panel(trained, data, k=spec.knn_k, device=device, nonprivate=spec.utility.reference,
                              per_example=spec.utility.per_example)
        u = dict(panel["trained"])
        u.update(trained.extras.get("utility", {}))
        u["panel"] = panel
        if spec.utility.per_example and "curve" in trained.extras:  # the ALM's privacy-utility curve, for its claims
            u["curve"] = trained.extras["curve"]
        return u
    u = encoder_utility(trained.model.represent, data.train.x, data.train.y, data.test.x, data.test.y,
                        k=spec.knn_k, device=device)
    u.update(trained.extras.get("utility", {}))
    return u


def _account(trained: Any, data: Any, record: dict[str, Any], clock: _StageClock) -> None:
    """Every accountant's epsilon of the claim the training emitted, the last-iterate heuristic beside them (not an
    accountant: no verdict reads it), and the run's size."""
    from privaudit.accountants import all_epsilons
    from privaudit.accountants.last_iterate import last_iterate_epsilon

    results, last = clock("epsilon", lambda: (all_epsilons(trained.claim), last_iterate_epsilon(trained.claim)))
    record["epsilon"] = {name: r.to_dict()["epsilon"] for name, r in results.items()}
    record["details"]["epsilon"] = {name: r.to_dict() for name, r in results.items()}
    record["details"]["last_iterate"] = last.to_dict()
    record["details"]["n_train"] = len(data.train)
    record["details"]["steps"] = len(trained.history.get("step", []))


def _attack(spec: CellSpec, target: Any, executor: ExecutorSpec, progress: bool, record: dict[str, Any],
            results: dict[str, AttackResult], clock: _StageClock) -> None:
    """Run the cell's attacks on the trained target, each a stage named by its label."""
    from privaudit.attacks.registry import make_attack

    attack_executor = executor.make(progress)
    for entry in spec.attacks:
        attack = make_attack(entry.name, entry.params)
        result = clock(entry.label, lambda: attack.run(target, executor=attack_executor, progress=progress))
        results[entry.label] = result
        record["attacks"][entry.label] = attack_record(result)
