"""Noise calibration: the smallest noise multiplier whose claim meets a target epsilon."""

from __future__ import annotations

import math
from typing import Callable

from accountants.claim import PrivacyClaim
from accountants.registry import get_accountant
from audit.errors import ConfigError, check_positive


def calibrate(template: Callable[[float], PrivacyClaim], target_epsilon: float, accountant: str = "rdp",
              *, low: float = 1e-3, high: float = 1e4, rel_tol: float = 1e-6, **options) -> float:
    """Smallest noise multiplier z with epsilon(template(z)) <= target_epsilon, by bisection.

    ``template`` maps a noise multiplier to the full claim (sampling, steps, every mechanism of a step,
    so budgets split across several mechanisms calibrate jointly). Epsilon must decrease in z.
    """
    check_positive("target_epsilon", target_epsilon)
    acc = get_accountant(accountant, **options)

    def eps(z: float) -> float:
        result = acc.epsilon(template(z))
        if result.epsilon is None:
            raise ConfigError(f"accountant {accountant!r} is not applicable: {result.reason}")
        return result.epsilon

    if eps(high) > target_epsilon:
        raise ConfigError(f"target_epsilon: {target_epsilon} is not reachable with noise multiplier <= {high}")
    if eps(low) <= target_epsilon:
        return low
    lo, hi = math.log(low), math.log(high)
    while hi - lo > rel_tol:
        mid = 0.5 * (lo + hi)
        if eps(math.exp(mid)) <= target_epsilon:
            hi = mid
        else:
            lo = mid
    return math.exp(hi)
