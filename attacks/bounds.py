"""Statistically sound empirical lower bounds on epsilon.

Two families, both *lower* bounds on the epsilon of the audited training algorithm at a stated
confidence (never point estimates):

* **One run** (Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run", main
  theorem and the p-value routine of their paper). m canaries are each included independently with
  probability 1/2 in one training run; the auditor guesses "in" for the k+ highest scores, "out" for
  the k- lowest and abstains on the rest: r = k+ + k- guesses, v correct. If the algorithm is
  (eps, delta)-DP w.r.t. each canary's inclusion,

      P[v correct] <= P[Binomial(r, q) >= v] + 2 m delta alpha*,   q = e^eps / (1 + e^eps),
      alpha* = max_{1 <= i <= v} (1/i) P[v - i <= Binomial(r, q) < v],

  and the bound is the largest eps whose p-value is below beta. k+ and k- must be fixed before the
  scores are seen (:func:`one_run_bound`); trying several (k+, k-) pairs and keeping the best is only
  sound after a correction for the search, done here by a union bound (Bonferroni: each pair is
  tested at beta / #pairs, :func:`one_run_bound_search`). Searching without correction, as some
  public tools do, overstates the bound.

* **Multi run** on a fixed neighbouring pair (D, D'): independent training runs, each on D or D',
  a score per run and a threshold. Any (eps, delta)-DP mechanism satisfies
  FPR + e^eps FNR >= 1 - delta and FNR + e^eps FPR >= 1 - delta (Kairouz et al. 2015); with
  Clopper-Pearson upper confidence bounds FPR_hi, FNR_hi at alpha/2 each,

      eps_lb = max(ln((1 - delta - FPR_hi) / FNR_hi), ln((1 - delta - FNR_hi) / FPR_hi), 0)

  holds with confidence 1 - alpha (Jagielski et al. 2020; Nasr et al. 2021). The threshold is chosen
  on a separate half of the runs, or every threshold is tested with a Bonferroni correction.
  The Gaussian-DP variant (Nasr et al. 2023, "Tight Auditing of Differentially Private Machine
  Learning") turns the same confidence bounds into mu_lb = Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi) and
  reports the epsilon of mu_lb-GDP at delta. It is a lower bound only under the *assumption* that the
  mechanism's trade-off curve is Gaussian (true for the Gaussian mechanism and, asymptotically,
  DP-SGD); it is labelled as such and never the default.

* **Paired one run (replace-one)**: slots of two candidates, a fair coin picks which one is trained
  on; the same p-value with replace-one neighbours (:func:`paired_one_run_bound`, proof sketch there).
  Every bound carries the ``relation`` and ``unit`` it is on; :func:`check_relation_unit` rejects one
  a bound cannot be stated at, naming both.

* **f-DP one run** (Mahloujifar, Melis & Chaudhuri 2025, "Auditing f-Differential Privacy in One
  Run"): the same guesses tested against a trade-off curve (:func:`fdp_one_run_bound`): the (eps,
  delta) curve (sound for any mechanism) or the Gaussian one (mu_lb; its epsilon assumes a Gaussian
  curve). :func:`best_one_run_bound` reports the larger of Steinke's and the f-DP bound, each at
  beta / 2 (a rule fixed before the scores are seen).

Per-example membership-inference rates measured on one model are not independent trials of a fixed
neighbouring pair, so they are never turned into a Clopper-Pearson bound here; the audit pool's
random 1/2 inclusion makes any attack's scores a valid *one-run* audit instead.
"""

from __future__ import annotations

import math
from statistics import NormalDist
import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np
from scipy import optimize, special, stats

from privaudit.attacks.metrics import SortedScores
from privaudit.core.errors import ConfigError, check_probability, one_of

RELATION = "add-remove"
UNIT = "example"
#: The neighbouring relations and privacy units a bound can be stated at (accountants.claim.RELATIONS).
RELATIONS = ("add-remove", "replace-one")
UNITS = ("example", "user")


@dataclass(frozen=True)
class EpsilonLowerBound:
    """A lower bound on epsilon with everything needed to read and reproduce it.

    ``label`` is the one-line description reports print as ``eps_lb_method``; ``counts`` holds the
    sample counts the bound was computed from (m, r, v for one run; trials and errors for multi run).
    """

    epsilon: float
    method: str
    label: str
    confidence: float
    delta: float
    counts: dict[str, float] = field(default_factory=dict)
    relation: str = RELATION
    notes: tuple[str, ...] = ()
    unit: str = UNIT

    def __post_init__(self) -> None:
        check_relation_unit(self.relation, self.unit)

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d


def check_relation_unit(relation: str, unit: str, supported: Sequence[tuple[str, str]] | None = None,
                        what: str = "this bound") -> None:
    """Reject a (relation, unit) that is unknown, or that ``what`` does not support, naming both.

    Never falls back to another relation: a bound stated at the wrong relation is not comparable with
    the claim, and a silent substitution would gate a claim against a bound on a different quantity.
    """
    if relation not in RELATIONS or unit not in UNITS:
        raise ConfigError(f"relation/unit: {what} cannot be stated at relation={relation!r}, unit={unit!r}; "
                          f"accepted relations: {', '.join(RELATIONS)}; units: {', '.join(UNITS)}")
    if supported is not None and (relation, unit) not in supported:
        ok = "; ".join(f"relation={r}, unit={u}" for r, u in supported)
        raise ConfigError(f"relation/unit: {what} does not support relation={relation!r}, unit={unit!r}; "
                          f"it supports {ok}")


def _check_delta(delta: float) -> None:
    if not 0 <= delta < 1:
        raise ConfigError(f"delta: must lie in [0, 1), got {delta!r}")


# --------------------------------------------------------------------------------------------------
# One run (Steinke, Nasr & Jagielski 2023)
# --------------------------------------------------------------------------------------------------

def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """P-value of >= v correct out of r guesses among m canaries under the (eps, delta)-DP null."""
    if not 0 <= v <= r <= m:
        raise ConfigError(f"one-run counts: need 0 <= v <= r <= m, got m={m}, r={r}, v={v}")
    if epsilon < 0:
        raise ConfigError(f"epsilon: must be >= 0, got {epsilon!r}")
    _check_delta(delta)
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


#: The share of a one-run audit's beta spent on :func:`check_fair_coin` (the rest goes to the bound), so the
#: verdict's confidence counts both: with probability >= 1 - beta, neither a true coin is refused nor a true claim
#: refuted (union bound).
COIN_TEST_SHARE = 0.1
#: What a user can run instead when the counts contradict the fair coin (named in the refusal).
COIN_ALTERNATIVES = ("--inclusion-probability P when each example was included independently with a known "
                     "probability P",
                     "--design multi-run when every score is an independent training run on a fixed pair",
                     "privaudit audit-model --train-fn (canary runs of your training function)",
                     "a new split that includes each example by a fair coin")


def split_beta(beta: float) -> tuple[float, float]:
    """(level of the fair-coin test, beta of the bound): :data:`COIN_TEST_SHARE` of ``beta`` and the rest."""
    check_probability("beta", beta)
    return COIN_TEST_SHARE * beta, (1 - COIN_TEST_SHARE) * beta


def fair_coin_p_value(n_in: int, n_out: int, p: float = 0.5) -> float:
    """Two-sided exact binomial test of n_in ~ Binomial(n_in + n_out, p) (scipy's ``binomtest``)."""
    if n_in < 0 or n_out < 0 or n_in + n_out == 0:
        raise ConfigError(f"counts: need n_in, n_out >= 0 and at least one candidate, got {n_in}, {n_out}")
    return float(stats.binomtest(int(n_in), int(n_in + n_out), p).pvalue)


def check_fair_coin(n_in: int, n_out: int, level: float, what: str = "members and nonmembers",
                    p: float = 0.5) -> float:
    """Refuse (ConfigError, one line) when the counts contradict the one-run design's coin: the two-sided binomial
    test of n_in ~ Binomial(m, p) rejects at ``level`` (p = 1/2: the fair coin). Steinke et al.'s bound assumes each
    candidate was included by an independent fair coin; with n_in far from m / 2 the base rate alone makes
    "member" guesses right more often than half, and the bound would refute an honest claim. Returns the p-value."""
    value = fair_coin_p_value(n_in, n_out, p)
    if value < level:
        coin = "fair coin per example" if p == 0.5 else f"inclusion probability {p:g} per example"
        raise ConfigError(f"{what}: {n_in} vs {n_out} contradict the one-run design's {coin} (two-sided binomial "
                          f"test p = {value:.3g} < {level:g}); no bound is computed. Designs that apply: "
                          f"{'; '.join(COIN_ALTERNATIVES)}")
    return value


def fair_coin_subsample(membership: np.ndarray, p: float, seed: int = 0) -> np.ndarray:
    """Which candidates to keep so that, given kept, each one's membership is a fair coin (a mask, seeded).

    Reduction (rejection sampling). Candidate i is in the run with known probability p, independently; keep a
    member with probability a = min(1, (1 - p) / p) and a non-member with b = min(1, p / (1 - p)), by coins
    independent of everything else. Then P[in, kept] = p a = min(p, 1 - p) = (1 - p) b = P[out, kept], so given
    K (who is kept) and the dropped candidates' memberships (independent pairs (S_i, K_i) across i), the kept
    candidates' memberships are independent fair coins, and the run is M(the dropped members + the kept ones
    drawn by those coins): Steinke et al.'s game on the kept candidates, with the dropped members as fixed data.
    The guesses, fixed by the kept candidates' scores alone, then get the one-run bound as it stands.
    """
    check_probability("inclusion probability", p)
    membership = np.asarray(membership, dtype=bool)
    keep = np.where(membership, min(1.0, (1 - p) / p), min(1.0, p / (1 - p)))
    return np.random.default_rng(seed).random(membership.size) < keep


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
    from privaudit.defenses.seeding import numpy_rng

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


# --------------------------------------------------------------------------------------------------
# f-DP one run (Mahloujifar, Melis & Chaudhuri 2025)
# --------------------------------------------------------------------------------------------------

FDP_NULLS = ("approx-dp", "gdp")


def _blow_up_inverse(null: str, epsilon: float, delta: float):
    """x -> f(1 - x) for the null's trade-off curve f (the 'blow-up inverse' of the f-DP audit).

    ``approx-dp``: f_{eps,delta}(a) = max(0, 1 - delta - e^eps a, e^-eps (1 - delta - a)) (Kairouz et
    al. 2015; Dong, Roth & Su 2022, Prop. 2.5): the null is exactly "M is (eps, delta)-DP", so the
    bound is sound for any mechanism. ``gdp``: f(a) = Phi(Phi^-1(1 - a) - mu) with mu the GDP
    parameter ``epsilon`` (the null "M is mu-GDP").
    """
    if null == "gdp":
        mu, normal = epsilon, NormalDist()  # pure-Python Phi and Phi^-1: ~50x faster than scipy per scalar
        return lambda x: normal.cdf(normal.inv_cdf(x) - mu) if 0 < x < 1 else float(x >= 1)
    e = math.exp(epsilon)
    return lambda x: max(0.0, 1.0 - delta - e * (1.0 - x), (x - delta) / e)


def fdp_one_run_rejects(m: int, r: int, v: int, epsilon: float, *, beta: float, delta: float = 0.0,
                        null: str = "approx-dp") -> bool:
    """True when r guesses with v correct among m canaries reject the f-DP null at level ``beta``.

    The recursion of Mahloujifar, Melis & Chaudhuri 2025 (Alg. "audit with reconstruction and cap",
    as implemented in google-deepmind/jax_privacy ``auditing._epsilon_one_run_fdp``, read as a
    reference; this is our own code): start from r_0 = beta v / m (mass of correct guesses) and
    h_0 = beta (r - v) / m (wrong guesses); for i = v - 1, ..., 0 set h <- max(h, f(1 - r)),
    r <- min(r + i / (r_guesses - i) (h_new - h_old), 1); stop when h no longer moves. The null is
    rejected when r + h > r_guesses / m, i.e. when no mechanism whose trade-off curve is above f can
    make v of r guesses correct with probability beta. Guesses are one-sided (k- = 0) as in the
    reference implementation.
    """
    if not 0 <= v <= r <= m or m < 1:
        raise ConfigError(f"one-run counts: need 0 <= v <= r <= m and m >= 1, got m={m}, r={r}, v={v}")
    if null not in FDP_NULLS:
        raise one_of("null", null, FDP_NULLS)
    if r == 0 or v == 0:
        return False
    return fdp_recursion_rejects(_blow_up_inverse(null, epsilon, delta), m, r, v, beta)


def fdp_recursion_rejects(inv: Callable[[float], float], m: int, r: int, v: int, beta: float) -> bool:
    """The recursion of :func:`fdp_one_run_rejects` for any null trade-off curve f, given x -> f(1 - x).

    One implementation for every null: the (eps, delta) and Gaussian curves here, the claim's own
    mechanism in :mod:`privaudit.attacks.mechanism_bound`.
    """
    if r == 0 or v == 0:
        return False
    rr, h = beta * v / m, beta * (r - v) / m
    for i in range(v - 1, -1, -1):
        h_new = max(h, inv(rr))
        if h_new == h:
            break
        rr = min(rr + (i / (r - i)) * (h_new - h), 1.0)
        h = h_new
    return rr + h > r / m


def fdp_one_run_parameter(m: int, r: int, v: int, *, beta: float = 0.05, delta: float = 0.0,
                          null: str = "approx-dp") -> float:
    """The largest null parameter (eps for ``approx-dp``, mu for ``gdp``) the counts reject (0: none)."""
    check_probability("beta", beta)
    _check_delta(delta)
    if not fdp_one_run_rejects(m, r, v, 0.0, beta=beta, delta=delta, null=null):
        return 0.0
    lo, hi = 0.0, 1.0
    while fdp_one_run_rejects(m, r, v, hi, beta=beta, delta=delta, null=null):
        lo, hi = hi, hi * 2.0
        if hi > 1e3:
            return hi
    for _ in range(60):  # bisection: the rejection region is an interval [0, x*)
        mid = (lo + hi) / 2
        if fdp_one_run_rejects(m, r, v, mid, beta=beta, delta=delta, null=null):
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-5:
            break
    return lo


def one_sided_counts(scores: np.ndarray, membership: np.ndarray, k_pos: int,
                     m: int | None = None) -> tuple[int, int, int]:
    """(m, r, v) of the one-sided guesses "member" on the k+ highest scores (the f-DP one-run bounds' input)."""
    guesses = one_run_guesses(scores, k_pos, 0)
    membership = np.asarray(membership, dtype=bool).ravel()
    if membership.size != guesses.size:
        raise ConfigError(f"membership: {membership.size} entries for {guesses.size} scores")
    m = guesses.size if m is None else m
    return m, int(np.count_nonzero(guesses)), int(np.sum((guesses == 1) & membership))


def fdp_one_run_bound(scores: np.ndarray, membership: np.ndarray, *, k_pos: int, beta: float = 0.05,
                      delta: float = 0.0, m: int | None = None, null: str = "approx-dp",
                      relation: str = RELATION, unit: str = UNIT) -> EpsilonLowerBound:
    """f-DP one-run bound (Mahloujifar, Melis & Chaudhuri 2025) with k+ guesses fixed in advance.

    ``approx-dp``: a sound lower bound on (eps, delta)-DP epsilon (method ``one-run-fdp``).
    ``gdp``: a lower bound mu_lb on the GDP parameter; the epsilon reported is that of mu_lb-GDP at
    delta, a lower bound on epsilon only if the mechanism's trade-off curve is Gaussian (method
    ``one-run-fdp-gdp``, never gated; mu_lb itself is sound for a mu-GDP claim).
    ``scores``/``membership`` as :func:`one_run_bound`; paired slots: the score difference and
    ``first_in`` with ``relation="replace-one"``.
    """
    check_relation_unit(relation, unit)
    m, r, v = one_sided_counts(scores, membership, k_pos, m)
    value = fdp_one_run_parameter(m, r, v, beta=beta, delta=delta, null=null)
    counts = {"m": m, "r": r, "v": v, "k_pos": k_pos, "k_neg": 0}
    conf = f"{100 * (1 - beta):.0f}% confidence"
    if null == "gdp":
        eps = gdp_epsilon(value, delta) if delta > 0 else (math.inf if value > 0 else 0.0)
        label = (f"one-run f-DP (Mahloujifar et al. 2025), Gaussian null: mu_lb={value:.3f}, k+={k_pos} fixed in "
                 f"advance, {v}/{r} correct of m={m}, {conf}; epsilon of mu_lb-GDP at delta={delta:g} "
                 "(assumes a Gaussian trade-off curve)")
        return EpsilonLowerBound(eps, "one-run-fdp-gdp", label, 1 - beta, delta, {**counts, "mu_lower": value},
                                 relation=relation, unit=unit,
                                 notes=("epsilon valid only if the trade-off curve is Gaussian; mu_lb is sound "
                                        "against a mu-GDP claim",))
    label = (f"one-run f-DP (Mahloujifar et al. 2025), (eps, delta) null: k+={k_pos} fixed in advance, "
             f"{v}/{r} correct of m={m}, {conf}, delta={delta:g}")
    return EpsilonLowerBound(value, "one-run-fdp", label, 1 - beta, delta, counts, relation=relation, unit=unit)


def best_one_run_epsilon(counts: dict[str, float], *, beta: float, delta: float) -> float:
    """The reported one-run bound: the larger of Steinke (m, r, v) and f-DP (m, r_fdp, v_fdp), each at beta / 2.

    The rule (both bounds, each at half the failure probability, report the maximum) is fixed before
    any score is seen, so the maximum holds at confidence 1 - beta (union bound).
    """
    m = int(counts["m"])
    steinke = one_run_epsilon(m, int(counts["r"]), int(counts["v"]), beta=beta / 2, delta=delta)
    fdp = fdp_one_run_parameter(m, int(counts["r_fdp"]), int(counts["v_fdp"]), beta=beta / 2, delta=delta)
    return max(steinke, fdp)


def best_one_run_bound(scores: np.ndarray, membership: np.ndarray, *, k_pos: int, k_neg: int, k_fdp: int,
                       beta: float = 0.05, delta: float = 0.0, m: int | None = None, relation: str = RELATION,
                       unit: str = UNIT) -> EpsilonLowerBound:
    """Steinke (k+, k-) and f-DP (k_fdp one-sided) one-run bounds, each at beta / 2; the larger is reported.

    Method ``one-run-best`` (sound at 1 - beta by the union bound; :func:`best_one_run_epsilon`).
    The f-DP GDP view (mu_lb) is recorded in ``counts['mu_lower']`` for reading, never gated.
    """
    st = one_run_bound(scores, membership, k_pos=k_pos, k_neg=k_neg, beta=beta / 2, delta=delta, m=m,
                       relation=relation, unit=unit)
    fd = fdp_one_run_bound(scores, membership, k_pos=k_fdp, beta=beta / 2, delta=delta, m=m, relation=relation,
                           unit=unit)
    mu = fdp_one_run_parameter(fd.counts["m"], fd.counts["r"], fd.counts["v"], beta=beta / 2, delta=delta,
                               null="gdp")
    counts = {**st.counts, "r_fdp": fd.counts["r"], "v_fdp": fd.counts["v"], "k_fdp": k_fdp,
              "eps_steinke": st.epsilon, "eps_fdp": fd.epsilon, "mu_lower": mu,
              "eps_gdp_view": gdp_epsilon(mu, delta) if delta > 0 else None}
    eps = max(st.epsilon, fd.epsilon)
    which = "f-DP" if fd.epsilon > st.epsilon else "Steinke"
    rel = "" if relation == RELATION and unit == UNIT else f" ({relation}, per {unit})"
    label = (f"one-run{rel}, max of Steinke et al. 2023 (k+={k_pos}, k-={k_neg}: {st.epsilon:.3g}) and f-DP "
             f"Mahloujifar et al. 2025 (k+={k_fdp}: {fd.epsilon:.3g}), each at {100 * (1 - beta / 2):.1f}% "
             f"(rule fixed in advance; {which} reported), m={counts['m']}, delta={delta:g}; GDP view mu_lb={mu:.3g}")
    return EpsilonLowerBound(eps, "one-run-best", label, 1 - beta, delta, counts, relation=relation, unit=unit)


# --------------------------------------------------------------------------------------------------
# Multi run: hypothesis testing with Clopper-Pearson, and the Gaussian-DP variant
# --------------------------------------------------------------------------------------------------

def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper confidence bound (level 1 - alpha) on a rate with k of n."""
    if not 0 <= k <= n or n <= 0:
        raise ConfigError(f"clopper-pearson: need 0 <= k <= n and n > 0, got k={k}, n={n}")
    check_probability("alpha", alpha)
    return 1.0 if k >= n else float(stats.beta.ppf(1.0 - alpha, k + 1, n - k))


def hypothesis_test_epsilon(fp: int, n_neg: int, fn: int, n_pos: int, *, alpha: float = 0.05,
                            delta: float = 0.0, tests: int = 1) -> tuple[float, float, float]:
    """eps_lb from false positives/negatives with Clopper-Pearson bounds at alpha / (2 tests) each.

    Returns ``(eps_lb, FPR_hi, FNR_hi)``.
    """
    _check_delta(delta)
    level = alpha / (2 * tests)
    fpr_hi = clopper_pearson_upper(fp, n_neg, level)
    fnr_hi = clopper_pearson_upper(fn, n_pos, level)
    candidates = [0.0]
    for a, b in ((fpr_hi, fnr_hi), (fnr_hi, fpr_hi)):
        if 1.0 - delta - a > 0 and b > 0:
            candidates.append(math.log((1.0 - delta - a) / b))
    return max(candidates), fpr_hi, fnr_hi


def gdp_mu_lower(fpr_hi: float, fnr_hi: float) -> float:
    """mu_lb = Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi) (Nasr et al. 2023), clipped at 0."""
    mu = float(stats.norm.isf(fpr_hi) - stats.norm.ppf(fnr_hi))
    return max(mu, 0.0) if math.isfinite(mu) else (math.inf if mu > 0 else 0.0)


def gdp_delta(mu: float, epsilon: float) -> float:
    """delta(eps) of mu-GDP: Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Dong, Roth & Su, Cor. 2.13)."""
    if mu <= 0:
        return 0.0
    a = stats.norm.logcdf(-epsilon / mu + mu / 2)
    b = epsilon + stats.norm.logcdf(-epsilon / mu - mu / 2)
    return float(math.exp(a) * -math.expm1(b - a)) if b < a else 0.0


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest eps with mu-GDP => (eps, delta)-DP (0 when delta(0) <= delta)."""
    if delta <= 0:
        return math.inf if mu > 0 else 0.0
    _check_delta(delta)
    if not math.isfinite(mu):
        return math.inf
    if gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = max(1.0, mu * mu)
    while gdp_delta(mu, hi) > delta:
        hi *= 2.0
    return float(optimize.brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-10, rtol=1e-12))


def _counts(in_scores: np.ndarray, out_scores: np.ndarray, threshold: float) -> tuple[int, int]:
    """False negatives (in-runs below threshold) and false positives (out-runs at or above it)."""
    return int(np.sum(in_scores < threshold)), int(np.sum(out_scores >= threshold))


def cp_upper_vec(k: np.ndarray | int, n: np.ndarray | int, alpha: float) -> np.ndarray:
    """:func:`clopper_pearson_upper` vectorised over counts ``k`` of ``n`` (1 where k >= n)."""
    k, n = np.asarray(k), np.asarray(n)
    return np.where(k >= n, 1.0, stats.beta.ppf(1.0 - alpha, k + 1, np.maximum(n - k, 1)))


def _best_threshold(in_scores: np.ndarray, out_scores: np.ndarray, alpha: float, delta: float,
                    tests: int = 1) -> tuple[float, float]:
    """The candidate threshold maximising the Clopper-Pearson bound on these scores, and that bound.

    Candidates are the midpoints between consecutive distinct scores (and +-inf); among thresholds
    that tie for the best bound the middle one is taken, so that a clean separation on these runs is
    cut in the middle of its gap, not at its edge. Same formula as :func:`hypothesis_test_epsilon`.
    """
    distinct = np.unique(np.concatenate([in_scores, out_scores]))
    candidates = np.concatenate([[-np.inf], (distinct[:-1] + distinct[1:]) / 2, [np.inf]])
    fn = np.searchsorted(np.sort(in_scores), candidates, side="left")
    fp = out_scores.size - np.searchsorted(np.sort(out_scores), candidates, side="left")
    level = alpha / (2 * tests)
    fpr_hi = cp_upper_vec(fp, out_scores.size, level)
    fnr_hi = cp_upper_vec(fn, in_scores.size, level)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where((1 - delta - fpr_hi > 0) & (fnr_hi > 0), np.log((1 - delta - fpr_hi) / fnr_hi), 0.0)
        b = np.where((1 - delta - fnr_hi > 0) & (fpr_hi > 0), np.log((1 - delta - fnr_hi) / fpr_hi), 0.0)
    eps = np.maximum(np.maximum(a, b), 0.0)
    best = np.flatnonzero(eps >= eps.max() - 1e-12)
    i = int(best[len(best) // 2])
    return float(candidates[i]), float(eps[i])


THRESHOLD_STRATEGIES = ("split", "bonferroni")


def _multi_run_threshold(in_scores: np.ndarray, out_scores: np.ndarray, threshold: str | float, alpha: float,
                         delta: float, seed: int) -> tuple[float, np.ndarray, np.ndarray, int, str]:
    """(threshold, the runs it is evaluated on (in, out), the number of thresholds tested, how it was chosen)
    for :func:`multi_run_bound`'s ``threshold`` strategy."""
    from privaudit.defenses.seeding import numpy_rng

    if not isinstance(threshold, str):
        return float(threshold), in_scores, out_scores, 1, "threshold fixed in advance"
    if threshold not in THRESHOLD_STRATEGIES:
        raise ConfigError(f"threshold: unknown value {threshold!r}; accepted: "
                          f"{', '.join(THRESHOLD_STRATEGIES)} or a number")
    if threshold == "split":
        if min(in_scores.size, out_scores.size) < 4:
            raise ConfigError("multi-run bound: the split strategy needs at least 4 runs on each side")
        rng = numpy_rng(seed, "multi-run-split")
        pin, pout = rng.permutation(in_scores.size), rng.permutation(out_scores.size)
        hin, hout = in_scores.size // 2, out_scores.size // 2
        t, _ = _best_threshold(in_scores[pin[:hin]], out_scores[pout[:hout]], alpha, delta)
        how = f"threshold chosen on a separate half ({hin}+{hout} runs)"
        return t, in_scores[pin[hin:]], out_scores[pout[hout:]], 1, how
    tests = int(np.unique(np.concatenate([in_scores, out_scores])).size + 1)  # thresholds tried
    t, _ = _best_threshold(in_scores, out_scores, alpha, delta, tests)
    return t, in_scores, out_scores, tests, f"best of {tests} thresholds with Bonferroni correction"


def multi_run_bound(in_scores: np.ndarray, out_scores: np.ndarray, *, alpha: float = 0.05,
                    delta: float = 0.0, threshold: str | float = "split", method: str = "clopper-pearson",
                    seed: int = 0) -> EpsilonLowerBound:
    """Lower bound from scores of independent runs on D' (canary in) and D (canary out).

    ``threshold``: ``"split"`` chooses it on a random half of each side's runs (seeded) and counts
    errors on the other half; ``"bonferroni"`` uses all runs and tests every distinct threshold at
    alpha / #thresholds; a number is a threshold fixed in advance. ``method``: ``clopper-pearson``
    (sound for any mechanism) or ``gdp`` (assumes a Gaussian trade-off curve).
    """
    in_scores = np.asarray(in_scores, dtype=np.float64).ravel()
    out_scores = np.asarray(out_scores, dtype=np.float64).ravel()
    if method not in ("clopper-pearson", "gdp"):
        raise ConfigError(f"method: unknown value {method!r}; accepted: clopper-pearson, gdp")
    if method == "gdp" and delta <= 0:
        raise ConfigError("delta: the gdp method needs delta > 0")
    check_probability("alpha", alpha)
    t, in_eval, out_eval, tests, how = _multi_run_threshold(in_scores, out_scores, threshold, alpha, delta, seed)
    if min(in_eval.size, out_eval.size) < 1:
        raise ConfigError("multi-run bound: needs at least one run on each side")
    fn, fp = _counts(in_eval, out_eval, t)
    eps, fpr_hi, fnr_hi = hypothesis_test_epsilon(fp, out_eval.size, fn, in_eval.size, alpha=alpha,
                                                  delta=delta, tests=tests)
    counts = {"runs_in": int(in_eval.size), "runs_out": int(out_eval.size), "false_negatives": fn,
              "false_positives": fp, "fpr_upper": fpr_hi, "fnr_upper": fnr_hi, "threshold": t,
              "tests": tests}
    conf = f"{100 * (1 - alpha):.0f}% confidence"
    if method == "gdp":
        mu = max(gdp_mu_lower(fpr_hi, fnr_hi), gdp_mu_lower(fnr_hi, fpr_hi))
        eps_g = gdp_epsilon(mu, delta)
        label = (f"gaussian-dp (Nasr et al. 2023): mu_lb={mu:.3f} from Clopper-Pearson FPR/FNR over "
                 f"{in_eval.size}+{out_eval.size} runs, {how}, {conf}, delta={delta:g}; "
                 f"assumes a Gaussian trade-off curve")
        return EpsilonLowerBound(eps_g, "gdp", label, 1 - alpha, delta, {**counts, "mu_lower": mu},
                                 notes=("valid only if the mechanism's trade-off curve is Gaussian",))
    label = (f"clopper-pearson (multi-run): {fp} FP / {out_eval.size} and {fn} FN / {in_eval.size} runs, "
             f"{how}, {conf}, delta={delta:g}")
    return EpsilonLowerBound(eps, "clopper-pearson", label, 1 - alpha, delta, counts)


def multi_run_ceiling(runs_in: int, runs_out: int, *, alpha: float = 0.05, delta: float = 0.0,
                      threshold: str | float = "split") -> float:
    """The largest bound :func:`multi_run_bound` can give with these runs: no error among the runs it counts (the
    second half with ``split``; all of them, each threshold at alpha / (runs + 1), with ``bonferroni``)."""
    if min(runs_in, runs_out) < (4 if threshold == "split" else 1):
        raise ConfigError(f"multi-run bound: needs at least {4 if threshold == 'split' else 1} runs on each side, "
                          f"got {runs_in} and {runs_out}")
    tests = 1
    if threshold == "split":
        runs_in, runs_out = runs_in - runs_in // 2, runs_out - runs_out // 2
    elif threshold == "bonferroni":
        tests = runs_in + runs_out + 1
    return hypothesis_test_epsilon(0, runs_out, 0, runs_in, alpha=alpha, delta=delta, tests=tests)[0]
