"""Privacy-loss-distribution accountant on dp-accounting's PLD machinery, reported as a bracket.

Each mechanism of the claim is turned into the privacy loss distribution of its *dominating pair* (Zhu,
Dong & Wang 2022, "Optimal accounting of differential privacy via characteristic function", AISTATS, Def. 7:
a pair (P, Q) with H_a(M(D) || M(D')) <= H_a(P || Q) for every neighbouring D, D' and every a >= 0, the
hockey-stick divergence H_a(P || Q) = sup_S P(S) - a Q(S) being delta(log a)); compositions compose the
PLDs (Zhu et al. Thm. 10), and epsilon(delta) is read off the composed PLD. dp-accounting builds every
PLD twice: with ``pessimistic_estimate=True`` (connect-the-dots, Doroshenko et al. 2022: its epsilon is an
upper bound, the sound value we report) and ``False`` (privacy buckets rounded down, Koskela et al. 2020: its
epsilon is a lower bound on the pair's epsilon), so each epsilon comes with the bracket [lower, upper] that
the discretisation leaves open.

Noise multipliers are std / sensitivity under the claim's own relation (see :mod:`privaudit.accountants.events`).
The dominating pair of each event, and why it dominates, is stated where it is built: unsampled Gaussian
or Laplace noise (:func:`_base`), Poisson sampling under add/remove (:func:`_poisson_pld`), sampling without
replacement under replace-one (:func:`_without_replacement_pld`) and DP-FTRL tree aggregation
(:func:`_tree_pld`).

Not applicable (with the reason): Poisson sampling under replace-one and sampling without replacement under
add/remove (different noise conventions from our claims'), subsampled tree aggregation, and the logistic
and snapping mechanisms (use ``pure``).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from dp_accounting.pld import privacy_loss_distribution as pld_lib

from privaudit.accountants.base import Accountant, NotApplicable, refuse
from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.pld.pld_buckets import optimistic_gaussian_pld
from privaudit.accountants.pld.pld_gaussian import pessimistic_gaussian_pld
from privaudit.accountants.pld.pld_epsilon import epsilon_for_delta
from privaudit.accountants.events import (ComposedDpEvent, DiscreteGaussianDpEvent, DpEvent, GaussianDpEvent, LaplaceDpEvent, LogisticDpEvent,
                                NoOpDpEvent, PoissonSampledDpEvent, SampledWithoutReplacementDpEvent,
                                SelfComposedDpEvent, SingleEpochTreeAggregationDpEvent, SnappingDpEvent,
                                TreeAggregationDpEvent, describe, effective_gaussian_noise)
from privaudit.accountants.tree import zcdp_rho
from privaudit.core.errors import check_positive

PLD = pld_lib.PrivacyLossDistribution


class _NoNoise(Exception):
    """A Gaussian with noise multiplier 0: epsilon is infinite."""


_NO_PLD = {
    LogisticDpEvent: "pld: dp-accounting has no privacy loss distribution for the logistic mechanism; use 'pure'",
    SnappingDpEvent: "pld: the snapping mechanism's grid outputs have no Laplace privacy loss distribution; "
                     "use 'pure'",
    DiscreteGaussianDpEvent: "pld: the discrete Gaussian's privacy loss distribution is not the continuous "
                             "Gaussian's; use 'rdp' (its zCDP, CKS 2020 Thm. 14)",
}


def _base(event: DpEvent, q: float, pessimistic: bool, interval: float) -> PLD:
    """PLD of Gaussian or Laplace noise (or a composition of Gaussians on one input) amplified at rate q.

    Unsampled (q = 1), either relation, with G = N(1, z^2), G0 = N(0, z^2) (Laplace likewise, scale b):
    the pair (G, G0), symmetric, is the mechanism's own worst case. Several Gaussians released on one
    input are one Gaussian with z = (sum z_k^-2)^-1/2 (McMahan et al. 2018).
    """
    if isinstance(event, LaplaceDpEvent):
        return pld_lib.from_laplace_mechanism(float(event.noise_multiplier), sensitivity=1.0,
                                              pessimistic_estimate=pessimistic,
                                              value_discretization_interval=interval, sampling_prob=q,
                                              use_connect_dots=pessimistic)
    z = effective_gaussian_noise(event)
    if z is None:
        raise NotApplicable(f"pld: sampling of {describe(event)} (only Gaussian or Laplace noise)")
    if z == 0:
        raise _NoNoise
    return _gaussian_pld(float(z), float(q), bool(pessimistic), float(interval))


@functools.lru_cache(maxsize=64)
def _gaussian_pld(z: float, q: float, pessimistic: bool, interval: float) -> PLD:
    """dp-accounting's PLD of the Gaussian mechanism at noise z sampled at rate q, cached: calibration and the
    bounds ask for the same one many times in a run (the objects are immutable: composing makes new ones). The
    optimistic one is dp-accounting's privacy buckets vectorised (:mod:`privaudit.accountants.pld.pld_buckets`, equal to
    the library's), seconds faster at the fine intervals the white-box bounds use; the pessimistic one the library's
    connect-the-dots with its inverse privacy loss vectorised (:mod:`privaudit.accountants.pld.pld_gaussian`), about ten
    times faster."""
    if not pessimistic:
        return optimistic_gaussian_pld(z, q, interval)
    return pessimistic_gaussian_pld(z, q, interval)


def _poisson_pld(event: PoissonSampledDpEvent, relation: str, pessimistic: bool, interval: float) -> PLD:
    """Poisson sampling with rate q, add/remove: (q G + (1-q) G0, G0) for removal and (G0, q G + (1-q) G0)
    for addition (Zhu et al. Thm. 11; dp-accounting's ``sampling_prob`` PLD, which keeps both directions)."""
    if relation != "add-remove":
        raise NotApplicable("pld: Poisson sampling is accounted under add/remove only (its replace-one "
                            "dominating pair is not the one our noise convention describes)")
    return _base(event.event, float(event.sampling_probability), pessimistic, interval)


def _without_replacement_pld(event: SampledWithoutReplacementDpEvent, relation: str, pessimistic: bool,
                             interval: float) -> PLD:
    """A fixed-size batch of m out of n sampled without replacement, replace-one (DPCL, DP-FedEmb).

    With q = m / n, the pair (q G + (1-q) G0, G0) dominates every ordered neighbouring pair (Zhu et al.
    Thm. 11, substitution relation; Balle, Barthe & Gaboardi 2018, Thm. 10, via the coupling in which D and
    D' share every sampled index but the replaced one). Why it dominates both directions: D ~ D' differ in
    one slot i, x_i vs x'_i. Couple the two samplings on the index set; i is in the batch with probability
    q, and conditionally on its absence the outputs coincide (R), so M(S(D)) = q A + (1-q) R and
    M(S(D')) = q A' + (1-q) R where A, A' differ by replacing one record, dominated by (G, G0) because the
    replace-one sensitivity is 1 in noise units. Advanced joint convexity then bounds H_{1+q(a-1)} of the
    mixtures by q H_a(G || G0), which is exactly H_{1+q(a-1)}(q G + (1-q) G0 || G0); swapping D and D' gives
    the same bound for the reverse order. The reverse pair (G0, q G + (1-q) G0) is *achieved* (x_i with
    contribution 0, x'_i with the full sensitivity), so we evaluate both orders and take the larger epsilon:
    the result is both sound and attained. Numerically it is dp-accounting's Poisson add/remove PLD at
    q = m / n (``tests/test_accountants_pld_wor.py`` checks one step against direct integration).
    """
    if relation != "replace-one":
        raise NotApplicable("pld: sampling without replacement is accounted under replace-one only (a "
                            "fixed-size batch has no add/remove neighbour of the same size)")
    q = event.sample_size / event.source_dataset_size
    return _base(event.event, float(q), pessimistic, interval)


def _tree_pld(event: TreeAggregationDpEvent | SingleEpochTreeAggregationDpEvent, pessimistic: bool,
              interval: float) -> PLD | None:
    """DP-FTRL tree aggregation (restarted or not): the whole release is one Gaussian mechanism on the vector
    of tree nodes, with squared L2 sensitivity 2 rho z^2 where rho is the zCDP of
    :func:`privaudit.accountants.tree.zcdp_rho` (a Gaussian mechanism's rho is Delta^2 / (2 sigma^2));
    adaptively chosen leaves do not change this (Denisov et al. 2022, "Improved differential privacy for SGD
    via optimal private linear operators on adaptive streams", Thm. 2.1), so (N(sqrt(2 rho), 1), N(0, 1))
    dominates. rho is the worst case over the participation patterns the schedule allows."""
    rho = zcdp_rho(event)
    if math.isinf(rho):
        raise _NoNoise
    return None if rho == 0 else _base(GaussianDpEvent(1.0 / math.sqrt(2.0 * rho)), 1.0, pessimistic, interval)


def _composed_pld(event: ComposedDpEvent, relation: str, pessimistic: bool, interval: float) -> PLD | None:
    """The composition of the children's PLDs (Zhu et al. Thm. 10); Gaussians released on one input as the one
    Gaussian they are together (:func:`~privaudit.accountants.events.effective_gaussian_noise`)."""
    z = effective_gaussian_noise(event)
    if z is not None:  # Gaussians on one input: one Gaussian
        return _base(GaussianDpEvent(z), 1.0, pessimistic, interval)
    out = None
    for child in event.events:
        pld = build_pld(child, relation, pessimistic=pessimistic, interval=interval)
        out = pld if out is None else (out if pld is None else out.compose(pld))
    return out


def build_pld(event: DpEvent, relation: str, *, pessimistic: bool = True, interval: float = 1e-4) -> PLD | None:
    """The composed PLD of ``event`` under ``relation`` (None for an event that releases nothing).

    ``pessimistic`` selects dp-accounting's upper (True) or lower (False) discretisation; ``interval`` is the
    privacy-loss discretisation step. Raises :class:`NotApplicable` with the reason for unsupported events.
    """
    if isinstance(event, NoOpDpEvent):
        return None
    if isinstance(event, SelfComposedDpEvent):
        inner = build_pld(event.event, relation, pessimistic=pessimistic, interval=interval)
        return None if inner is None or event.count == 0 else inner.self_compose(int(event.count))
    if isinstance(event, ComposedDpEvent):
        return _composed_pld(event, relation, pessimistic, interval)
    if isinstance(event, (GaussianDpEvent, LaplaceDpEvent)):
        return _base(event, 1.0, pessimistic, interval)
    if isinstance(event, (TreeAggregationDpEvent, SingleEpochTreeAggregationDpEvent)):
        return _tree_pld(event, pessimistic, interval)
    if isinstance(event, PoissonSampledDpEvent):
        return _poisson_pld(event, relation, pessimistic, interval)
    if isinstance(event, SampledWithoutReplacementDpEvent):
        return _without_replacement_pld(event, relation, pessimistic, interval)
    refuse(event, _NO_PLD)
    raise NotApplicable(f"pld: no dominating pair for {describe(event)}")


class PldAccountant(Accountant):
    """Epsilon from the composed dominating-pair PLD; ``details['epsilon_lower']`` is the optimistic bracket end."""

    name = "pld"

    def __init__(self, value_discretization_interval: float = 1e-4, bracket: bool = True):
        check_positive("value_discretization_interval", value_discretization_interval)
        self.value_discretization_interval = value_discretization_interval
        self.bracket = bracket

    def upper_only(self) -> "PldAccountant":
        return PldAccountant(self.value_discretization_interval, bracket=False)

    def _epsilon(self, claim: PrivacyClaim) -> tuple[float, dict[str, Any] | None]:
        details: dict[str, Any] = {"value_discretization_interval": self.value_discretization_interval}
        try:
            upper = self._at(claim, pessimistic=True)
        except _NoNoise:
            return math.inf, None
        if self.bracket:
            details["epsilon_lower"] = min(self._at(claim, pessimistic=False), upper)
            details["epsilon_upper"] = upper
        return upper, details

    def _at(self, claim: PrivacyClaim, *, pessimistic: bool) -> float:
        key = (claim.event, claim.relation, float(claim.delta), bool(pessimistic),
               float(self.value_discretization_interval))
        try:
            hash(key)
        except TypeError:  # an event that holds a list (a composition of unlike events): computed each time
            return _epsilon_at(*key)
        return _epsilon_at_cached(*key)


def _epsilon_at(event: DpEvent, relation: str, delta: float, pessimistic: bool, interval: float) -> float:
    """Epsilon at ``delta`` of ``event``'s composed PLD (0 for an event that releases nothing)."""
    pld = build_pld(event, relation, pessimistic=pessimistic, interval=interval)
    if pld is None:
        return 0.0
    return max(0.0, float(epsilon_for_delta(pld, delta)))


#: The same claim's epsilon, cached: a calibration's search and every cell, seed and check of a run that asks about
#: the same claim again (events are frozen, so equal events are the same mechanism; a composition's list is not
#: hashable and is computed each time).
_epsilon_at_cached = functools.lru_cache(maxsize=512)(_epsilon_at)
