"""RDP -> (epsilon, delta)-DP conversions, each as its paper states it.

An RDP curve rho(alpha) (the mechanism is (alpha, rho(alpha))-RDP for every order alpha) gives, for a
target delta, ``epsilon = min over alpha > 1 of eps_alpha(rho(alpha), delta)`` with

- ``mironov``: Mironov 2017 ("Rényi Differential Privacy"), Prop. 3:
  ``eps = rho + log(1/delta) / (alpha - 1)``.
- ``balle2020``: Balle, Barthe, Gaboardi, Hsu & Sato 2020 ("Hypothesis testing interpretations and Rényi
  differential privacy"), Thm. 21 — the conversion DPCL (Sec. 4.1.4, its Thm. 5) and Opacus use:
  ``eps = rho + log((alpha - 1) / alpha) - (log delta + log alpha) / (alpha - 1)``.
- ``cks2020``: Canonne, Kamath & Steinke 2020 ("The discrete Gaussian for differential privacy"),
  Prop. 12, stated as a delta for a given epsilon:
  ``delta = exp((alpha - 1)(rho - eps)) / (alpha - 1) * (1 - 1/alpha)^alpha``.

**balle2020 and cks2020 are the same formula.** Solving the CKS expression for eps gives
``rho + log(1 - 1/alpha) + (log(1 - 1/alpha) - log(alpha - 1) - log delta) / (alpha - 1)``
``= rho + log((alpha-1)/alpha) - (log delta + log alpha) / (alpha - 1)``, Balle et al.'s Thm. 21
term for term. dp-accounting's ``compute_epsilon`` cites CKS Prop. 12 and Opacus' ``get_privacy_spent``
cites Balle et al. Thm. 21 for this one expression. We keep both names (papers cite one or the other)
and compute ``cks2020`` from its delta form, so the equality is checked rather than assumed
(``tests/test_accountants_conversions.py``). Both are uniformly tighter than Mironov's by
``log(alpha/(alpha-1)) + log(alpha)/(alpha-1) > 0``.

Only orders alpha > 1 are used; an infinite rho gives an infinite epsilon at that order. Epsilon is
clamped at 0 (the formulas can go negative for tiny rho and large delta).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from privaudit.core.errors import ConfigError, one_of

CONVERSIONS = ("mironov", "balle2020", "cks2020")
CONVERSION_SOURCES = {
    "mironov": "Mironov 2017, Prop. 3",
    "balle2020": "Balle et al. 2020, Thm. 21",
    "cks2020": "Canonne, Kamath & Steinke 2020, Prop. 12 (same formula as balle2020)",
}


def _mironov(alpha: float, rho: float, delta: float) -> float:
    return rho + math.log(1.0 / delta) / (alpha - 1.0)


def _balle2020(alpha: float, rho: float, delta: float) -> float:
    return rho + math.log1p(-1.0 / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1.0)


def _cks2020(alpha: float, rho: float, delta: float) -> float:
    # log delta(eps) = (alpha - 1)(rho - eps) - log(alpha - 1) + alpha log(1 - 1/alpha); solve for eps.
    log_rest = -math.log(alpha - 1.0) + alpha * math.log1p(-1.0 / alpha)
    return rho + (log_rest - math.log(delta)) / (alpha - 1.0)


_FORMULAS = {"mironov": _mironov, "balle2020": _balle2020, "cks2020": _cks2020}


def check_conversion(conversion: str) -> str:
    if conversion not in _FORMULAS:
        raise one_of("conversion", conversion, CONVERSIONS)
    return conversion


def epsilon_at_order(alpha: float, rho: float, delta: float, conversion: str = "balle2020") -> float:
    """Epsilon from a single (alpha, rho)-RDP guarantee at ``delta`` (unclamped; inf if rho is inf)."""
    if not alpha > 1:
        raise ConfigError(f"order: must be > 1, got {alpha!r}")
    if math.isinf(rho) or math.isnan(rho):
        return math.inf
    return _FORMULAS[check_conversion(conversion)](float(alpha), float(rho), float(delta))


def rdp_to_dp(orders: Sequence[float], rdp: Sequence[float], delta: float,
              conversion: str = "balle2020") -> tuple[float, float]:
    """``(epsilon, optimal order)`` from an RDP curve at ``delta`` with the chosen conversion.

    ``delta == 0`` gives ``(inf, nan)`` unless every rho is 0 (no RDP curve yields pure DP here).
    """
    check_conversion(conversion)
    if len(orders) != len(rdp):
        raise ValueError("orders and rdp must have the same length")
    if not 0 <= delta < 1:
        raise ConfigError(f"delta: must lie in [0, 1), got {delta!r}")
    rdp_arr = np.asarray(rdp, dtype=float)
    if delta == 0:
        return (0.0, math.nan) if np.all(rdp_arr == 0) else (math.inf, math.nan)
    best, best_order = math.inf, math.nan
    for alpha, rho in zip(orders, rdp_arr):
        if alpha <= 1:
            continue
        eps = epsilon_at_order(alpha, max(float(rho), 0.0), delta, conversion)
        if eps < best:
            best, best_order = eps, float(alpha)
    return max(best, 0.0), best_order


def zcdp_to_dp(rho: float, delta: float, conversion: str = "balle2020",
               orders: Sequence[float] | None = None) -> tuple[float, float]:
    """Epsilon of a rho-zCDP mechanism: it is (alpha, rho * alpha)-RDP for all alpha > 1 (Bun & Steinke 2016,
    Def. 1.1); the chosen RDP conversion is minimised over a fine grid of orders (with ``cks2020`` this is
    CKS 2020 Cor. 13 evaluated numerically)."""
    if orders is None:
        orders = ZCDP_ORDERS
    return rdp_to_dp(orders, [rho * a for a in orders], delta, conversion)


# A fine grid for zCDP conversions: the optimum alpha* ~ 1 + sqrt(log(1/delta) / rho) can be large for small rho.
ZCDP_ORDERS = tuple((1.0 + np.geomspace(1e-3, 1e5, 4000)).tolist())
