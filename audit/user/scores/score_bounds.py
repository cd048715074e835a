"""The maths of a score audit: the one-run design's grid of guesses (:func:`one_run_grid`), each design's sound
lower bound and its ceiling (:func:`design_bound`), the bound against the claim's own mechanism
(:func:`claim_mechanism_bound`), and the test that flags inverted scores (:func:`inverted_warning`);
:func:`privaudit.audit.user.scores.score_audit.audit_scores` runs them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from privaudit.attacks import metrics
from privaudit.attacks.bounds.lower_bound import EpsilonLowerBound
from privaudit.attacks.bounds.multi_run import multi_run_bound, multi_run_ceiling
from privaudit.attacks.bounds.one_run import one_run_bound_search_sorted, one_run_search_ceiling, sorted_guess_counts
from privaudit.audit.user.claim import UserClaim
from privaudit.core.errors import ConfigError


GRID_FRACTIONS = (0.01, 0.03, 0.1, 0.3)


ASSUMPTIONS = {
    "one-run": ("one-run design: valid only if each of the m scored examples was included in the one training "
                "run independently with probability 1/2 (a fair coin per example) and the scores were computed "
                "without looking at which were included; otherwise the epsilon is not a lower bound (ROC and AUC "
                "still describe the attack)"),
    "multi-run": ("multi-run design: valid only if every score comes from an independent training run on a fixed "
                  "neighbouring pair, members = runs on D' (the example included), non-members = runs on D"),
}


def one_run_grid(m: int) -> list[tuple[int, int]]:
    """The (k+, k-) pairs tried, fixed before the scores are seen: k = fraction x m for each fraction in
    :data:`GRID_FRACTIONS`, guessing "member" only (k- = 0) or both sides (k- = k+)."""
    grid: list[tuple[int, int]] = []
    for f in GRID_FRACTIONS:
        k = min(max(1, int(round(f * m))), m // 2) or 1
        for pair in ((k, 0), (k, k) if 2 * k <= m else (k, 0)):
            if pair not in grid:
                grid.append(pair)
    return grid


#: An AUC this many standard errors below 1/2 (Mann-Whitney's null variance) is a warning: the scores look inverted.
INVERTED_Z = 4.0


def inverted_warning(summary: dict[str, Any], kind: str) -> tuple[str, ...]:
    """A one-line warning when the AUC lies far below 1/2 for the stated ``kind``: z = (AUC - 1/2) / sd <
    -:data:`INVERTED_Z`, sd^2 = (n1 + n0 + 1) / (12 n1 n0), the AUC's variance when both sides share one
    distribution (Mann & Whitney 1947). Higher must mean "member": losses read as scores invert the attack."""
    n1, n0, auc = int(summary["n_members"]), int(summary["n_nonmembers"]), float(summary["auc"])
    z = (auc - 0.5) / float(np.sqrt((n1 + n0 + 1) / (12.0 * n1 * n0)))
    if z >= -INVERTED_Z:
        return ()
    hint = ("if the files hold losses, give --kind loss (score = -loss)" if kind == "score" else
            "if they hold scores (higher = member), give --kind score" if kind == "loss" else
            "check the labels and that higher means member")
    return (f"--kind {kind}: AUC {auc:.3g} lies far below 0.5 (z = {z:.3g}): the scores look inverted; {hint}",)


def design_bound(sides: metrics.SortedScores, originals: tuple[np.ndarray, np.ndarray] | None, design: str, beta: float,
           delta: float, claim: UserClaim | None, coin: str | None = None) -> tuple[EpsilonLowerBound, float]:
    """The design's sound (eps, delta) lower bound (:mod:`privaudit.audit.user.scores.score_audit` states the designs)
    and its
    ceiling."""
    relation, unit = ("add-remove", "example") if claim is None else (claim.relation, claim.unit)
    if design == "one-run":
        m = sides.n_members + sides.n_nonmembers
        grid = one_run_grid(m)
        bound = one_run_bound_search_sorted(sides, grid, beta=beta, delta=delta)
        ceiling = one_run_search_ceiling(m, grid, beta=beta, delta=delta)
    else:
        mem, non = originals
        if min(mem.size, non.size) < 4:
            raise ConfigError("multi-run design: needs at least 4 runs on each side")
        bound = multi_run_bound(mem, non, alpha=beta, delta=delta, threshold="split")
        ceiling = multi_run_ceiling(mem.size, non.size, alpha=beta, delta=delta)
    notes = bound.notes + (ASSUMPTIONS[design],) + ((coin,) if coin else ())
    return dataclasses.replace(bound, notes=notes, relation=relation, unit=unit), ceiling


def claim_mechanism_bound(sides: metrics.SortedScores, originals: tuple[np.ndarray, np.ndarray] | None, design: str,
               beta: float, claim: UserClaim | None) -> tuple[EpsilonLowerBound | None, float | None]:
    """With a claim that has a mechanism: the bound against its own trade-off curve, and that bound's ceiling."""
    from privaudit.attacks.bounds import mechanism as mb

    if claim is None or claim.event is None:
        return None, None
    if design == "multi-run":
        mem, non = originals
        return (mb.multi_run_mechanism_bound(mem, non, event=claim.event, relation=claim.relation, unit=claim.unit,
                                             beta=beta, delta=claim.delta),
                mb.multi_run_mechanism_ceiling(mem.size, non.size, event=claim.event, relation=claim.relation,
                                               beta=beta, delta=claim.delta))
    m = sides.n_members + sides.n_nonmembers
    ks = [k for k, kn in one_run_grid(m) if kn == 0]
    rng = np.random.default_rng(0)
    bounds = [mb.mechanism_one_run_bound_counts(m, *sorted_guess_counts(sides, k, 0, rng), k_pos=k, event=claim.event,
                                                relation=claim.relation, unit=claim.unit, beta=beta / len(ks),
                                                delta=claim.delta) for k in ks]
    best = max(bounds, key=lambda b: b.epsilon)
    ceiling = max(mb.mechanism_epsilon(m, k, k, claim.event, claim.relation, beta=beta / len(ks),
                                       delta=claim.delta)[0] for k in ks)
    label = f"best of {len(ks)} one-sided guess counts with Bonferroni correction (each at {1 - beta / len(ks):.4g}): "
    return dataclasses.replace(best, label=label + best.label, confidence=1 - beta), ceiling
