"""RDP of the Gaussian mechanism under sampling without replacement, replace-one relation.

Wang, Balle & Kasiviswanathan 2019 ("Subsampled Rényi differential privacy and analytical moments
accountant", AISTATS), Thm. 9 — the bound DPCL states as its Thm. 4 / Eq. (10) and, for the Gaussian
(whose epsilon(inf) is unbounded, so every ``min{2, (e^eps(inf) - 1)^j}`` is 2), Eq. (11): for integer
alpha >= 2, a mechanism that is (j, eps(j))-RDP on the subsample, run on a uniformly random subset of
size m of n points (gamma = m / n), is (alpha, eps'(alpha))-RDP with

    eps'(alpha) <= 1/(alpha-1) log(1 + gamma^2 C(alpha,2) min{4(e^eps(2) - 1), 2 e^eps(2)}
                                  + sum_{j=3}^{alpha} gamma^j C(alpha,j) 2 e^{(j-1) eps(j)})

with eps(j) = j / (2 z^2) for the Gaussian with noise multiplier z (Mironov 2017, Cor. 3).

dp-accounting's ``_compute_rdp_sample_wor_gaussian`` (the default ``wor_bound="thm27"`` of the ``rdp``
accountant) implements WBK19's strengthened bound (their Thm. 27): for j >= 3 it takes the minimum of
this Thm. 9 term and a forward-difference term, so it is never larger. At alpha = 2 the two coincide.

Non-integer orders: the cumulant generating function K(alpha) = (alpha - 1) eps'(alpha) is convex, so
linear interpolation between floor(alpha) and ceil(alpha) upper-bounds it (WBK19, Cor. 10; the same
interpolation dp-accounting uses), with K(1) = 0.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy.special import gammaln, logsumexp


def _log_binom(n: int, k: np.ndarray) -> np.ndarray:
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def _cgf_thm9(q: float, z: float, alpha: int) -> float:
    """K(alpha) = (alpha - 1) eps'(alpha) of WBK19 Thm. 9 for the Gaussian, integer alpha >= 1."""
    if alpha == 1:
        return 0.0
    eps2 = 2.0 / (2.0 * z * z)
    # j = 2 term: gamma^2 C(alpha, 2) min{4 (e^eps(2) - 1), 2 e^eps(2)}
    log_min2 = min(math.log(4.0) + eps2 + math.log(-math.expm1(-eps2)), math.log(2.0) + eps2)
    terms = [0.0, 2 * math.log(q) + float(_log_binom(alpha, np.array(2.0))) + log_min2]
    if alpha >= 3:
        j = np.arange(3, alpha + 1, dtype=float)
        # gamma^j C(alpha, j) 2 e^{(j-1) eps(j)}, eps(j) = j / (2 z^2)
        terms.extend((j * math.log(q) + _log_binom(alpha, j) + math.log(2.0)
                      + (j - 1.0) * j / (2.0 * z * z)).tolist())
    return float(logsumexp(terms))


def wor_gaussian_rdp_thm9(q: float, noise_multiplier: float, orders: Sequence[float]) -> np.ndarray:
    """RDP curve of the without-replacement subsampled Gaussian by WBK19 Thm. 9 (DPCL Eq. 11).

    ``q`` = m / n, ``noise_multiplier`` = std / replace-one L2 sensitivity. Orders must be >= 1; order 1
    gives 0. With ``q == 1`` there is no sampling and the exact Gaussian RDP alpha / (2 z^2) is returned.
    """
    if not 0 <= q <= 1:
        raise ValueError(f"sampling ratio must lie in [0, 1], got {q}")
    z = float(noise_multiplier)
    out = np.empty(len(orders))
    for i, alpha in enumerate(orders):
        if alpha < 1:
            raise ValueError(f"RDP orders must be >= 1, got {alpha}")
        if q == 0:
            out[i] = 0.0
        elif z == 0 or math.isinf(alpha):
            out[i] = math.inf
        elif q == 1:
            out[i] = alpha / (2 * z * z)
        elif alpha == 1:
            out[i] = 0.0
        elif float(alpha).is_integer():
            out[i] = _cgf_thm9(q, z, int(alpha)) / (alpha - 1)
        else:
            lo, hi = math.floor(alpha), math.ceil(alpha)
            t = alpha - lo
            out[i] = ((1 - t) * _cgf_thm9(q, z, lo) + t * _cgf_thm9(q, z, hi)) / (alpha - 1)
    return out
