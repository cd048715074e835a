"""The maths of a model audit: each attack's report object with the ceiling of its design and, for a claim with a
mechanism, the bound against that mechanism (:func:`attack_summary`); the crafted canary's
(:func:`crafted_summary`).
"""

from __future__ import annotations

from typing import Any

from privaudit.audit.user.claim import UserClaim


def crafted_summary(result: Any, canary: dict[str, Any]) -> dict[str, Any]:
    s = result.summary()
    s["ceiling"] = canary["ceiling"]
    s["ceiling_design"] = "final-model multi-run: no error among the counted runs"
    if result.mechanism_bound is not None:
        s["mechanism_ceiling"] = canary["mechanism_ceiling"]
    s["heuristic"] = canary["heuristic"]
    s["runs_curve"] = canary["runs_curve"]
    return s


def attack_summary(result: Any, claim: UserClaim | None, beta: float, delta: float) -> dict[str, Any]:
    """An attack's report object with its ceiling and, for a claim with a mechanism, the bound against it."""
    from privaudit.attacks.bounds import mechanism as mb
    from privaudit.attacks.bounds.multi_run import multi_run_ceiling
    from privaudit.attacks.bounds.one_run import one_run_epsilon

    s = result.summary()
    c = result.bound.counts
    multi = result.attack == "canary"
    if multi:
        s["ceiling"] = multi_run_ceiling(int(result.n_members), int(result.n_nonmembers), alpha=beta, delta=delta)
        s["ceiling_design"] = "multi-run: no error among the counted runs"
    else:
        s["ceiling"] = one_run_epsilon(int(c["m"]), int(c["r"]), int(c["r"]), beta=beta, delta=delta)
        s["ceiling_design"] = f"one-run: k+={int(c['k_pos'])}, k-={int(c['k_neg'])} fixed in advance, every guess right"
    if claim is not None and claim.event is not None:
        result.mechanism_bound = _mechanism_bound(result, claim, beta, multi)
        s["eps_lb_mechanism"] = result.mechanism_bound.epsilon
        s["eps_lb_mechanism_method"] = result.mechanism_bound.label
        s["mechanism_bound"] = result.mechanism_bound.to_dict()
        s["mechanism_ceiling"] = (
            mb.multi_run_mechanism_ceiling(result.n_members, result.n_nonmembers, event=claim.event,
                                           relation=claim.relation, beta=beta, delta=claim.delta) if multi else
            result.mechanism_bound.counts["ceiling"])  # the guess ladder's: every guess of every rung right
    return s


def _mechanism_bound(result: Any, claim: UserClaim, beta: float, multi: bool) -> Any:
    from privaudit.attacks.bounds import mechanism as mb

    scores, inside = result.scores, result.membership
    if multi:
        return mb.multi_run_mechanism_bound(scores[inside], scores[~inside], event=claim.event,
                                            relation=claim.relation, beta=beta, delta=claim.delta,
                                            seed=int(result.config["split_seed"]))
    return mb.mechanism_one_run_bound(scores, inside, k_pos=int(result.bound.counts["k_pos"]), event=claim.event,
                                      relation=claim.relation, beta=beta, delta=claim.delta)
