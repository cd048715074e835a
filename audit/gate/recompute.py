"""The maths the gate needs from a saved bound: its epsilon recomputed from its counts at the family-wise level
(:func:`family_bound`), and what a white-box trajectory bound is compared with when a claim's step releases more
than the gradient (:func:`release_target`: the gradient release alone, or the whole claim when the bound's counts
carry the trials of DPCL's other releases).
"""

from __future__ import annotations

from typing import Any, Mapping

from privaudit.audit.report.records import CellRecord


def family_bound(bound: Mapping[str, Any], family: int) -> float | None:
    """The lower bound recomputed from its counts at 1 - (1 - confidence) / ``family`` (None: cannot)."""
    from privaudit.attacks.bounds.fdp import best_one_run_epsilon, fdp_one_run_parameter
    from privaudit.attacks.bounds.multi_run import hypothesis_test_epsilon
    from privaudit.attacks.bounds.one_run import one_run_epsilon

    c = bound.get("counts") or {}
    # the bound stored its confidence as 1 - beta; 1 - (1 - beta) is off by an ulp (1 - 0.95 = 0.050000000000000044),
    # which moves a bisected epsilon in its last bit: 12 significant digits recover beta itself, however small
    beta = float(f"{1.0 - float(bound['confidence']):.12g}") / family
    delta = float(bound.get("delta", 0.0))
    method = bound.get("method")
    if method == "one-run-best":
        return best_one_run_epsilon(c, beta=beta, delta=delta)
    if method == "one-run-fdp-mechanism":
        from privaudit.attacks.bounds.mechanism import mechanism_one_run_epsilon

        return mechanism_one_run_epsilon(c, beta=beta, delta=delta, relation=bound.get("relation", "add-remove"))
    if method == "white-box-trajectory":
        from privaudit.attacks.bounds.release_trajectory import combined_epsilon_from_counts
        from privaudit.attacks.bounds.trajectory import trajectory_epsilon_from_counts

        recompute = combined_epsilon_from_counts if c.get("releases") else trajectory_epsilon_from_counts
        return recompute(c, beta=beta, delta=delta, relation=bound.get("relation", "add-remove"))
    if method == "step-gdp":  # a per-cell step-audit pair: its mu_lb (compared with the per-step claim's mu)
        from privaudit.attacks.step.step_distinguisher import gdp_mu_recomputed

        return gdp_mu_recomputed(bound["gdp"], beta)
    if method == "one-run-fdp":
        return fdp_one_run_parameter(int(c["m"]), int(c["r"]), int(c["v"]), beta=beta, delta=delta)
    if method in ("one-run", "one-run-search", "one-run-paired"):
        beta /= int(c.get("grid_size", 1))
        return one_run_epsilon(int(c["m"]), int(c["r"]), int(c["v"]), beta=beta, delta=delta)
    if method == "clopper-pearson":
        return hypothesis_test_epsilon(int(c["false_positives"]), int(c["runs_out"]), int(c["false_negatives"]),
                                       int(c["runs_in"]), alpha=beta, delta=delta, tests=int(c.get("tests", 1)))[0]
    return None


def release_target(cell: CellRecord, bound: Mapping[str, Any]) -> tuple[float, str] | None:
    """What a white-box trajectory bound is compared with when the claim's step releases more than the gradient:
    (the gradient release's own epsilon, how it was computed), else None (the claim's epsilon).

    The canaries observe the gradient release alone. A claim whose steps also release other mechanisms (DPCL's
    noised similarity matrix, each mechanism with its own multiplier, composed as one Gaussian of multiplier
    z_eff < z_grad) states, through the multipliers its accountant composes, that the gradient release alone is
    E(z_grad): the claim's event with its Gaussian at z_grad (:func:`~privaudit.attacks.bounds.trajectory.
    gradient_event`). The bound eps_opt(E(1 / mu_lb)) exceeds eps_opt(E(z_grad)) exactly when mu_lb > 1 / z_grad
    (the optimistic PLD epsilon decreases with the multiplier), which under the claim happens with probability at
    most the bound's beta (trajectory_bound's theorem with z_c = z_grad): the comparison is as sound as the one
    with the whole claim's epsilon, and it sees a shortfall of the gradient's noise that the other releases'
    share of the budget would hide. Both are recomputed from the cell's saved claim (event and multipliers).

    A bound whose saved counts carry the trials of the step's other releases (DPCL's release probes) tests the whole
    step (:mod:`privaudit.attacks.bounds.release_trajectory`: mu_lb <= 1 / z_eff with probability 1 - beta when every
    release adds its claimed noise) and is compared with the whole claim: None. :func:`family_bound` recomputes it
    from those counts."""
    if bound.get("method") != "white-box-trajectory" or (bound.get("counts") or {}).get("releases"):
        return None
    from privaudit.accountants.events import event_from_dict
    from privaudit.attacks.bounds.trajectory import step_multiplier, trajectory_epsilon

    claim = cell.claim_in_full
    if claim.get("event") is None:
        return None
    event = event_from_dict(claim["event"])
    z_grad, z_event = step_multiplier(event, claim.get("params")), step_multiplier(event)
    if z_grad <= z_event * (1 + 1e-9):
        return None
    eps = trajectory_epsilon(1.0 / z_grad, event, bound.get("relation", "add-remove"), float(bound["delta"]))
    return eps, f"gradient release alone, z = {z_grad:.4g} (the claim: z_eff = {z_event:.4g})"


def release_mismatch(cell: CellRecord, bound: Mapping[str, Any]) -> str | None:
    """Why a bound's saved release trials do not test this cell's claim, or None: each group's trials are planned
    from the claimed multiplier of its releases, so a claim without one of them, or with another multiplier, is not
    the claim they were drawn for (evidence that does not match its cell: not compared)."""
    groups = (bound.get("counts") or {}).get("releases")
    zs = ((cell.claim_in_full.get("params") or {}).get("noise_multipliers") or {})
    for g in groups or ():
        saved = g.get("multiplier")
        for name in g.get("names") or ():
            if name not in zs or saved is None or abs(float(zs[name]) - float(saved)) > 1e-9 * float(saved):
                return (f"the bound's trials of release {name!r} were planned at z={saved!r}; the claim's multiplier "
                        f"for it is {zs.get(name)!r}: they do not test this claim")
    return None
