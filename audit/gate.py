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
cell. Each attack states its bound at its own confidence (95% by default); with N comparisons, N such
bounds could each exceed a true claim with probability 5%. The gate therefore recomputes every
compared bound from its counts at level beta / N (Bonferroni; :func:`family_bound`), so that the
chance that *any* true claim fails the gate is at most beta: a CI gate that does not cry wolf.
"""

from __future__ import annotations

from typing import Any, Sequence

from audit.suite import GateConfig, SensitivityConfig

SOUND_METHODS = ("one-run", "one-run-search", "clopper-pearson")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def family_bound(bound: dict[str, Any], family: int) -> float | None:
    """The lower bound recomputed from its counts at 1 - (1 - confidence) / ``family`` (None: cannot)."""
    from attacks.bounds import hypothesis_test_epsilon, one_run_epsilon

    c = bound.get("counts") or {}
    beta = (1.0 - float(bound["confidence"])) / family
    delta = float(bound.get("delta", 0.0))
    method = bound.get("method")
    if method in ("one-run", "one-run-search"):
        beta /= int(c.get("grid_size", 1))
        return one_run_epsilon(int(c["m"]), int(c["r"]), int(c["v"]), beta=beta, delta=delta)
    if method == "clopper-pearson":
        return hypothesis_test_epsilon(int(c["false_positives"]), int(c["runs_out"]), int(c["false_negatives"]),
                                       int(c["runs_in"]), alpha=beta, delta=delta, tests=int(c.get("tests", 1)))[0]
    return None


def compare(cell: dict[str, Any], label: str, attack: dict[str, Any], slack: float) -> dict[str, Any]:
    """One bound-versus-claim comparison: the claim it is compared with, or why it is ``not comparable``.

    The verdict of a comparable pair is ``pending`` until :func:`decide` knows the family size.
    """
    eps_lb = attack.get("eps_lower_bound")
    bound = (attack.get("details") or {}).get("bound") or {}
    claim = cell["claim"] or {}
    out: dict[str, Any] = {"attack": label, "eps_lower_bound": eps_lb, "method": bound.get("method"),
                           "epsilon": None, "accountant": None, "gate_eps_lower_bound": None,
                           "gate_confidence": None, "verdict": "not comparable", "reason": None}

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
    out.update(epsilon=applicable[accountant], accountant=accountant, verdict="pending",
               confidence=bound.get("confidence"), bound=bound)
    return out


def decide(comparison: dict[str, Any], family: int, slack: float) -> dict[str, Any]:
    """Settle a pending comparison with the bound at family-wise confidence over ``family`` comparisons."""
    bound = comparison.pop("bound", None)
    confidence = comparison.pop("confidence", None)
    if comparison["verdict"] != "pending":
        return comparison
    recomputed = family_bound(bound, family)
    if recomputed is None:  # a sound method without counts to recompute from: no correction possible
        recomputed, level = comparison["eps_lower_bound"], float(confidence)
    else:
        level = 1.0 - (1.0 - float(confidence)) / family
    comparison["gate_eps_lower_bound"] = recomputed
    comparison["gate_confidence"] = level
    comparison["verdict"] = "exceeds" if recomputed > (1.0 + slack) * comparison["epsilon"] else "consistent"
    return comparison


def gate_cells(cells: Sequence[dict[str, Any]], config: GateConfig) -> list[dict[str, Any]]:
    """Every cell's gate: its comparisons (bounds at family-wise confidence over all cells) and reasons."""
    pending = []
    for cell in cells:
        error = (cell.get("details") or {}).get("error")
        pending.append(None if error else [compare(cell, label, a, config.epsilon_slack)
                                           for label, a in cell["attacks"].items()])
    family = max(1, sum(c["verdict"] == "pending" for cs in pending if cs for c in cs))
    gates = []
    for cell, comparisons in zip(cells, pending):
        cid = cell["id"]
        if comparisons is None:
            reasons = [f"cell {cid} errored: {cell['details']['error']}"] if config.fail_on_error else []
            gates.append({"status": "fail" if reasons else "pass", "reasons": reasons, "comparisons": []})
            continue
        comparisons = [decide(c, family, config.epsilon_slack) for c in comparisons]
        claim = cell["claim"] or {}
        reasons = []
        for c in comparisons:
            if c["verdict"] == "exceeds":
                reasons.append(
                    f"cell {cid}: {c['attack']}'s sound lower bound eps_lb = {_fmt(c['gate_eps_lower_bound'])} "
                    f"({100 * c['gate_confidence']:.4g}% confidence, family-wise over {family}) exceeds the "
                    f"smallest applicable epsilon {_fmt(c['epsilon'])} ({c['accountant']}, {claim.get('relation')}, "
                    f"per {claim.get('unit')}, delta={claim.get('delta'):.3g})")
        private = not any(d.get("infinite") for d in ((cell.get("details") or {}).get("epsilon") or {}).values())
        if config.max_auc is not None and private and claim.get("paper_accountant") != "none":
            for label, a in cell["attacks"].items():
                if a.get("auc") is not None and a["auc"] >= config.max_auc:
                    reasons.append(f"cell {cid}: {label} reaches AUC {a['auc']:.4g} >= gate.max_auc "
                                   f"{config.max_auc:g}")
        gates.append({"status": "fail" if reasons else "pass", "reasons": reasons, "comparisons": comparisons})
    return gates


def sensitivity_gate(results: Sequence[dict[str, Any]], config: SensitivityConfig | None,
                     gate: GateConfig) -> tuple[list[str], list[str]]:
    """Reasons to fail and notes from the sensitivity verdicts (``expect`` documents known-broken claims)."""
    if config is None:
        return [], []
    reasons, notes = [], []
    expect = config.expect
    from audit.sensitivity import select

    seen = {r.get("claim") for r in results}
    for claim in (s.id for s in select(None if config.claims is None else list(config.claims))):
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
        level = min(c["gate_confidence"] for c in comparisons)
        notes.append(f"{len(comparisons)} sound bound-versus-claim comparisons; each bound is recomputed at "
                     f"{100 * level:.4g}% confidence (Bonferroni over the {len(comparisons)}), so a true claim fails "
                     f"this gate by chance with probability at most {100 * len(comparisons) * (1 - level):.3g}%")
    if skipped:
        notes.append(f"{len(skipped)} bounds were not compared with their claim (see each cell's comparisons "
                     "for the reason)")
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "notes": notes}
