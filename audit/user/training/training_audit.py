"""Audit the DP training code users actually run: an unmodified Opacus recipe, white-box, in one run.

``audit_training(factory, train_fn, members=..., delta=...)`` runs the user's ``train(model, x, y, *, seed)``
(audit-model's contract: it trains ``factory()`` in place with Opacus and returns Opacus' accountant, or nothing)
while :class:`~privaudit.defenses.watch.opacus_watch.OpacusWatch` observes every release Opacus makes. Nothing in the
user's code changes. The audit, in order:

1. **probe and neighbours** (:mod:`privaudit.audit.user.training.training_neighbours`): the recipe replayed, first
releases only,
   on the members resized to n - radius .. n + radius (the add-one and remove-one neighbours among them); any
   quantity of the mechanism that follows the dataset's size refutes the claim, named with its values; and the first
   release replayed with its own batch and noise plus one added record, and less one of the user's
   (:mod:`privaudit.audit.user.training.release_replay`): a release that moves by more than the clip refutes it;
2. **the audited run**, with white-box gradient canaries in the optimizer step
   (:mod:`privaudit.audit.user.training.training_canaries`), whose trace
   (:class:`~privaudit.accountants.trace.trace_record.
   TrainingTrace`) is checked against the claim (:func:`~privaudit.accountants.trace.trace.check_trace`: Opacus'
   accountant inputs against what ran: sampling as drawn against the rate, steps against the accountant's history,
   the noise multiplier, every other Gaussian query the optimizer noised composed in, and the noise drawn, the clip as
   applied, the normaliser, reused noise, each exact check at the precision the code ran in: a value short of the
   claim by its rounding alone is stated as rounding, not a finding), plus every tensor that received no noise at
   all (exact);
3. the canaries' **trajectory bound** and the **released-noise checks** on their residuals.

The claim: the returned accountant's (else the last accountant the run stepped) history, its epsilon by
privaudit's accountant of the same kind at ``delta`` (:func:`~privaudit.audit.user.claim.history_claim`), or
``claimed_epsilon`` over that mechanism. The verdict is **refuted** when any check finds the run is not the claim's
mechanism or the trajectory bound exceeds the claimed epsilon; every check is named.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from privaudit.audit.user.training.training_runs import Recipe, Stages, run_watched, time_plain
from privaudit.audit.user.claim import UserClaim, Verdict, history_claim, judge
from privaudit.core.errors import ConfigError

REPORT_FILES = ("report.json", "report.md", "report.html", "roc.png", "histogram.png", "trace.json")
#: Sizes replayed on each side of the members' count, and releases per replay (the quantities compared are read
#: from a replay's first release).
SIZE_RADIUS, REPLAY_STEPS = 4, 1
#: The accountants' options for the claim's epsilons: PLD at a 1e-3 grid (its pessimistic epsilon moves by under
#: 1e-4 relative from the 1e-4 grid on the recipe's claims, at a tenth of the cost; an upper bound either way).
CLAIM_OPTIONS = {"pld": {"value_discretization_interval": 1e-3}}


@dataclass
class TrainingAudit:
    """What :func:`audit_training` found: the claim, verdict, findings (each naming its check) and measurements."""

    inputs: dict[str, str]
    claim: UserClaim
    verdict: Verdict
    findings: list[dict[str, Any]]
    canary: dict[str, Any]
    noise: dict[str, Any]
    sizes: dict[str, Any]
    costs: dict[str, float]
    trace: dict[str, Any] = field(repr=False)
    result: Any = field(default=None, repr=False, compare=False)
    release_replay: dict[str, Any] = field(default_factory=dict)

    @property
    def refuted(self) -> bool:
        return self.verdict.verdict == "refuted"

    @property
    def folded(self) -> list[dict[str, Any]]:
        """The findings one per check, their steps as ranges (:func:`privaudit.audit.findings.fold_findings`);
        ``findings`` keeps every one."""
        from privaudit.audit.findings import fold_findings

        return fold_findings(self.findings, steps=self.trace.get("steps"))

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": self.inputs, "claim": self.claim.to_dict(), "verdict": self.verdict.verdict,
                "verdict_detail": self.verdict.to_dict(), "findings": self.findings, "canary": self.canary,
                "noise_checks": self.noise, "neighbours": self.sizes, "release_replay": self.release_replay,
                "costs": self.costs}

    def files(self) -> dict[str, bytes]:
        from privaudit.audit.user.training.training_report import report_files

        return report_files(self)


def _recipe(factory: str, train_fn: str, seed: int) -> Recipe:
    from privaudit.defenses.training.seeding import derive_seed
    from privaudit.defenses.user_model import load_callable

    return Recipe(load_callable(factory, "--factory"), load_callable(train_fn, "--train-fn"), factory, train_fn,
                  int(seed), derive_seed(seed, "training-init") % (2 ** 32))


def _members(members: Any, nonmembers: Any) -> tuple[torch.Tensor, torch.Tensor, dict[str, str]]:
    from privaudit.core.datasets.user_files import check_distinct, read_examples

    if members is None:
        raise ConfigError("--members: required: the examples your training function trains on")
    part = read_examples(members, "--members")
    inputs = {"members": part.source}
    if nonmembers is not None:
        check_distinct(members, nonmembers)
        inputs["nonmembers"] = read_examples(nonmembers, "--nonmembers").source
    return torch.from_numpy(part.x), torch.from_numpy(part.y), inputs


def returned_accountant(returned: Any, train_ref: str) -> Any:
    """What ``train`` returned, checked against the contract: an accountant Opacus' API reads (its ``mechanism()``,
    one of Opacus' rdp, prv or gdp, and its ``history`` of (noise multiplier, sample rate, steps)), or None (the
    claim is then the accountant the run stepped). Anything else is bad input, one line."""
    from privaudit.audit.user.claim import OPACUS_ACCOUNTANTS

    if returned is None:
        return None
    mechanism = getattr(returned, "mechanism", None)
    kind = mechanism() if callable(mechanism) else None
    history = getattr(returned, "history", None)
    if kind in OPACUS_ACCOUNTANTS and isinstance(history, list) and all(
            isinstance(h, (tuple, list)) and len(h) == 3 for h in history):
        return returned
    shown = repr(returned).splitlines()[0] if repr(returned) else ""
    raise ConfigError(f"--train-fn {train_ref!r}: returned {type(returned).__name__} "
                      f"{shown[:60] + ('...' if len(shown) > 60 else '')}; it must return its Opacus accountant "
                      f"(mechanism() one of {', '.join(OPACUS_ACCOUNTANTS)}, with a history: e.g. "
                      "privacy_engine.accountant) or nothing (the claim is then the accountant the run stepped)")


def _claim(returned: Any, watch: Any, delta: float, claimed_epsilon: float | None, train_ref: str) -> UserClaim:
    """The claim of the accountant ``train`` returned (else the one the run stepped, said in the claim's source), at
    ``delta``."""
    acc = returned_accountant(returned, train_ref)
    what = "accountant the training function returned"
    if acc is None:
        acc, what = watch.accountant, "accountant the run stepped (the training function returned none)"
    if acc is None or not getattr(acc, "history", None):
        raise ConfigError(f"--train-fn {train_ref!r}: no Opacus accountant was returned or stepped: the claim's "
                          "mechanism (noise multiplier, sample rate, steps) is unknown; return engine.accountant")
    return history_claim(acc.mechanism(), [tuple(h) for h in acc.history], delta, epsilon=claimed_epsilon,
                         where=f"--train-fn {train_ref!r}: its accountant", what=what,
                         source="the training function's Opacus accountant", options=CLAIM_OPTIONS)


def _trace_findings(claim: UserClaim, watch: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from privaudit.accountants import PrivacyClaim
    from privaudit.accountants.trace.trace import check_trace, trace_rounding
    from privaudit.accountants.trace.trace_record import claimed_steps

    first = claimed_steps(claim.event)[0]
    trace = watch.trace(getattr(first, "rate", 0.0))
    pc = PrivacyClaim(event=claim.event, relation=claim.relation, unit=claim.unit, delta=claim.delta,
                      paper_accountant="rdp", sampler="poisson", source=claim.source)
    found = [{"check": f"trace: {m.field}", "step": m.step, "claimed": m.claimed, "observed": m.observed,
              "message": m.message} for m in check_trace(pc, trace)]
    rounded = [{"check": f"trace: {m.field}", "step": m.step, "message": m.message} for m in trace_rounding(pc, trace)]
    names = [n for n, _ in watch.optimizer["tensors"]]
    silent = sorted({names[j] for r in watch.steps for j in r.silent_tensors})
    if silent:
        found.append({"check": "noise per tensor", "step": None,
                      "message": f"no noise at all was added to tensor(s) {silent} in some release: a continuous "
                                 "Gaussian is never exactly zero (epsilon is infinite)"})
    other = [q for r in watch.steps for q in r.other_queries]
    return found, {**trace.to_dict(), **({"other_queries": other} if other else {}),
                   **({"rounding": rounded} if rounded else {})}


def audit_training(factory: str, train_fn: str, *, members: Any = None, nonmembers: Any = None,
                   delta: float | None = None, claimed_epsilon: float | None = None, beta: float = 0.05,
                   seed: int = 0, size_radius: int = SIZE_RADIUS, out: str | Path | None = None,
                   force: bool = False, time_training: bool = True, progress: bool = False) -> TrainingAudit:
    """The audit of the module docstring. ``members``: the records ``train`` trains on (.npz with x, y; CSV;
    ImageFolder); ``nonmembers``: optional, checked distinct and recorded. ``beta``: 1 - confidence of the bounds.
    ``size_radius``: sizes replayed on each side. ``out``: the report (nothing is written on bad input).
    ``progress``: the stages on a bar on a terminal."""
    from privaudit.audit.findings import fold_findings
    from privaudit.audit.user import out_dir
    from privaudit.audit.user.training import training_canaries as tc
    from privaudit.audit.user.training.release_replay import release_replay
    from privaudit.audit.user.training.training_neighbours import replay_sizes, size_findings

    if delta is None or not 0 < float(delta) < 1:
        raise ConfigError(f"--delta: required, in (0, 1): the delta of the claim, got {delta!r}")
    if not 0 < beta < 1:
        raise ConfigError(f"--confidence: must lie in (0, 1), got {1 - beta!r}")
    if not 1 <= int(size_radius) <= 1000:
        raise ConfigError(f"--size-radius: must lie in [1, 1000], got {size_radius!r}")
    recipe = _recipe(factory, train_fn, seed)
    x, y, inputs = _members(members, nonmembers)
    if out is not None:
        out_dir.prepare(out, REPORT_FILES, force=force)
    start, stage = time.perf_counter(), Stages(progress, 4 if time_training else 3)
    stage(f"the first release replayed at {2 * int(size_radius) + 1} dataset sizes and with one record added and "
          "one removed")
    replays = replay_sizes(recipe, x, y, radius=int(size_radius), steps=REPLAY_STEPS)
    distance, distance_found = release_replay(recipe, x, y)
    replay_s = time.perf_counter() - start
    first = replays[len(x)]
    rate, clip = first["accountant_rate"] or first["sample_rate"], first["clip"]
    z = first["accountant_multiplier"] or first["noise_multiplier"]
    if rate is None:
        raise ConfigError(f"--train-fn {train_fn!r}: its first release was seen by no accountant and drawn by no "
                          "Opacus Poisson sampler: no sample rate to audit against")
    steps_planned = first["batches_per_epoch"] or 1
    canaries, cfg, source = tc.plan_canaries(first["tensors"], clip=clip, multiplier=z, rate=rate,
                                             seed=seed, beta=beta, steps_planned=steps_planned)
    stage("the audited run, gradient canaries in its optimizer step")
    run = run_watched(recipe, x, y, canaries=source)
    stage("the trace against the claim, the trajectory bound, the released noise")
    claim = _claim(run.returned, run.watch, float(delta), claimed_epsilon, train_fn)
    findings = size_findings(replays, len(x)) + distance_found
    trace_found, trace = _trace_findings(claim, run.watch)
    findings += trace_found
    from privaudit.accountants.trace.trace_record import claimed_steps

    result = tc.canary_result(canaries, cfg, claim=claim, steps=len(claimed_steps(claim.event)), delta=float(delta),
                              seed=seed, rate=rate, multiplier=z)
    counts = canaries.trajectory.to_dict() if canaries.trajectory is not None else {}
    noise, noise_found = tc.noise_findings(counts, z) if counts else ({}, [])
    findings += noise_found
    verdict, canary = _verdict(claim, result, counts, fold_findings(findings, steps=trace.get("steps")), beta, z)
    analysis_s = time.perf_counter() - start - replay_s - run.seconds
    if time_training:
        stage("training alone, timed (the audit's cost beside it)")
    plain = time_plain(recipe, x, y) if time_training else None
    stage.close()
    costs = {"audited_run_s": run.seconds, "replays": len(replays) + distance["runs"], "replays_s": replay_s,
             "analysis_s": analysis_s,
             "audit_s": time.perf_counter() - start - (plain or 0.0), "training_alone_s": plain}
    audit = TrainingAudit(inputs={**inputs, "factory": factory, "train_fn": train_fn}, claim=claim, verdict=verdict,
                          findings=findings, canary=canary, noise=noise,
                          sizes={str(k): {q: v for q, v in r.items() if q != "tensors"} for k, r in replays.items()},
                          costs=costs, trace=trace, result=result, release_replay=distance)
    if out is not None:
        out_dir.write(out, audit.files())
    return audit


def _verdict(claim: UserClaim, result: Any, counts: dict[str, Any], findings: list[dict[str, Any]],
             beta: float, multiplier: float) -> tuple[Verdict, dict[str, Any]]:
    """The verdict: the trajectory bound (else the one-run bound) against the claimed epsilon, refuted outright by
    any finding (``findings`` folded one per check; each check named in the statement). The canaries' record keeps
    the bound's own verdict (``bound_verdict``)."""
    import dataclasses

    from privaudit.audit.user.training.training_canaries import bound_at_claim, trajectory_ceiling

    bound = result.trajectory_bound or result.bound
    ceiling, capped = trajectory_ceiling(counts, claim.event, beta=beta, delta=claim.delta, multiplier=multiplier) \
        if result.trajectory_bound is not None else (float("inf"), False)
    verdict = judge(claim, bound.epsilon, ceiling, 1 - beta, bound.label)
    if capped:
        verdict = dataclasses.replace(verdict, statement=verdict.statement.replace("could show up to",
                                                                                   "could show at least"))
    at_claim = bound_at_claim(claim.event, multiplier=multiplier, delta=claim.delta) \
        if result.trajectory_bound is not None else None
    canary = {"eps_lb_trajectory": None if result.trajectory_bound is None else result.trajectory_bound.epsilon,
              "eps_lb_one_run": result.bound.epsilon, "ceiling": ceiling, "ceiling_capped": capped,
              "eps_bound_at_claim": at_claim, "ratio_to_bound_at_claim": None if not at_claim or
              result.trajectory_bound is None else result.trajectory_bound.epsilon / at_claim,
              "eps_lb_mechanism": None if result.mechanism_bound is None else result.mechanism_bound.epsilon,
              "ratio_to_claim": None if result.trajectory_bound is None else
              result.trajectory_bound.epsilon / claim.epsilon, "canaries": int(result.counts["n_canaries"]),
              "steps": int(result.counts["n_steps"]), "trajectory": counts, "notes": list(bound.notes),
              "bound_verdict": verdict.verdict}
    if findings:
        checks = sorted({f["check"] for f in findings})
        verdict = dataclasses.replace(verdict, verdict="refuted", statement=(
            f"refuted: the run is not the claim's mechanism ({'; '.join(checks)}): {findings[0]['message']}. "
            f"Canary bound: epsilon >= {bound.epsilon:.3g}, claimed {claim.epsilon:g}"))
    return verdict, canary
