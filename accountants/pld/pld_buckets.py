"""The optimistic (lower) PLD of the Poisson-sampled Gaussian mechanism, dp-accounting's privacy buckets vectorised.

Why. dp-accounting builds the optimistic PLD (``pessimistic_estimate=False``: its epsilon is a lower bound on the
mechanism's; connect-the-dots, its fast path, is pessimistic only) with the privacy-buckets algorithm (Koskela,
Jalko & Honkela 2020; dp-accounting's ``_create_pld_pmf_from_monotone_privacy_loss``): for every multiple k of
the discretisation interval h between the privacy losses at the two truncation points, the point x_k where the
loss crosses k h (the inverse privacy loss), one scalar Python call per point. At the intervals the white-box
bounds need (0.01 / T for T steps) that is 10^5 to 10^6 calls, seconds per PLD, and a training audit builds
several.

What. The same algorithm with the inverse privacy loss evaluated on all k at once. For the Gaussian of std z
(sensitivity 1) sampled at rate q (dp-accounting's ``GaussianPrivacyLoss``):

* remove: loss l(x) = log(1 - q + q e^{(-1/2 - x) / z^2}); its inverse at l is x = -1/2 - w z^2 with
  w = log(e^l / q + 1 - 1/q) (the unsampled loss whose sampled loss is l);
* add: loss l(x) = -log(1 - q + q e^{(x - 1/2) / z^2}); its inverse is x = 1/2 - w z^2 with
  w = -log(e^{-l} / q + 1 - 1/q);

mass between consecutive points goes to the bucket k h (rounded down: optimistic), the tails as dp-accounting's
``privacy_loss_tail`` gives them, and the truncation points, the loss at them and the noise's CDF are the
library's own. The result equals dp-accounting's PLD but for float rounding in the bucket edges
(``tests/test_pld_buckets.py`` compares every bucket's mass and the epsilon at several (z, q, h)).
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss

#: dp-accounting keeps PMFs up to this many buckets sparse (``pld_pmf._MAX_PMF_SPARSE_SIZE``).
_SPARSE_SIZE = getattr(pld_pmf, "_MAX_PMF_SPARSE_SIZE", 1000)


def _unsampled_loss(losses: np.ndarray, q: float, remove: bool) -> np.ndarray:
    """w(l): the unsampled privacy loss whose q-sampled loss is l, log(e^{+-l} / q + 1 - 1/q) (sign by direction),
    as dp-accounting's ``log_a_times_exp_b_plus_c`` computes it (a log-difference); l = 0 maps to 0."""
    b = losses if remove else -losses
    d = b + np.log(1.0 / q)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = d + np.log1p(-np.exp(np.log(1.0 / q - 1.0) - d))
    w = np.where(b == 0, 0.0, w)
    return w if remove else -w


def _inverse_loss(losses: np.ndarray, z: float, q: float, remove: bool) -> np.ndarray:
    """The largest x whose privacy loss is at least each of ``losses`` (dp-accounting's ``inverse_privacy_loss``
    of the q-sampled Gaussian of std z, sensitivity 1), at the edge of the loss's range its limit (+-inf)."""
    w = _unsampled_loss(losses, q, remove) if q < 1.0 else losses
    x = -0.5 - w * z ** 2 + (0.0 if remove else 1.0)
    if q < 1.0:
        edge = math.log(1.0 - q) if remove else -math.log(1.0 - q)
        at_edge = np.isclose(losses, edge, rtol=1e-9, atol=0.0)
        x = np.where(at_edge, math.inf if remove else -math.inf, x)
    return x


def _bucket_points(loss: GaussianPrivacyLoss, z: float, q: float, remove: bool, interval: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(xs, ks): the points x_0 = lower truncation < x_1 < ... <= upper truncation where the loss crosses the
    bucket edges k h, and each interval's bucket k (dp-accounting's loop, all at once)."""
    tail = loss.privacy_loss_tail()
    lower_x, upper_x = tail.lower_x_truncation, tail.upper_x_truncation
    first = math.floor(loss.privacy_loss(lower_x) / interval)
    upper_loss = loss.privacy_loss(upper_x)
    last = math.floor(upper_loss / interval)  # the largest k with k h <= the loss at the upper truncation
    while interval * last > upper_loss:
        last -= 1
    while interval * (last + 1) <= upper_loss:
        last += 1
    ks = np.arange(first, last, -1, dtype=np.int64)  # the ks with k h above the upper loss: an inner point each
    inner = _inverse_loss(interval * ks.astype(float), z, q, remove)
    stop = np.flatnonzero(inner >= upper_x)
    if stop.size:  # the loop ends at the first point that reaches the upper truncation
        return np.concatenate(([lower_x], inner[:stop[0] + 1])), ks[:stop[0] + 1]
    return np.concatenate(([lower_x], inner, [upper_x])), np.append(ks, last)


def optimistic_gaussian_pmf(z: float, q: float, remove: bool, interval: float,
                            log_mass_truncation_bound: float = -50.0) -> pld_pmf.PLDPmf:
    """The optimistic privacy-buckets PMF of the q-sampled Gaussian of std z (sensitivity 1), one direction."""
    adjacency = AdjacencyType.REMOVE if remove else AdjacencyType.ADD
    loss = GaussianPrivacyLoss(z, sensitivity=1.0, pessimistic_estimate=False,
                               log_mass_truncation_bound=log_mass_truncation_bound, sampling_prob=q,
                               adjacency_type=adjacency)
    xs, ks = _bucket_points(loss, z, q, remove, interval)
    cdf = np.asarray(loss.mu_upper_cdf(xs), dtype=float)
    tail = loss.privacy_loss_tail().tail_probability_mass_function
    tail_ks = np.array([math.floor(v / interval) for v in tail if v != math.inf], dtype=np.int64)
    tail_p = np.array([p for v, p in tail.items() if v != math.inf], dtype=float)
    keys, masses = np.concatenate((ks, tail_ks)), np.concatenate((cdf[1:] - cdf[:-1], tail_p))
    low = int(keys.min())
    probs = np.zeros(int(keys.max()) - low + 1)
    np.add.at(probs, keys - low, masses)
    infinity = float(tail.get(math.inf, 0.0))
    touched = np.unique(keys)  # the buckets dp-accounting's dictionary holds (some with mass 0)
    if len(touched) <= _SPARSE_SIZE:
        return pld_pmf.create_pmf({int(k): float(probs[k - low]) for k in touched}, interval, infinity, False)
    return pld_pmf.DensePLDPmf(interval, low, probs, infinity, False)


def optimistic_gaussian_pld(z: float, q: float, interval: float) -> pld_lib.PrivacyLossDistribution:
    """dp-accounting's ``from_gaussian_mechanism(z, sampling_prob=q, pessimistic_estimate=False,
    value_discretization_interval=interval)``, built vectorised: both directions for q < 1, one (symmetric) at 1."""
    remove = optimistic_gaussian_pmf(z, q, True, interval)
    if q == 1.0:
        return pld_lib.PrivacyLossDistribution(remove)
    return pld_lib.PrivacyLossDistribution(remove, optimistic_gaussian_pmf(z, q, False, interval))
