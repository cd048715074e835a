"""The CI gate: does measured leakage contradict a claim, did a sensitivity claim break, did a cell fail?

A comparison between an empirical lower bound and a claimed epsilon is made only where it is sound:

* the bound must be a sound lower bound (one-run, Steinke et al. 2023; Clopper-Pearson multi-run);
  the Gaussian-DP variant assumes a Gaussian trade-off curve and is never gated on;
* every bound here is on *example-level add/remove* epsilon (one inclusion bit is one example added
  or removed). A replace-one claim does not bound add/remove epsilon (a replace-one-DP mechanism may
  publish the dataset size exactly), and a user-level claim covers neighbours that differ in a whole
  user, not in one example of a user; both are marked "not comparable" with that reason rather than
  compared silently;
* the bound's delta must be at least the claim's: an (eps, delta_c)-DP mechanism is
  (eps, delta_b)-DP for every delta_b >= delta_c, so a bound at delta_b exceeding eps contradicts it;
* the claimed epsilon is the smallest one any applicable accountant gives for the claim at its delta.

A bound exceeding (1 + ``epsilon_slack``) times that epsilon fails the gate with a reason naming the
cell. Each bound holds with its stated confidence (95% by default), so with many comparisons a
perfectly tight claim could fail by chance: the gate's notes state the number of comparisons.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from audit.suite import GateConfig, SensitivityConfig

SOUND_METHODS = ("one-run", "one-run-search", "clopper-pearson")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def compare(cell: dict[str, Any], label: str, attack: dict[str, Any], slack: float) -> dict[str, Any]:
    """One bound-versus-claim comparison: verdict ``consistent``, ``exceeds`` or ``not comparable``."""
    eps_lb = attack.get("eps_lower_bound")
    bound = (attack.get("details") or {}).get("bound") or {}
    claim = cell["claim"] or {}
    out: dict[str, Any] = {"attack": label, "eps_lower_bound": eps_lb, "method": bound.get("method"),
                           "epsilon": None, "accountant": None, "verdict": "not comparable", "reason": None}

    def not_comparable(reason: str) -> dict[str, Any]:
        out["reason"] = reason
        return out

    if eps_lb is None:
        return not_comparable("the attack gives no sound lower bound")
    details = (cell.get("details") or {}).get("epsilon") or {}
    if any(d.get("infinite") for d in details.values()) or claim.get("paper_accountant") == "none":
        return not_comparable("no privacy claim (epsilon is infinite)")
    if bound.get("method") not in SOUND_METHODS:
        return not_comparable(f"bound method {bound.get('method')!r} is not a sound lower bound in general")
    if bound.get("relation", "add-remove") != "add-remove":
        return not_comparable(f"the bound is on {bound.get('relation')} epsilon")
    if claim.get("relation") != "add-remove":
        return not_comparable(f"the claim is {claim.get('relation')}: replace-one epsilon does not bound the "
                              "example-level add/remove epsilon the bound is on")
    if claim.get("unit") != "example":
        return not_comparable(f"the claim protects a {claim.get('unit')}; the bound's inclusion bit is one "
                              "example, not a whole user")
    applicable = {k: v for k, v in cell["epsilon"].items() if v is not None}
    if not applicable:
        return not_comparable("no accountant gives an epsilon for this claim")
    claim_delta = float(claim.get("delta") or 0.0)
    bound_delta = float(bound.get("delta", 0.0))
    if bound_delta < claim_delta:
        return not_comparable(f"the bound is at delta={bound_delta:g} < the claim's delta={claim_delta:g}")
    accountant = min(applicable, key=lambda k: applicable[k])
    eps = applicable[accountant]
    out.update(epsilon=eps, accountant=accountant)
    out["verdict"] = "exceeds" if eps_lb > (1.0 + slack) * eps else "consistent"
    return out


def cell_gate(cell: dict[str, Any], config: GateConfig) -> dict[str, Any]:
    """The gate of one cell: its comparisons and the reasons it fails (empty when it passes)."""
    cid = cell["id"]
    error = (cell.get("details") or {}).get("error")
    reasons: list[str] = []
    if error:
        if config.fail_on_error:
            reasons.append(f"cell {cid} errored: {error}")
        return {"status": "fail" if reasons else "pass", "reasons": reasons, "comparisons": []}
    comparisons = [compare(cell, label, a, config.epsilon_slack) for label, a in cell["attacks"].items()]
    claim = cell["claim"] or {}
    for c in comparisons:
        if c["verdict"] == "exceeds":
            reasons.append(
                f"cell {cid}: {c['attack']}'s sound lower bound eps_lb = {_fmt(c['eps_lower_bound'])} exceeds the "
                f"smallest applicable epsilon {_fmt(c['epsilon'])} ({c['accountant']}, {claim.get('relation')}, "
                f"per {claim.get('unit')}, delta={claim.get('delta'):.3g})")
    private = not any(d.get("infinite") for d in ((cell.get("details") or {}).get("epsilon") or {}).values())
    if config.max_auc is not None and private and claim.get("paper_accountant") != "none":
        for label, a in cell["attacks"].items():
            if a.get("auc") is not None and a["auc"] >= config.max_auc:
                reasons.append(f"cell {cid}: {label} reaches AUC {a['auc']:.4g} >= gate.max_auc {config.max_auc:g}")
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "comparisons": comparisons}


def sensitivity_gate(results: Sequence[dict[str, Any]], config: SensitivityConfig | None,
                     gate: GateConfig) -> tuple[list[str], list[str]]:
    """Reasons to fail and notes from the sensitivity verdicts (``expect`` documents known-broken claims)."""
    if config is None:
        return [], []
    reasons, notes = [], []
    expect = config.expect
    seen = {r.get("claim") for r in results}
    for claim in config.claims or ():
        if claim not in seen:
            reasons.append(f"sensitivity claim {claim}: no result was returned")
    for r in results:
        claim, verdict = r.get("claim"), r.get("verdict")
        expected = expect.get(claim, "holds")
        where = f" (witness: {r['witness']})" if r.get("witness") else ""
        if verdict == "violated":
            text = (f"sensitivity claim {claim} ({r.get('source')}) violated: observed {_fmt(r.get('observed'))} > "
                    f"bound {_fmt(r.get('bound'))}{where}")
            if expected == "violated":
                notes.append(text + "; expected by the suite (known-broken claim)")
            elif gate.fail_on_sensitivity:
                reasons.append(text)
            else:
                notes.append(text + "; not gated (gate.fail_on_sensitivity = false)")
        elif expected == "violated":
            notes.append(f"sensitivity claim {claim} was expected violated but is {verdict}; update the suite's "
                         "expect table if the claim was fixed")
        elif verdict == "inconclusive":
            notes.append(f"sensitivity claim {claim} is inconclusive within the budget")
    return reasons, notes


def suite_gate(cells: Sequence[dict[str, Any]], sensitivity: Sequence[dict[str, Any]],
               sensitivity_config: SensitivityConfig | None, config: GateConfig,
               errors: Sequence[str] = ()) -> dict[str, Any]:
    """The report's gate: status ``pass``/``fail``, every reason, and notes on how to read it."""
    reasons: list[str] = [r for c in cells for r in c["gate"]["reasons"]]
    s_reasons, notes = sensitivity_gate(sensitivity, sensitivity_config, config)
    reasons += s_reasons
    reasons += list(errors)
    comparisons = [c for cell in cells for c in cell["gate"]["comparisons"] if c["verdict"] != "not comparable"]
    skipped = [c for cell in cells for c in cell["gate"]["comparisons"]
               if c["verdict"] == "not comparable" and c["eps_lower_bound"] is not None
               and c["reason"] != "no privacy claim (epsilon is infinite)"]
    if comparisons:
        levels = [x for x in (_confidence(cell, c["attack"]) for cell in cells for c in cell["gate"]["comparisons"]
                              if c["verdict"] != "not comparable") if x is not None]
        text = f"{len(comparisons)} sound bound-versus-claim comparisons"
        if levels:
            low = min(levels)
            text += (f", each at >= {100 * low:.0f}% confidence: were every claim exactly tight, the chance that "
                     f"one fails by chance alone is at most {min(1.0, len(comparisons) * (1 - low)):.2g}")
        notes.append(text)
    if skipped:
        notes.append(f"{len(skipped)} bounds were not compared with their claim (see each cell's comparisons "
                     "for the reason)")
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "notes": notes}


def _confidence(cell: dict[str, Any], label: str) -> float | None:
    bound = ((cell["attacks"].get(label) or {}).get("details") or {}).get("bound") or {}
    c = bound.get("confidence")
    return None if c is None or not math.isfinite(c) else round(float(c), 6)
