"""Multi run on a fixed neighbouring pair: hypothesis testing with Clopper-Pearson confidence bounds (Kairouz et
al. 2015; Jagielski et al. 2020; Nasr et al. 2021) and its Gaussian-DP variant (:mod:`privaudit.attacks.bounds`
states the families).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from privaudit.core.errors import ConfigError, check_probability
from privaudit.attacks.bounds.lower_bound import EpsilonLowerBound, check_delta
from privaudit.attacks.bounds.gdp import gdp_epsilon, gdp_mu_lower


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
    check_delta(delta)
    level = alpha / (2 * tests)
    fpr_hi = clopper_pearson_upper(fp, n_neg, level)
    fnr_hi = clopper_pearson_upper(fn, n_pos, level)
    candidates = [0.0]
    for a, b in ((fpr_hi, fnr_hi), (fnr_hi, fpr_hi)):
        if 1.0 - delta - a > 0 and b > 0:
            candidates.append(math.log((1.0 - delta - a) / b))
    return max(candidates), fpr_hi, fnr_hi


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
    from privaudit.defenses.training.seeding import numpy_rng

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
