"""Size an audit before training: the smallest design whose ceiling exceeds the claimed epsilon.

A design's **ceiling** is the largest lower bound it can give, reached when every guess is right (one run) or
no counted run is misclassified (multi run); a design whose ceiling is at most the claimed epsilon cannot
refute the claim whatever the model does. Every ceiling here is the project's own bound evaluated at perfect
counts (:func:`privaudit.attacks.bounds.one_run.one_run_search_ceiling`,
:func:`privaudit.attacks.bounds.multi_run.multi_run_ceiling`,
:func:`privaudit.attacks.bounds.mechanism.multi_run_mechanism_ceiling`), searched over the design's size: a geometric
scan, then bisection between the last size that cannot and the first that can.

Designs, as privaudit runs them:

* ``one-run``: m candidates (canaries, or your members and non-members), each in the one training run by a
  fair coin, guesses on the grid of :func:`privaudit.audit.user.scores.score_bounds.one_run_grid` with a Bonferroni
  correction (Steinke, Nasr & Jagielski 2023), at the beta left after the fair-coin test of the counts --
  ``audit-scores``, and ``audit-model``'s attacks on your weights;
* ``multi-run``: n independent runs on each side of a fixed neighbouring pair, the threshold chosen on half
  of them and the errors counted on the other half, Clopper-Pearson -- ``audit-scores --design multi-run``,
  ``audit-model --canary-runs n``;
* ``multi-run-mechanism`` (a claim read from an accountant's history): the same runs tested against the claim's
  own trade-off curve (:mod:`privaudit.attacks.bounds.mechanism`).
"""

from __future__ import annotations

from typing import Any, Callable

from privaudit.audit.user.claim import UserClaim

#: Largest design searched: candidates of one run, runs per side (each side of the fixed pair).
MAX_CANDIDATES = 100_000_000
MAX_RUNS = 10_000_000
MAX_MECHANISM_RUNS = 4096
#: Scan sizes in a row without a higher ceiling after which :func:`smallest` stops.
PAST_PEAK = 12


def smallest(ceiling: Callable[[int], float], target: float, lo: int, hi: int,
             growth: float = 1.25) -> tuple[int | None, int, float]:
    """(the smallest n in [lo, hi] with ceiling(n) > target or None, the n of the best ceiling seen, that ceiling).

    Scans n = lo, lo * growth, ... up to hi; at the first size that exceeds ``target`` bisects back to the last
    one that did not (the ceilings rise with n up to their peak). The scan stops early after :data:`PAST_PEAK`
    sizes in a row without a higher ceiling: past its peak a one-run ceiling only falls (its delta term
    2 m delta alpha* grows like the square root of m)."""
    best_n, best, previous, n, since = lo, -1.0, lo, lo, 0
    while True:
        value = ceiling(n)
        best_n, best, since = (n, value, 0) if value > best else (best_n, best, since + 1)
        if value > target:
            return _bisect(ceiling, target, previous, n), best_n, best
        if n >= hi or since >= PAST_PEAK:
            return None, best_n, best
        previous, n = n, min(hi, max(n + 1, int(n * growth)))


def _bisect(ceiling: Callable[[int], float], target: float, below: int, above: int) -> int:
    while above - below > 1:
        mid = (below + above) // 2
        if ceiling(mid) > target:
            above = mid
        else:
            below = mid
    return above if ceiling(below) <= target else below


def one_run_design(claim: UserClaim, beta: float) -> dict[str, Any]:
    """The fewest one-run candidates whose every-guess-right bound exceeds the claim (the bound at the share of
    ``beta`` the audits leave it after testing the fair coin on the counts: :func:`split_beta`)."""
    from privaudit.attacks.bounds.one_run import one_run_epsilon, one_run_search_ceiling
    from privaudit.attacks.bounds.fair_coin import split_beta
    from privaudit.audit.user.scores.score_bounds import one_run_grid

    beta = split_beta(beta)[1]

    def ceiling(m: int) -> float:
        return one_run_search_ceiling(m, one_run_grid(m), beta=beta, delta=claim.delta)

    m, best_m, best = smallest(ceiling, claim.epsilon, 4, MAX_CANDIDATES)
    out: dict[str, Any] = {"design": "one-run", "bound": "Steinke, Nasr & Jagielski 2023, best of the (k+, k-) grid "
                           "with Bonferroni", "refutable": m is not None}
    if m is None:
        out.update(candidates=None, ceiling=best, best_candidates=best_m,
                   note=f"no one-run design can refute epsilon {claim.epsilon:g} at delta {claim.delta:g}: the largest "
                        f"ceiling is {best:.3g} (at m = {best_m}); more candidates only lower it (the delta term "
                        "2 m delta alpha* grows with m)")
        return out
    grid = one_run_grid(m)
    k_pos, k_neg = max(grid, key=lambda g: one_run_epsilon(m, sum(g), sum(g), beta=beta / len(grid),
                                                           delta=claim.delta))
    out.update(candidates=m, guesses=k_pos + k_neg, k_pos=k_pos, k_neg=k_neg, ceiling=ceiling(m),
               note=f"{m} candidates, each in the run by a fair coin; all {k_pos + k_neg} guesses (k+ = {k_pos}, "
                    f"k- = {k_neg}) right gives {ceiling(m):.3g}")
    return out


def multi_run_design(claim: UserClaim, beta: float) -> dict[str, Any]:
    """The fewest runs per side of a fixed pair whose error-free Clopper-Pearson bound exceeds the claim."""
    from privaudit.attacks.bounds.multi_run import multi_run_ceiling

    def ceiling(n: int) -> float:
        return multi_run_ceiling(n, n, alpha=beta, delta=claim.delta)

    n, best_n, best = smallest(ceiling, claim.epsilon, 4, MAX_RUNS)
    return _runs("multi-run", "Clopper-Pearson on a fixed neighbouring pair (threshold chosen on half the runs)",
                 n, best_n, best, ceiling, MAX_RUNS)


def mechanism_design(claim: UserClaim, beta: float) -> dict[str, Any] | None:
    """With the claim's mechanism: the fewest runs per side whose error-free test against it exceeds the claim."""
    from privaudit.attacks.bounds.mechanism import multi_run_mechanism_ceiling

    if claim.event is None:
        return None

    def ceiling(n: int) -> float:
        return multi_run_mechanism_ceiling(n, n, event=claim.event, relation=claim.relation, beta=beta,
                                           delta=claim.delta)

    n, best_n, best = smallest(ceiling, claim.epsilon, 4, MAX_MECHANISM_RUNS, growth=1.5)
    return _runs("multi-run-mechanism", "Clopper-Pearson errors tested against the claim's own trade-off curve "
                 "(refutes the mechanism the claim accounts)", n, best_n, best, ceiling, MAX_MECHANISM_RUNS)


def _runs(design: str, bound: str, n: int | None, best_n: int, best: float, ceiling: Callable[[int], float],
          limit: int) -> dict[str, Any]:
    if n is None:
        return {"design": design, "bound": bound, "refutable": False, "runs_per_side": None, "ceiling": best,
                "best_runs_per_side": best_n, "note": f"no design of at most {limit} runs per side can refute it"}
    return {"design": design, "bound": bound, "refutable": True, "runs_per_side": n, "ceiling": ceiling(n),
            "note": f"{n} runs with the canary and {n} without (threshold on half of each), no error among the "
                    f"other half gives {ceiling(n):.3g}"}


def plan(claim: UserClaim, *, confidence: float = 0.95) -> dict[str, Any]:
    """Every design's smallest size that can refute ``claim`` at ``confidence`` (module docstring)."""
    from privaudit.core.errors import check_probability

    check_probability("--confidence", confidence)
    beta = 1.0 - confidence
    designs = [one_run_design(claim, beta), multi_run_design(claim, beta)]
    mechanism = mechanism_design(claim, beta)
    if mechanism is not None:
        designs.append(mechanism)
    return {"claim": claim.to_dict(), "confidence": confidence, "designs": designs}
