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

Per-example membership-inference rates measured on one model are not independent trials of a fixed
neighbouring pair, so they are never turned into a Clopper-Pearson bound here; the audit pool's
random 1/2 inclusion makes any attack's scores a valid *one-run* audit instead.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np
from scipy import optimize, special, stats

from core.errors import ConfigError, check_probability

RELATION = "add-remove"


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

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d


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
    tail = float(stats.binom.sf(v - 1, r, q))  # P[Binomial(r, q) >= v]
    if delta == 0 or v == 0:
        return min(tail, 1.0)
    i = np.arange(1, v + 1)
    window = stats.binom.sf(v - i - 1, r, q) - tail  # P[v - i <= Binomial(r, q) < v]
    alpha_star = float(np.max(window / i))
    return min(tail + 2.0 * m * delta * alpha_star, 1.0)


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
                  bonferroni: int = 1) -> EpsilonLowerBound:
    """One-run bound from attack scores (higher = member) with k+ / k- fixed in advance.

    ``m`` defaults to the number of scored canaries (only the delta term uses it). ``bonferroni``
    > 1 tests at beta / bonferroni (used by :func:`one_run_bound_search`).
    """
    membership = np.asarray(membership, dtype=bool).ravel()
    guesses = one_run_guesses(scores, k_pos, k_neg)
    if membership.size != guesses.size:
        raise ConfigError(f"membership: {membership.size} entries for {guesses.size} scores")
    m = guesses.size if m is None else m
    r = int(np.count_nonzero(guesses))
    v = int(np.sum((guesses == 1) & membership) + np.sum((guesses == -1) & ~membership))
    level = beta / bonferroni
    eps = one_run_epsilon(m, r, v, beta=level, delta=delta)
    label = (f"one-run (Steinke et al. 2023): k+={k_pos}, k-={k_neg} fixed in advance, "
             f"{v}/{r} correct of m={m}, {100 * (1 - beta):.0f}% confidence, delta={delta:g}")
    return EpsilonLowerBound(eps, "one-run", label, 1 - beta, delta,
                             {"m": m, "r": r, "v": v, "k_pos": k_pos, "k_neg": k_neg})


def one_run_bound_search(scores: np.ndarray, membership: np.ndarray, grid: Sequence[tuple[int, int]], *,
                         beta: float = 0.05, delta: float = 0.0, m: int | None = None) -> EpsilonLowerBound:
    """Best one-run bound over a grid of (k+, k-) pairs, each tested at beta / len(grid) (union bound)."""
    grid = list(grid)
    if not grid:
        raise ConfigError("grid: needs at least one (k_pos, k_neg) pair")
    best = max((one_run_bound(scores, membership, k_pos=kp, k_neg=kn, beta=beta, delta=delta, m=m,
                              bonferroni=len(grid)) for kp, kn in grid), key=lambda b: b.epsilon)
    c = best.counts
    label = (f"one-run (Steinke et al. 2023): best of {len(grid)} (k+, k-) pairs with Bonferroni correction, "
             f"k+={c['k_pos']}, k-={c['k_neg']}, {c['v']}/{c['r']} correct of m={c['m']}, "
             f"{100 * (1 - beta):.0f}% confidence, delta={delta:g}")
    return EpsilonLowerBound(best.epsilon, "one-run-search", label, 1 - beta, delta,
                             {**best.counts, "grid_size": len(grid)})


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


def _cp_upper_vec(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
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
    fpr_hi = _cp_upper_vec(fp, out_scores.size, level)
    fnr_hi = _cp_upper_vec(fn, in_scores.size, level)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where((1 - delta - fpr_hi > 0) & (fnr_hi > 0), np.log((1 - delta - fpr_hi) / fnr_hi), 0.0)
        b = np.where((1 - delta - fnr_hi > 0) & (fpr_hi > 0), np.log((1 - delta - fnr_hi) / fpr_hi), 0.0)
    eps = np.maximum(np.maximum(a, b), 0.0)
    best = np.flatnonzero(eps >= eps.max() - 1e-12)
    i = int(best[len(best) // 2])
    return float(candidates[i]), float(eps[i])


THRESHOLD_STRATEGIES = ("split", "bonferroni")


def multi_run_bound(in_scores: np.ndarray, out_scores: np.ndarray, *, alpha: float = 0.05,
                    delta: float = 0.0, threshold: str | float = "split", method: str = "clopper-pearson",
                    seed: int = 0) -> EpsilonLowerBound:
    """Lower bound from scores of independent runs on D' (canary in) and D (canary out).

    ``threshold``: ``"split"`` chooses it on a random half of each side's runs (seeded) and counts
    errors on the other half; ``"bonferroni"`` uses all runs and tests every distinct threshold at
    alpha / #thresholds; a number is a threshold fixed in advance. ``method``: ``clopper-pearson``
    (sound for any mechanism) or ``gdp`` (assumes a Gaussian trade-off curve).
    """
    from defenses.seeding import numpy_rng

    in_scores = np.asarray(in_scores, dtype=np.float64).ravel()
    out_scores = np.asarray(out_scores, dtype=np.float64).ravel()
    if method not in ("clopper-pearson", "gdp"):
        raise ConfigError(f"method: unknown value {method!r}; accepted: clopper-pearson, gdp")
    if method == "gdp" and delta <= 0:
        raise ConfigError("delta: the gdp method needs delta > 0")
    check_probability("alpha", alpha)
    tests = 1
    if isinstance(threshold, str):
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
            in_eval, out_eval = in_scores[pin[hin:]], out_scores[pout[hout:]]
            how = f"threshold chosen on a separate half ({hin}+{hout} runs)"
        else:
            tests = int(np.unique(np.concatenate([in_scores, out_scores])).size + 1)  # thresholds tried
            t, _ = _best_threshold(in_scores, out_scores, alpha, delta, tests)
            in_eval, out_eval = in_scores, out_scores
            how = f"best of {tests} thresholds with Bonferroni correction"
    else:
        t = float(threshold)
        in_eval, out_eval = in_scores, out_scores
        how = "threshold fixed in advance"
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
