"""One-shot Gaussian mechanism: exact (analytic) epsilon, and the classical bound with its validity range.

- ``analytic`` (default): Balle & Wang 2018 ("Improving the Gaussian mechanism for differential privacy:
  analytical calibration and optimal denoising"), Thm. 8: the Gaussian mechanism with noise multiplier z
  is (eps, delta)-DP iff  Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) - eps z) <= delta.  The smallest such
  eps is computed by dp-accounting's ``get_epsilon_gaussian`` (an implementation of that theorem); it is
  exact, so it is also the tight answer the ``pld``/``prv`` accountants approximate.
- ``classical``: eps = sqrt(2 ln(1.25/delta)) / z (Dwork & Roth 2014, Thm. A.1), which the ALM paper
  (Sec. 4.2) and Logit-DP's Cor. 4.4 (without the factor 2) use. The theorem only holds for eps < 1; a
  larger value is reported as not applicable (and flagged in the analytic result's details), never as a
  guarantee.

A composition of unsampled Gaussians is itself one Gaussian (:func:`~privaudit.accountants.events.effective_gaussian_noise`),
so it is covered exactly; so is DP-FTRL tree aggregation, whose whole release is one Gaussian mechanism of
L2 sensitivity S = sqrt(tree_sensitivity_squared) because the participation schedule (hence every node's
sensitivity) is fixed in advance (Gaussian DP composition, Dong, Roth & Su 2019, Cor. 3.3): noise
multiplier z / S. Sampled or non-Gaussian mechanisms are not applicable. The noise multiplier is
relative to the L2 sensitivity under the claim's relation, which makes the answer relation-independent.
"""

from __future__ import annotations

import math
from typing import Any

import dp_accounting

from privaudit.accountants.base import Accountant, NotApplicable
from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import (SingleEpochTreeAggregationDpEvent, TreeAggregationDpEvent, describe,
                                effective_gaussian_noise)
from privaudit.accountants.tree import zcdp_rho
from privaudit.core.errors import ConfigError, check_positive, check_probability, one_of

METHODS = ("analytic", "classical")


def classical_gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """sqrt(2 ln(1.25 / delta)) / z — valid as a guarantee only when the result is < 1."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) / noise_multiplier


def analytic_gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Exact epsilon of the Gaussian mechanism (Balle & Wang 2018, Thm. 8).

    dp-accounting's ``get_epsilon_gaussian`` (0.6 and later); with an older dp-accounting, the same theorem
    solved here: the root in eps of :func:`analytic_gaussian_delta` (decreasing in eps) by Brent's method.
    """
    library = getattr(dp_accounting, "get_epsilon_gaussian", None)
    if library is not None:
        return float(library(noise_multiplier, delta))
    from scipy.optimize import brentq

    if noise_multiplier == 0 or delta == 0:
        return math.inf
    if delta >= 1 or math.isinf(noise_multiplier) or analytic_gaussian_delta(noise_multiplier, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while analytic_gaussian_delta(noise_multiplier, hi) > delta:
        hi *= 2.0
    return float(brentq(lambda eps: analytic_gaussian_delta(noise_multiplier, eps) - delta, 0.0, hi,
                        xtol=1e-12, rtol=1e-12))


def analytic_gaussian_delta(noise_multiplier: float, epsilon: float) -> float:
    """delta(eps) of the Gaussian mechanism with sigma / Delta_2 = z (Balle & Wang 2018, Thm. 8).

    delta = Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) - eps z), with the second term in log space so
    large eps do not overflow.
    """
    from scipy.special import log_ndtr, ndtr

    z = noise_multiplier
    a, b = 1.0 / (2.0 * z), epsilon * z
    return float(max(0.0, ndtr(a - b) - math.exp(epsilon + log_ndtr(-a - b))))


def analytic_gaussian_noise_multiplier(epsilon: float, delta: float) -> float:
    """Smallest sigma / Delta_2 for which the Gaussian mechanism is (eps, delta)-DP (exact, Balle & Wang 2018)."""
    from scipy.optimize import brentq

    check_positive("epsilon", epsilon)
    check_probability("delta", delta)
    lo, hi = 1e-6, 1.0
    while analytic_gaussian_delta(hi, epsilon) > delta:
        hi *= 2.0
        if hi > 1e8:
            raise ConfigError(f"delta: {delta} is unreachable at epsilon {epsilon}")
    if analytic_gaussian_delta(lo, epsilon) <= delta:
        return lo
    f = lambda log_z: analytic_gaussian_delta(math.exp(log_z), epsilon) - delta  # noqa: E731
    return math.exp(brentq(f, math.log(lo), math.log(hi), xtol=1e-12, rtol=1e-12))


def classical_gaussian_noise_multiplier(epsilon: float, delta: float) -> float:
    """sqrt(2 ln(1.25/delta)) / eps (Dwork & Roth 2014, Thm. A.1). Proven only for eps < 1."""
    check_positive("epsilon", epsilon)
    check_probability("delta", delta)
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


class GaussianAccountant(Accountant):
    name = "gaussian"

    def __init__(self, method: str = "analytic"):
        if method not in METHODS:
            raise one_of("gaussian.method", method, METHODS)
        self.method = method

    def _epsilon(self, claim: PrivacyClaim) -> tuple[float, dict[str, Any] | None]:
        z = effective_gaussian_noise(claim.event)
        if z is None and any(isinstance(e, (TreeAggregationDpEvent, SingleEpochTreeAggregationDpEvent))
                             for e in self.walk(claim.event)):
            try:
                rho = zcdp_rho(claim.event)  # rho = S^2 / (2 z^2) = 1 / (2 z_eff^2)
            except NotApplicable:
                rho = None
            z = None if rho is None else math.inf if rho == 0 else (2 * rho) ** -0.5
        if z is None:
            raise NotApplicable(f"gaussian: only unsampled Gaussian noise (and compositions of it) is a one-shot "
                                f"Gaussian mechanism, not {describe(claim.event)}")
        if z == 0:
            return math.inf, {"noise_multiplier": 0.0}
        if claim.delta <= 0:
            raise NotApplicable("gaussian: the Gaussian mechanism has no pure (delta = 0) guarantee")
        classical = classical_gaussian_epsilon(z, claim.delta)
        details = {"noise_multiplier": z, "classical": classical, "classical_valid": classical < 1.0,
                   "method": self.method}
        if self.method == "classical":
            if classical >= 1.0:
                raise NotApplicable(f"gaussian[classical]: sqrt(2 ln(1.25/delta))/z = {classical:.4g} is outside the "
                                    "bound's validity range eps < 1 (Dwork & Roth 2014, Thm. A.1)")
            return classical, details
        return analytic_gaussian_epsilon(z, claim.delta), details
