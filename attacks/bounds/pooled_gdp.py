"""A GDP lower bound from the pooled error count of one threshold test: one confidence interval instead of two.

Setting (:mod:`privaudit.attacks.bounds.trajectory`): n0 absent and n1 present trials, independent given their
labels, each trial's law mu-GDP (every test has FNR >= f_mu(FPR), f_mu(a) = Phi(Phi^-1(1 - a) - mu)); a threshold
fixed before any observation gives FP false positives and FN false negatives. The two-sided bound puts a
Clopper-Pearson interval on each rate at beta / 2 and adds their margins. When the trials are balanced (paired
replace-one canaries: n0 ~ n1) one interval on the pooled error count E = FP + FN at beta is tighter (its margin
grows like the root of the summed variances, not their sum, and its quantile is beta's, not beta / 2's).

Theorem (sound, exact finite-sample). Let n = n0 + n1, w = n0 / n and
    g_w(mu) = min_a [w a + (1 - w) f_mu(a)] = w Phi(-t) + (1 - w) Phi(t - mu),  t = mu / 2 + ln(w / (1 - w)) / mu
(the smallest mean error of any mu-GDP test at prior w: the Neyman-Pearson threshold of N(0, 1) against N(mu, 1),
where phi(t - mu) / phi(t) = w / (1 - w)); g_w decreases from min(w, 1 - w) at mu = 0 to 0. Under H(mu),
P[mu_lb > mu] <= beta with
    R = CP_upper(E, n, beta),  mu_lb = the mu at which g_w(mu) = R  (0 when R >= min(w, 1 - w)).
Proof. Trial j errs with probability a_j (absent) or b_j (present), b_j >= f_mu(a_j). The mean rates satisfy
b >= f_mu(a) (f_mu convex: Jensen), so the mean error r = w a + (1 - w) b >= w a + (1 - w) f_mu(a) >= g_w(mu).
E is a sum of n independent Bernoulli variables with mean n r (Poisson-binomial): as in the two-sided bound's
proof (Hoeffding 1956, Thm. 4; Greenberg & Mohri 2014, Lemma 1), P[r > R] <= beta for beta <= 1/4 and
r < 1 - 1/n. Outside that event g_w(mu) <= r <= R = g_w(mu_lb), and g_w decreasing gives mu_lb <= mu.

The labels (hence w) come from the auditor's coins and sampling, independent of the noise; conditioning on them
keeps the trials independent. Which form a run uses is chosen from the claim alone, before any observation
(:func:`privaudit.attacks.bounds.trajectory.plan_trajectory`), so choosing does not cost a union bound.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from privaudit.attacks.bounds.multi_run import cp_upper_vec
from privaudit.core.errors import check_probability


def error_floor(mu: float, w: float) -> float:
    """g_w(mu): the smallest mean error w FPR + (1 - w) FNR of a mu-GDP test (module docstring)."""
    if not 0 < w < 1:
        return 0.0
    if mu <= 0:
        return min(w, 1 - w)
    if not math.isfinite(mu):
        return 0.0
    t = mu / 2 + math.log(w / (1 - w)) / mu
    # special.ndtr is Phi: stats.norm.sf(t) / cdf(t) evaluate ndtr(-t) / ndtr(t), bit for bit, after their per-call
    # argument handling (about a thousand times the cost of ndtr on a scalar, in the loop of mu_lower_pooled)
    return float(w * special.ndtr(-t) + (1 - w) * special.ndtr(t - mu))


def mu_from_error(r: float, w: float) -> float:
    """The mu at which g_w(mu) = r (0 when r >= g_w(0); inf when r <= 0)."""
    if r >= error_floor(0.0, w):
        return 0.0
    if r <= 0:
        return math.inf
    hi = 1.0
    while error_floor(hi, w) > r:
        hi *= 2
        if hi > 1e4:
            return math.inf
    return float(optimize.brentq(lambda mu: error_floor(mu, w) - r, 0.0, hi, xtol=1e-12, rtol=1e-12))


def mu_lower_pooled(fp: np.ndarray | int, n0: np.ndarray | int, fn: np.ndarray | int, n1: np.ndarray | int, *,
                    beta: float) -> np.ndarray:
    """mu_lb of the module docstring, vectorised over the counts (0 where either side has no trial)."""
    check_probability("beta", beta)
    fp, n0, fn, n1 = np.broadcast_arrays(*(np.asarray(v) for v in (fp, n0, fn, n1)))
    n = n0 + n1
    r = cp_upper_vec(fp + fn, np.maximum(n, 1), beta)
    out = np.zeros(np.shape(r), dtype=np.float64)
    for i in np.ndindex(out.shape):
        if min(n0[i], n1[i]) > 0:
            out[i] = mu_from_error(float(r[i]), float(n0[i] / n[i]))
    return out
