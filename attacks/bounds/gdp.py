"""Gaussian DP: mu from a pair of error rates, and the (epsilon, delta) curve of mu-GDP (Dong, Roth & Su 2022)."""

from __future__ import annotations

import math

from scipy import optimize, stats
from privaudit.attacks.bounds.lower_bound import check_delta


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
    check_delta(delta)
    if not math.isfinite(mu):
        return math.inf
    if gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = max(1.0, mu * mu)
    while gdp_delta(mu, hi) > delta:
        hi *= 2.0
    return float(optimize.brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-10, rtol=1e-12))
