"""The smallest epsilon whose hockey-stick divergence is at most delta, read off a privacy loss distribution with
one vectorised pass instead of dp-accounting's Python loop over the losses.

dp-accounting (``pld_pmf._get_epsilon_for_delta``; Meiser & Mohammadi 2018, Koskela et al. 2020) scans the losses
l_0 > l_1 > ... of a dense PMF from the top, keeping M_k = m_inf + sum_{j<k} p_j and L_k = sum_{j<k} e^{-l_j} p_j,
and stops at the first k where M_k > delta, L_k > 0 and log((M_k - delta) / L_k) >= l_k; epsilon is then
log((M_k - delta) / L_k) (0 when M <= L + delta; inf when m_inf > delta). The same M_k and L_k are prefix sums, so
the stop is the first index of a boolean array. The losses are generated as the library generates them (repeated
subtraction of the grid step from the top loss) and the prefix sums accumulate in the library's order, so the result
is the library's up to the last bits of ``exp`` (NumPy's against ``math.exp``): tests/test_pld_epsilon.py compares
both on many PLDs. A PMF that is not dense goes to the library itself.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def epsilon_for_delta(pld: Any, delta: float) -> float:
    """dp-accounting's ``PrivacyLossDistribution.get_epsilon_for_delta(delta)`` (module docstring)."""
    eps = _pmf_epsilon(pld._pmf_remove, delta)
    if pld._symmetric:
        return eps
    return max(eps, _pmf_epsilon(pld._pmf_add, delta))


#: The first block of losses scanned; each next block is twice as long (the scan usually stops near the top).
BLOCK = 2048


def _pmf_epsilon(pmf: Any, delta: float) -> float:
    """One PMF's epsilon (module docstring), scanned in blocks from the top loss, its sums carried across blocks."""
    from dp_accounting.pld.pld_pmf import DensePLDPmf

    if not isinstance(pmf, DensePLDPmf):
        return pmf.get_epsilon_for_delta(delta)
    infinity = float(pmf._infinity_mass)
    if infinity > delta:
        return math.inf
    probs = np.flip(np.asarray(pmf._probs, dtype=np.float64))
    step = float(pmf._discretization)
    loss, upper, lower = (pmf._lower_loss + len(probs) - 1) * step, infinity, 0.0
    start, size = 0, BLOCK
    while start < probs.size:
        found, (loss, upper, lower) = _block(probs[start:start + size], loss, upper, lower, step, delta)
        if found is not None:
            return found
        start, size = start + size, 2 * size
    return _final(upper, lower, delta)


def _block(p: np.ndarray, loss: float, upper: float, lower: float, step: float,
           delta: float) -> tuple[float | None, tuple[float, float, float]]:
    """One block of the scan from the sums M, L before it and its first loss: (the epsilon where the scan stops in
    it, else None; the next block's first loss and sums)."""
    losses = np.cumsum(np.concatenate(([loss], np.full(p.size - 1, -step))))
    m = np.cumsum(np.concatenate(([upper], p)))  # M_k before adding p_k; the block's end last
    low = np.cumsum(np.concatenate(([lower], np.exp(-losses) * p)))
    # The ratio is evaluated at every loss of the block, also where the scan's other conditions fail (M_k <= delta
    # at the top losses, where L_k is still denormal: the quotient overflows to inf there, masked out). Where it is not
    # masked, a quotient beyond the float range has log +inf, as the library's Python division gives: nothing to warn.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        stop = (m[:-1] > delta) & (low[:-1] > 0) & (
            np.log((m[:-1] - delta) / np.where(low[:-1] > 0, low[:-1], 1.0)) >= losses)
    special = (m[1:] >= delta) & (low[1:] == 0)  # exp(-loss) underflowed: the library returns the loss
    b, s = _first(stop), _first(special)
    if s < b:
        return max(0.0, float(losses[s])), (0.0, 0.0, 0.0)
    if b < p.size:
        return _final(float(m[b]), float(low[b]), delta), (0.0, 0.0, 0.0)
    return None, (float(losses[-1]) - step, float(m[-1]), float(low[-1]))


def _first(mask: np.ndarray) -> int:
    """The first True index of ``mask`` (its length when none)."""
    return int(np.argmax(mask)) if mask.any() else mask.size


def _final(mass_upper: float, mass_lower: float, delta: float) -> float:
    if mass_upper <= mass_lower + delta:
        return 0
    return math.log((mass_upper - delta) / mass_lower)
