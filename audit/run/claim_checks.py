"""Each DP cell's claim checked as its run happened: the trace against the claim, the step as it ran.

A claim composes T per-step mechanisms. Two checks, run on every cell whose training records a trace
(:class:`privaudit.accountants.trace.trace.TrainingTrace`: the DP-SGD-style defenses, and DP-FedEmb / DP-FedAvg's
rounds,
:mod:`privaudit.defenses.fedemb.trace`), make "per-step audit plus a verified composition" the whole-training claim
(a federated round gets the trace check alone: its claim is not a DP-SGD-style step the step audit reruns):

* **Trace.** :func:`privaudit.accountants.trace.trace.check_trace`: training ran no more steps than the claim composes,
  each with at least the claimed noise multiplier, the claimed sampler and at most the claimed rate; the realised
  noise norms and batch sizes agree with the recorded stds and the claimed rate. A mismatch names the step and the
  field; a value short of the claim by the rounding of the precision it was computed in alone is not one, and is
  kept beside them (``rounding``, with the epsilon it would cost). The exact checks cannot fail a correct run; the
  measured ones fail one with probability at most :data:`~privaudit.accountants.trace.trace.TRACE_ALPHA` per cell.
* **The step as it ran.** :func:`privaudit.audit.step.audit.audit_trained_step`: the cell's own configuration,
  the smallest noise any step of its trace used, its trained parameters; the canary pair (a unit at exactly the
  claimed sensitivity) and the extreme pair (a Dirac-like image), each a sound GDP lower bound mu_lb on the step's
  mu against the claim's per-step mu = 1 / z. The gate recomputes each pair's mu_lb from its saved counts at its
  family-wise level (:func:`step_pair_mu`).

The evidence (the claim with its event, and the trace) is saved beside the cell (``claim_checks.json``) so that the
gate recomputes every verdict from it; the record keeps the findings and the step audit.
"""

from __future__ import annotations

from typing import Any, Mapping

from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.trace.trace import TRACE_ALPHA, TraceMismatch, check_trace, trace_rounding
from privaudit.attacks.step.step_distinguisher import gdp_mu_recomputed
from privaudit.core.errors import ConfigError

EVIDENCE_FILE = "claim_checks.json"
#: Draws per side of each per-cell step-audit pair.
CELL_STEP_DRAWS = 100_000


def run_claim_checks(name: str, params: Mapping[str, Any], trained: Any, data: Any, *, target_epsilon: float | None,
                     delta: float, seed: int, draws: int = CELL_STEP_DRAWS
                     ) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(the record's ``claim_checks``, the evidence to save) of a trained run with a trace; None without one."""
    from privaudit.audit.step.audit import audit_trained_step

    trace = (trained.extras or {}).get("trace")
    if trace is None:
        return None
    found = check_trace(trained.claim, trace)
    record: dict[str, Any] = {"trace": {"steps": len(trace["batch_size"]), "alpha": TRACE_ALPHA,
                                        "mismatches": [m.to_dict() for m in found]}}
    rounded = trace_rounding(trained.claim, trace)
    if rounded:  # within the rounding of the precision the code ran in: stated, not a mismatch
        record["trace"]["rounding"] = [m.to_dict() for m in rounded]
    if trained.claim.params.get("noise_multipliers"):  # a DP-SGD-style step (a federated round has no step audit here)
        audit = audit_trained_step(name, params, trained, data, target_epsilon=target_epsilon, delta=delta,
                                   draws=draws, seed=seed)
        step = audit.to_dict()
        step["pairs"] = [{k: v for k, v in p.items() if k != "seconds"} for p in step["pairs"]]  # no wall clock
        record["step_audit"] = step
    return record, {"claim": trained.claim.to_dict(), "trace": trace}


def trace_findings(evidence: Mapping[str, Any]) -> list[TraceMismatch]:
    """The trace check recomputed from the saved evidence (claim and trace)."""
    try:
        claim = PrivacyClaim.from_dict(evidence["claim"])
        trace = evidence["trace"]
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{EVIDENCE_FILE}: not the evidence of a claim check ({type(exc).__name__}: {exc})") from None
    return check_trace(claim, trace)


def recheck(checks: dict[str, Any], claim: Mapping[str, Any], evidence: Mapping[str, Any]) -> list[str]:
    """A saved cell's claim checks recomputed from its evidence: the trace check re-run on the saved trace against
    the cell's own claim (the one its epsilons are re-accounted from; the evidence's copy must be it), and its step
    audit's claim (per-step mu = 1 / z of the claim, the trace's smallest noise) re-derived from the two. The
    recomputed values replace ``checks``'; the pairs' bounds and verdicts are the step audits' own recomputation
    (:func:`privaudit.audit.verify.recheck.restep`). Returns the differences."""
    problems = [] if evidence.get("claim") == claim else [f"{EVIDENCE_FILE}'s claim is not the cell's claim"]
    try:
        found = [m.to_dict() for m in trace_findings({**evidence, "claim": claim})]
    except (ConfigError, KeyError, TypeError, ValueError) as exc:
        return problems + [f"its trace cannot be checked ({type(exc).__name__}: {exc})"]
    saved = checks.get("trace") or {}
    if [m["message"] for m in found] != [m.get("message") for m in saved.get("mismatches") or []]:
        problems.append(f"its trace check recomputes to {len(found)} mismatch(es) from {EVIDENCE_FILE}, the evidence "
                        f"says {len(saved.get('mismatches') or [])}")
    checks["trace"] = {**saved, "steps": len(evidence["trace"]["batch_size"]), "alpha": TRACE_ALPHA,
                       "mismatches": found}
    audit = checks.get("step_audit")
    if audit:
        problems += _restep_claim(audit, PrivacyClaim.from_dict(claim), evidence["trace"])
    return problems


def _restep_claim(audit: dict[str, Any], claim: PrivacyClaim, trace: Mapping[str, Any]) -> list[str]:
    """The cell step audit's claim re-derived from the cell's claim and trace (:func:`privaudit.audit.step.audit.
    trained_multipliers`); it replaces the saved one. Returns the differences."""
    import math

    from privaudit.attacks.bounds.gdp import gdp_epsilon
    from privaudit.audit.step.audit import trained_multipliers

    z = trained_multipliers(claim, trace)
    saved = dict(audit.get("claim") or {})
    again = {"noise_multiplier": z["z_claimed"], "noise_multiplier_added": z["z_actual"], "mu": 1.0 / z["z_claimed"]}
    again["epsilon"] = gdp_epsilon(again["mu"], float(saved.get("delta", claim.delta)))
    changed = [k for k, v in again.items() if not (isinstance(saved.get(k), (int, float))
                                                    and math.isclose(v, saved[k], rel_tol=1e-9))]
    audit["claim"] = {**saved, **again}
    return [f"its step audit's claim {k} recomputes to {again[k]:.6g} from its claim and trace, the evidence says "
            f"{saved.get(k)!r}" for k in changed]


def step_pair_mu(pair: Mapping[str, Any], beta: float) -> float:
    """A saved step-audit pair's GDP mu_lb recomputed at level ``beta`` (the gate's family-wise level)."""
    return gdp_mu_recomputed(pair["bounds"]["gdp"], beta)
