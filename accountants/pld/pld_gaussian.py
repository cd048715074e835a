"""dp-accounting's pessimistic (connect-the-dots) PLD of the subsampled Gaussian, its inverse privacy loss vectorised.

The library builds the PLD from the hockey-stick divergence delta(eps) on a grid of privacy losses eps (Doroshenko et
al. 2022, connect the dots), and finds each point's x cutoff by a Python call per point: at the intervals the
accountants use, tens of thousands of calls, most of a PLD's cost. The cutoff has a closed form (dp-accounting's own,
``privacy_loss_mechanism.AdditiveNoisePrivacyLoss._inverse_privacy_loss_add`` / ``_remove`` and the Gaussian's
``_inverse_privacy_loss_without_subsampling_remove``), evaluated here on the whole grid at once:

* without subsampling, REMOVE: x(L) = -Delta / 2 - L sigma^2 / Delta; ADD: x(L) + Delta;
* subsampled at q, REMOVE: L' = log(exp(L) / q + 1 - 1 / q), x = x_remove(L') (x = +inf at L = log(1 - q));
  ADD: L' = -log(exp(-L) / q + 1 - 1 / q), x = x_add(L') (x = -inf at L = -log(1 - q)).

Everything else (the grid, the truncation, the rounding, the subsampled pair of PMFs) is the library's code, so the
PLD is the library's up to the last bits of each cutoff (``tests/test_pld_gaussian.py`` compares them). Where the
library's internals this relies on are missing (another dp-accounting version), the library's own function is used.
"""

from __future__ import annotations

import math
import numbers
from typing import Sequence, Union

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm

_INTERNALS = all(hasattr(pld_lib, n) for n in ("_create_pld_pmf_from_monotone_privacy_loss",
                                               "_pld_for_subsampled_mechanism"))


class VectorisedGaussianLoss(plm.GaussianPrivacyLoss):
    """The library's Gaussian privacy loss whose hockey-stick divergence takes a grid of epsilons at once."""

    def inverse_losses(self, losses: np.ndarray) -> np.ndarray:
        """x cutoffs of ``losses`` (module docstring), for ADD and REMOVE."""
        q, delta, var = self.sampling_prob, self.sensitivity, self._standard_deviation ** 2
        add = self.adjacency_type == plm.AdjacencyType.ADD
        if q == 1.0:
            plain = losses
        else:
            b = -losses if add else losses
            d = b + math.log(1 / q)  # log(exp(b) / q + c), c = 1 - 1/q < 0: log(exp(d) - (-c))
            with np.errstate(divide="ignore", invalid="ignore"):
                inner = d + np.log1p(-np.exp(math.log(1 / q - 1) - d))
            plain = -inner if add else inner
            edge = math.log(1 - q)  # REMOVE at log(1-q): x = +inf; ADD at -log(1-q): x = -inf
            at_edge = np.isclose(losses, -edge if add else edge, rtol=1e-9, atol=0.0)
            plain = np.where(at_edge, np.inf if add else -np.inf, plain)
        x = -0.5 * delta - plain * var / delta
        return x + delta if add else x

    def get_delta_for_epsilon(self, epsilon: Union[float, Sequence[float]]) -> Union[float, np.ndarray]:
        """The library's :meth:`get_delta_for_epsilon` with the cutoffs computed on the whole grid."""
        if self.adjacency_type == plm.AdjacencyType.REPLACE:
            return super().get_delta_for_epsilon(epsilon)
        is_scalar = isinstance(epsilon, numbers.Number)
        epsilons = np.array([epsilon]) if is_scalar else np.asarray(epsilon, dtype=float)
        deltas = np.zeros_like(epsilons, dtype=float)
        if self.sampling_prob == 1.0:
            inverse = np.full_like(epsilons, True, dtype=bool)
        elif self.adjacency_type == plm.AdjacencyType.ADD:
            inverse = epsilons < -math.log1p(-self.sampling_prob)
        else:
            inverse = epsilons > math.log1p(-self.sampling_prob)
            deltas[~inverse] = -np.expm1(epsilons[~inverse])
        x = self.inverse_losses(epsilons[inverse])
        deltas[inverse] = self.mu_upper_cdf(x) - np.exp(epsilons[inverse] + self.mu_lower_log_cdf(x))
        deltas = np.clip(deltas, 0, 1)
        return float(deltas[0]) if is_scalar else deltas


def pessimistic_gaussian_pld(z: float, q: float, interval: float) -> pld_lib.PrivacyLossDistribution:
    """dp-accounting's ``from_gaussian_mechanism(z, sensitivity=1, pessimistic_estimate=True, sampling_prob=q,
    use_connect_dots=True)`` under add/remove, built with :class:`VectorisedGaussianLoss`."""
    if not _INTERNALS:
        return _library(z, q, interval)

    def single(adjacency_type: plm.AdjacencyType):
        loss = VectorisedGaussianLoss(z, sensitivity=1.0, pessimistic_estimate=True, sampling_prob=q,
                                      adjacency_type=adjacency_type)
        return pld_lib._create_pld_pmf_from_monotone_privacy_loss(
            loss, pessimistic_estimate=True, value_discretization_interval=interval, use_connect_dots=True)

    try:
        return pld_lib._pld_for_subsampled_mechanism(single, q)
    except TypeError:  # the internals' signatures differ in this dp-accounting version
        return _library(z, q, interval)


def _library(z: float, q: float, interval: float) -> pld_lib.PrivacyLossDistribution:
    return pld_lib.from_gaussian_mechanism(z, sensitivity=1.0, pessimistic_estimate=True,
                                           value_discretization_interval=interval, sampling_prob=q,
                                           use_connect_dots=True)
