"""One run (Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run"), and its paired
replace-one form: the p-value of r guesses with v correct among m canaries, the bound at fixed (k+, k-), the
Bonferroni-corrected search over a grid, and the guesses themselves (:mod:`privaudit.attacks.bounds` states the
families).
"""

from __future__ import annotations

import math
import dataclasses
from typing import Callable, Sequence

import numpy as np
from scipy import optimize, special

from privaudit.attacks.metrics import SortedScores
from privaudit.core.errors import ConfigError, check_probability
from privaudit.attacks.bounds.lower_bound import EpsilonLowerBound, RELATION, UNIT, check_delta, check_relation_unit


# --------------------------------------------------------------------------------------------------
# One run (Steinke, Nasr & Jagielski 2023)
# --------------------------------------------------------------------------------------------------

def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """P-value of >= v correct out of r guesses among m canaries under the (eps, delta)-DP null."""
    if not 0 <= v <= r <= m:
        raise ConfigError(f"one-run counts: need 0 <= v <= r <= m, got m={m}, r={r}, v={v}")
    if epsilon < 0:
        raise ConfigError(f"epsilon: must be >= 0, got {epsilon!r}")
    check_delta(delta)
    q = float(special.expit(epsilon))
    tail = _binom_sf(v - 1, r, q)  # P[Binomial(r, q) >= v]
    if delta == 0 or v == 0:
        return min(tail, 1.0)
    return min(tail + 2.0 * m * delta * _alpha_star(r, v, q), 1.0)


def _binom_sf(k: int, n: int, q: float) -> float:
    """P[Binomial(n, q) > k] (scipy.special's incomplete-beta tail: no per-call argument checks)."""
    return 1.0 if k < 0 else float(special.bdtrc(k, n, q))


def _binom_pmf(k: int, n: int, q: float) -> float:
    """P[Binomial(n, q) = k] from log-gamma (0 <= k <= n, 0 < q < 1)."""
    log = special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)
    return float(math.exp(log + k * math.log(q) + (n - k) * math.log1p(-q))) if q < 1 else float(k == n)


def _alpha_star(r: int, v: int, q: float) -> float:
    """alpha* = max_{1 <= i <= v} a_i, a_i = (1/i) P[v - i <= B < v], B ~ Bin(r, q), in O(log v) tail evaluations.

    a_{i+1} - a_i = (p_{v-1-i} - a_i) / (i + 1) with p the binomial pmf, which is unimodal (mode M). While
    v - 1 - i > M the new term p_{v-1-i} exceeds every term already in the window, so a rises; once
    v - 1 - i <= M and p_{v-1-i} <= a_i, a_{i+1} (a weighted mean of the two) is >= p_{v-1-i} >= p_{v-2-i}, so
    a falls from then on. The maximum is at the first i >= v - 1 - M where a stops rising, found by bisection;
    a_i is computed from binomial tails as (P[B >= v - i] - P[B >= v]) / i.
    """
    tail = _binom_sf(v - 1, r, q)

    def a(i: int) -> float:
        return (_binom_sf(v - i - 1, r, q) - tail) / i

    def falling(i: int) -> bool:
        return i >= v or _binom_pmf(v - 1 - i, r, q) <= a(i)

    lo, hi = max(1, v - 1 - math.floor((r + 1) * q)), v
    while lo < hi:
        mid = (lo + hi) // 2
        if falling(mid):
            hi = mid
        else:
            lo = mid + 1
    return max(a(i) for i in range(max(1, lo - 2), min(v, lo + 2) + 1))


def one_run_epsilon(m: int, r: int, v: int, *, beta: float = 0.05, delta: float = 0.0) -> float:
    """The largest eps whose one-run p-value is below ``beta`` (0 if even eps = 0 is not rejected)."""
    check_probability("beta", beta)
    if r == 0 or one_run_p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0

    def gap(eps: float) -> float:
        return one_run_p_value(m, r, v, eps, delta) - beta

    hi = 1.0
    while gap(hi) < 0:
        hi *= 2.0
        if hi > 1e4:  # v = r with huge r: the bound is effectively unbounded; cap it
            return hi
    return float(optimize.brentq(gap, 0.0, hi, xtol=1e-10, rtol=1e-12))


def one_run_guesses(scores: np.ndarray, k_pos: int, k_neg: int) -> np.ndarray:
    """Guesses: +1 for the k+ highest scores, -1 for the k- lowest, 0 (abstain) for the rest.

    Ties are broken by position (a stable sort), which does not depend on membership.
    """
    scores = np.asarray(scores, dtype=np.float64).ravel()
    m = scores.size
    if k_pos < 0 or k_neg < 0 or k_pos + k_neg > m:
        raise ConfigError(f"k_pos, k_neg: need k_pos, k_neg >= 0 and k_pos + k_neg <= m = {m}, "
                          f"got {k_pos}, {k_neg}")
    order = np.argsort(-scores, kind="stable")
    guesses = np.zeros(m, dtype=np.int8)
    guesses[order[:k_pos]] = 1
    if k_neg:
        guesses[order[m - k_neg:]] = -1
    return guesses


def default_guesses(m: int, fraction: float = 0.1) -> tuple[int, int]:
    """The (k+, k-) fixed in advance when none is given: ``fraction`` of m on each side (at least 1)."""
    k = max(1, int(round(fraction * m)))
    return min(k, m // 2), min(k, m - min(k, m // 2))


def one_run_bound(scores: np.ndarray, membership: np.ndarray, *, k_pos: int, k_neg: int = 0,
                  beta: float = 0.05, delta: float = 0.0, m: int | None = None,
                  bonferroni: int = 1, relation: str = RELATION, unit: str = UNIT) -> EpsilonLowerBound:
    """One-run bound from attack scores (higher = member) with k+ / k- fixed in advance.

    ``m`` defaults to the number of scored canaries (only the delta term uses it). ``bonferroni``
    > 1 tests at beta / bonferroni (used by :func:`one_run_bound_search`). ``relation`` / ``unit``:
    what one coin flips (an example or a user added/removed; a replace-one pair is
    :func:`paired_one_run_bound`).
    """
    check_relation_unit(relation, unit)
    membership = np.asarray(membership, dtype=bool).ravel()
    guesses = one_run_guesses(scores, k_pos, k_neg)
    if membership.size != guesses.size:
        raise ConfigError(f"membership: {membership.size} entries for {guesses.size} scores")
    m = guesses.size if m is None else m
    r = int(np.count_nonzero(guesses))
    v = int(np.sum((guesses == 1) & membership) + np.sum((guesses == -1) & ~membership))
    return one_run_bound_counts(m, r, v, k_pos=k_pos, k_neg=k_neg, beta=beta, delta=delta, bonferroni=bonferroni,
                                relation=relation, unit=unit)


def one_run_bound_counts(m: int, r: int, v: int, *, k_pos: int, k_neg: int, beta: float = 0.05,
                         delta: float = 0.0, bonferroni: int = 1, relation: str = RELATION,
                         unit: str = UNIT) -> EpsilonLowerBound:
    """:func:`one_run_bound` from its counts: r guesses (k+ "in", k- "out"), v correct, of m candidates."""
    level = beta / bonferroni
    eps = one_run_epsilon(m, r, v, beta=level, delta=delta)
    label = (f"one-run (Steinke et al. 2023): k+={k_pos}, k-={k_neg} fixed in advance, "
             f"{v}/{r} correct of m={m}, {100 * (1 - beta):.0f}% confidence, delta={delta:g}")
    return EpsilonLowerBound(eps, "one-run", label, 1 - beta, delta,
                             {"m": m, "r": r, "v": v, "k_pos": k_pos, "k_neg": k_neg}, relation=relation, unit=unit)


def one_run_bound_search(scores: np.ndarray, membership: np.ndarray, grid: Sequence[tuple[int, int]], *,
                         beta: float = 0.05, delta: float = 0.0, m: int | None = None) -> EpsilonLowerBound:
    """Best one-run bound over a grid of (k+, k-) pairs, each tested at beta / len(grid) (union bound)."""
    grid = _check_grid(grid)
    return _best_of_grid(grid, lambda kp, kn: one_run_bound(scores, membership, k_pos=kp, k_neg=kn, beta=beta,
                                                            delta=delta, m=m, bonferroni=len(grid)), beta, delta)


def one_run_bound_search_sorted(sides: SortedScores, grid: Sequence[tuple[int, int]], *, beta: float = 0.05,
                                delta: float = 0.0, seed: int = 0) -> EpsilonLowerBound:
    """:func:`one_run_bound_search` from the two sides' sorted scores (no sort here).

    Guesses go to the k+ highest and k- lowest of all m scores; a tie at a cut is broken uniformly at
    random, independently of membership (:func:`sorted_guess_counts`), as a random order of the candidates
    followed by a stable sort would.
    """
    grid = _check_grid(grid)
    m = sides.n_members + sides.n_nonmembers
    rng = np.random.default_rng(seed)

    def bound(kp: int, kn: int) -> EpsilonLowerBound:
        r, v = sorted_guess_counts(sides, kp, kn, rng)
        return one_run_bound_counts(m, r, v, k_pos=kp, k_neg=kn, beta=beta, delta=delta, bonferroni=len(grid))
    return _best_of_grid(grid, bound, beta, delta)


def _check_grid(grid: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    grid = list(grid)
    if not grid:
        raise ConfigError("grid: needs at least one (k_pos, k_neg) pair")
    return grid


def _best_of_grid(grid: list[tuple[int, int]], bound: Callable[[int, int], EpsilonLowerBound], beta: float,
                  delta: float) -> EpsilonLowerBound:
    best = max((bound(kp, kn) for kp, kn in grid), key=lambda b: b.epsilon)
    c = best.counts
    label = (f"one-run (Steinke et al. 2023): best of {len(grid)} (k+, k-) pairs with Bonferroni correction, "
             f"k+={c['k_pos']}, k-={c['k_neg']}, {c['v']}/{c['r']} correct of m={c['m']}, "
             f"{100 * (1 - beta):.0f}% confidence, delta={delta:g}")
    return EpsilonLowerBound(best.epsilon, "one-run-search", label, 1 - beta, delta,
                             {**best.counts, "grid_size": len(grid)})


def one_run_search_ceiling(m: int, grid: Sequence[tuple[int, int]], *, beta: float = 0.05,
                           delta: float = 0.0) -> float:
    """The largest bound :func:`one_run_bound_search` can give with m candidates and this grid: every guess right
    (v = r = k+ + k- for each pair, each pair at beta / len(grid))."""
    grid = _check_grid(grid)
    return max(one_run_epsilon(m, kp + kn, kp + kn, beta=beta / len(grid), delta=delta) for kp, kn in grid)


def sorted_guess_counts(sides: SortedScores, k_pos: int, k_neg: int,
                        rng: np.random.Generator) -> tuple[int, int]:
    """(r, v) of the guesses "in" on the k+ highest and "out" on the k- lowest scores of both sides.

    At a cut through tied scores the guessed ones are a uniformly random subset of the tie (a hypergeometric
    draw of how many are members); when both cuts fall in one tie, the "out" guesses are drawn from what the
    "in" guesses left, so the two never share a candidate.
    """
    m = sides.n_members + sides.n_nonmembers
    if k_pos < 0 or k_neg < 0 or k_pos + k_neg > m:
        raise ConfigError(f"k_pos, k_neg: need k_pos, k_neg >= 0 and k_pos + k_neg <= m = {m}, "
                          f"got {k_pos}, {k_neg}")
    top = _kth_value(sides, k_pos, True) if k_pos else None
    bottom = _kth_value(sides, k_neg, False) if k_neg else None
    v_pos, taken = _cut(sides, k_pos, top, True, rng, (0, 0))
    v_neg, _ = _cut(sides, k_neg, bottom, False, rng, taken if top == bottom else (0, 0))
    return k_pos + k_neg, v_pos + v_neg


def _cut(sides: SortedScores, k: int, value: float | None, top: bool, rng: np.random.Generator,
         taken: tuple[int, int]) -> tuple[int, tuple[int, int]]:
    """Correct guesses among the k highest (``top``: members) or lowest (non-members) scores, the k-th being
    ``value``, and how many members and non-members of its tie were guessed (``taken``: already guessed from that
    tie by the other cut)."""
    if k == 0 or value is None:
        return 0, (0, 0)
    mem, non = sides.members, sides.nonmembers
    if top:
        above_m, above_n = int(sides.members_at_least(value, True)), int(sides.nonmembers_at_least(value, True))
    else:
        above_m, above_n = int(np.searchsorted(mem, value, "left")), int(np.searchsorted(non, value, "left"))
    tie_m = int(np.searchsorted(mem, value, "right") - np.searchsorted(mem, value, "left")) - taken[0]
    tie_n = int(np.searchsorted(non, value, "right") - np.searchsorted(non, value, "left")) - taken[1]
    need = k - above_m - above_n
    drawn_m = int(rng.hypergeometric(tie_m, tie_n, need)) if need and tie_m and tie_n else (need if tie_n == 0 else 0)
    drawn = (drawn_m, need - drawn_m)
    return (above_m + drawn_m if top else above_n + drawn[1]), drawn


def _kth_value(sides: SortedScores, k: int, top: bool) -> float:
    """The k-th highest (``top``) or lowest score of both sides together (binary search in each sorted side)."""
    def count(v: float) -> int:
        if top:
            return int(sides.members_at_least(v)) + int(sides.nonmembers_at_least(v))
        return int(np.searchsorted(sides.members, v, "right") + np.searchsorted(sides.nonmembers, v, "right"))

    best = None
    for side in (sides.members, sides.nonmembers):
        lo, hi = 0, side.size - 1  # top: the largest side[i] with count >= k; else the smallest with count >= k
        found = None
        while lo <= hi:
            mid = (lo + hi) // 2
            if count(side[mid]) >= k:
                found = side[mid]
                lo, hi = (mid + 1, hi) if top else (lo, mid - 1)
            else:
                lo, hi = (lo, mid - 1) if top else (mid + 1, hi)
        if found is not None and (best is None or (found > best if top else found < best)):
            best = found
    return float(best)


# --------------------------------------------------------------------------------------------------
# Replace-one paired canaries (the one-run game for replace-one claims)
# --------------------------------------------------------------------------------------------------

def paired_one_run_bound(score_diff: np.ndarray, first_in: np.ndarray, *, k_pos: int, k_neg: int = 0,
                         beta: float = 0.05, delta: float = 0.0, m: int | None = None,
                         unit: str = UNIT) -> EpsilonLowerBound:
    """One-run bound for **replace-one** claims from m paired canary slots.

    The game. Slot i holds two candidates x_i and x'_i; an independent fair coin S_i in {+1, -1}
    puts x_i (S_i = +1) or x'_i (S_i = -1) into the training set, never both and never neither, so
    the dataset size does not depend on the coins. The attacker scores each slot by
    ``score_diff[i]`` = s(x_i) - s(x'_i) (higher: x_i was the one trained on), guesses +1 on the k+
    highest differences, -1 on the k- lowest and abstains on the rest (k+, k- fixed before the scores
    are seen); r guesses, v correct.

    Claim. If the training algorithm M is (eps, delta)-DP under the replace-one relation (at the
    slot's unit: an example, or a whole user for canary users), then

        P[v correct] <= P[Binomial(r, e^eps / (1 + e^eps)) >= v] + 2 m delta alpha*,

    the one-run bound of Steinke, Nasr & Jagielski 2023 (Thm. 3.1 / its delta > 0 extension, Prop.
    5.7) with the same alpha*, so :func:`one_run_epsilon` turns (m, r, v) into the bound.

    Proof sketch. Steinke et al.'s argument uses two facts about slot i only: (a) S_i is a fair coin
    independent of the other coins, and (b) fixing every other coin, the datasets with S_i = +1 and
    S_i = -1 are neighbours under the relation M is private for. Under add/remove the neighbours are
    "x_i in" and "x_i out"; here D_+ = D_rest + {x_i} and D_- = D_rest + {x'_i} differ by replacing
    one element, so they are replace-one neighbours and (b) holds under replace-one DP. Then, given
    the output and every guess and coin revealed before slot i, the guess T_i is a post-processing of
    an (eps, delta)-DP function of the fair coin S_i: randomized response up to delta, i.e.
    P[T_i = S_i | past] <= e^eps/(1+e^eps) P[T_i != 0 | past] + delta-terms. The stochastic-domination
    step (their Lemma 4.5 / Prop. 5.5) is unchanged, which gives the binomial tail; the delta terms add
    at most 2 m delta alpha* as in their Sec. 5. Nothing uses that a neighbour has one element fewer,
    so the bound holds verbatim. It does **not** bound add/remove epsilon (the size is fixed), and
    an add/remove (eps, delta) claim only implies replace-one (2 eps, ...), so the bound carries
    ``relation="replace-one"`` and is compared only with replace-one claims at the same unit.

    ``first_in[i]`` is True when x_i (not x'_i) was trained on. One implementation: the counting and
    the p-value are :func:`one_run_bound`'s.
    """
    b = one_run_bound(score_diff, first_in, k_pos=k_pos, k_neg=k_neg, beta=beta, delta=delta, m=m,
                      relation="replace-one", unit=unit)
    c = b.counts
    label = (f"one-run paired (replace-one, per {unit}; Steinke et al. 2023 argument with replace-one "
             f"neighbours): k+={k_pos}, k-={k_neg} fixed in advance, {c['v']}/{c['r']} correct of m={c['m']} "
             f"slots, {100 * (1 - beta):.0f}% confidence, delta={delta:g}")
    return dataclasses.replace(b, method="one-run-paired", label=label)


def fixed_pairs(n: int, seed: int = 0) -> np.ndarray:
    """A pairing (n // 2, 2) of n candidates fixed before any membership is read (seeded permutation)."""
    from privaudit.defenses.training.seeding import numpy_rng

    return numpy_rng(seed, "replace-one-pairs").permutation(n)[: 2 * (n // 2)].reshape(-1, 2)


def pool_pairs(membership: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Replace-one slots from an audit pool whose candidates were each included by a fair coin.

    Candidates are paired by :func:`fixed_pairs` (independent of membership); a pair with exactly one
    member is a replace-one slot. Conditioned on *which* pairs have exactly one member (an event that
    does not depend on which of the two it is), the identity of the member is a fair coin, independent
    across pairs and of the rest of the training set (P[a in, b out] = P[a out, b in] = 1/4 for
    independent fair coins). So these slots are an instance of :func:`paired_one_run_bound`'s game with
    m = number of mixed pairs, and the pairs where both or neither are members are part of the fixed
    rest of the dataset. Returns (pairs (m, 2), first_in (m,)).
    """
    membership = np.asarray(membership, dtype=bool).ravel()
    pairs = fixed_pairs(membership.size, seed)
    mixed = membership[pairs[:, 0]] != membership[pairs[:, 1]]
    return pairs[mixed], membership[pairs[mixed, 0]]
