"""Your own audits as JUnit test cases (:mod:`privaudit.audit.junit`): audit-scores', audit-model's and
audit-training's verdicts, one case per check, each failure carrying its statement.

* audit-scores: the bound against your claim (skipped without a claim);
* audit-model: one case per attack; the verdict's test fails when it refutes the claim, the others are reported
  beside it (their bounds in the case's output; the verdict rests on one test fixed before any score);
* audit-training: the trajectory bound against the claim, and each check of the run (the neighbours replayed, the
  trace against the claim, the released noise and its structure), failed with its findings folded one line per
  check (:func:`privaudit.audit.findings.fold_findings`).
"""

from __future__ import annotations

from typing import Any

from privaudit.audit.junit import Case

NO_CLAIM = "no claim given (--claimed-epsilon E --delta D, or --opacus-state FILE): nothing to judge"


def _num(x: Any) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _claimed(claim: Any) -> str:
    return "none" if claim is None else (f"epsilon {claim.epsilon:.6g} at delta {claim.delta:g} ({claim.relation}, "
                                         f"per {claim.unit}; {claim.source})")


def _verdict_case(classname: str, name: str, verdict: Any, details: str) -> Case:
    if verdict is None:
        return Case(classname, name, "skipped", NO_CLAIM, details)
    if verdict.verdict == "refuted":
        return Case(classname, name, "failed", verdict.statement, details)
    return Case(classname, name, "passed", "", f"{verdict.statement}\n{details}")


def score_cases(audit: Any) -> list[Case]:
    """audit-scores: its one bound against the claim."""
    details = (f"bound: {audit.bound.label}: epsilon >= {_num(audit.bound.epsilon)} (ceiling {_num(audit.ceiling)})"
               f"\nclaim: {_claimed(audit.claim)}")
    return [_verdict_case("audit-scores", f"{audit.design} bound", audit.verdict, details)]


def model_cases(audit: Any) -> list[Case]:
    """audit-model: one case per attack; only the verdict's test can fail."""
    out = []
    for name, s in audit.attacks.items():
        details = (f"bound: {s.get('eps_lb_method')}: epsilon >= {_num(s.get('eps_lower_bound'))} (ceiling "
                   f"{_num(s.get('ceiling'))}); AUC {_num(s.get('auc'))}\nclaim: {_claimed(audit.claim)}")
        if audit.verdict is not None and name != audit.verdict_attack:
            out.append(Case("audit-model", name, "passed", "", f"reported beside the verdict's test "
                                                               f"({audit.verdict_attack}), not judged\n{details}"))
        else:
            out.append(_verdict_case("audit-model", name, audit.verdict, details))
    return out


#: The checks of a training audit, each a case (a finding of a check not named here is a failing case of its own).
TRAINING_CHECKS = ("neighbours", "trace", "released noise", "noise independence across steps",
                   "noise independence across coordinates", "noise per tensor")


def training_cases(audit: Any) -> list[Case]:
    """audit-training: the trajectory bound against the claim, then each check, failed with its folded findings."""
    c, claim = audit.canary, audit.claim
    bound = c["eps_lb_trajectory"] if c["eps_lb_trajectory"] is not None else c["eps_lb_one_run"]
    details = (f"bound: epsilon >= {_num(bound)} from {c['canaries']} canaries over {c['steps']} releases (ceiling "
               f"{_num(c['ceiling'])})\nclaim: {_claimed(claim)}")
    refuted = c.get("bound_verdict") == "refuted"
    cases = [Case("audit-training", "trajectory bound", "failed" if refuted else "passed",
                  f"epsilon >= {_num(bound)} > claimed {claim.epsilon:.6g}" if refuted else "", details)]
    by_check: dict[str, list[str]] = {}
    for f in audit.folded:
        family = "trace" if f["check"].startswith("trace: ") else f["check"]
        by_check.setdefault(family, []).append(f"{f['check']}: {f['message']}")
    for check in (*TRAINING_CHECKS, *(k for k in by_check if k not in TRAINING_CHECKS)):
        lines = by_check.get(check)
        cases.append(Case("audit-training", check, "failed" if lines else "passed", "\n".join(lines or ()), ""))
    return cases
