"""The rdp accountant: against Opacus and dp-accounting over grids, closed forms, the WOR bounds, support."""

import math

import numpy as np
import pytest
from dp_accounting import (ComposedDpEvent, GaussianDpEvent, LaplaceDpEvent, NeighboringRelation,
                           PoissonSampledDpEvent, SampledWithoutReplacementDpEvent, SelfComposedDpEvent)
from dp_accounting.rdp import RdpAccountant as DpRdp

from privaudit.accountants import PrivacyClaim, epsilon
from privaudit.accountants.events import LogisticDpEvent
from privaudit.accountants.rdp.rdp import RdpAccountant
from privaudit.accountants.rdp.wor_rdp import wor_gaussian_rdp_thm9

OPACUS_ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))


def poisson(z, q, steps, delta=1e-5):
    return PrivacyClaim(SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), steps),
                        "add-remove", "example", delta)


@pytest.mark.filterwarnings("ignore:Optimal order is the")
@pytest.mark.parametrize("q", [0.001, 0.01, 0.1, 0.5])
@pytest.mark.parametrize("z", [0.6, 1.0, 2.5])
@pytest.mark.parametrize("steps,delta", [(10, 1e-3), (1000, 1e-5), (50_000, 1e-8)])
def test_poisson_matches_opacus_rdp(q, z, steps, delta):
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    acc.history = [(z, q, steps)]
    theirs = acc.get_epsilon(delta)
    ours = RdpAccountant(orders=OPACUS_ORDERS).epsilon(poisson(z, q, steps, delta)).epsilon
    assert ours == pytest.approx(theirs, rel=0.01)
    # with dp-accounting's own (default) orders we are never looser than 1% either
    assert epsilon(poisson(z, q, steps, delta)).epsilon <= theirs * 1.01


@pytest.mark.parametrize("n,m,z,steps,delta", [
    (50_000, 128, 0.5, 20_000, 1e-6), (50_000, 128, 1.0, 100, 1e-5), (1000, 100, 3.0, 20_000, 1e-6),
    (1000, 100, 0.5, 100, 1e-5), (600, 300, 1.0, 20_000, 1e-6), (600, 300, 3.0, 100, 1e-5),
])
def test_without_replacement_matches_dp_accounting(n, m, z, steps, delta):
    event = SelfComposedDpEvent(SampledWithoutReplacementDpEvent(n, m, GaussianDpEvent(z)), steps)
    lib = DpRdp(neighboring_relation=NeighboringRelation.REPLACE_ONE)
    lib.compose(event)
    ours = epsilon(PrivacyClaim(event, "replace-one", "example", delta)).epsilon
    assert ours == pytest.approx(lib.get_epsilon(delta), rel=0.01)


def test_gaussian_and_laplace_closed_forms():
    orders = (1.5, 2.0, 4.0, 16.0)
    for z in (0.5, 3.0):
        curve = RdpAccountant(orders=orders).rdp_curve(PrivacyClaim(GaussianDpEvent(z), "replace-one", "user", 1e-5))
        assert curve == pytest.approx([a / (2 * z * z) for a in orders], rel=1e-12)  # Mironov 2017, Cor. 3
    b = 2.0  # Laplace, Mironov 2017 Prop. 6: 1/(a-1) log(a/(2a-1) e^{(a-1)/b} + (a-1)/(2a-1) e^{-a/b})
    curve = RdpAccountant(orders=orders).rdp_curve(PrivacyClaim(LaplaceDpEvent(b), "add-remove", "example", 1e-5))
    expected = [math.log(a / (2 * a - 1) * math.exp((a - 1) / b) + (a - 1) / (2 * a - 1) * math.exp(-a / b)) / (a - 1)
                for a in orders]
    assert curve == pytest.approx(expected, rel=1e-9)


def test_composition_adds_rdp_and_same_batch_gaussians_collapse():
    acc = RdpAccountant()
    one = acc.rdp_curve(poisson(1.0, 0.01, 10))
    step = PoissonSampledDpEvent(0.01, GaussianDpEvent(1.0))
    composed = PrivacyClaim(ComposedDpEvent([SelfComposedDpEvent(step, 10), SelfComposedDpEvent(step, 5)]),
                            "add-remove", "example", 1e-5)
    assert acc.rdp_curve(composed) == pytest.approx(1.5 * one, rel=1e-12)
    shared = PrivacyClaim(PoissonSampledDpEvent(0.01, ComposedDpEvent([GaussianDpEvent(1.0), GaussianDpEvent(1.0)])),
                          "add-remove", "example", 1e-5)
    assert acc.rdp_curve(shared) == pytest.approx(acc.rdp_curve(poisson(1 / math.sqrt(2), 0.01, 1)), rel=1e-12)


def _thm9_by_hand(q, z, alpha):
    """WBK19 Thm. 9 / DPCL Eq. (11) written out term by term with exact binomials."""
    e = lambda j: j / (2 * z * z)  # noqa: E731
    total = 1 + q ** 2 * math.comb(alpha, 2) * min(4 * (math.exp(e(2)) - 1), 2 * math.exp(e(2)))
    total += sum(q ** j * math.comb(alpha, j) * 2 * math.exp((j - 1) * e(j)) for j in range(3, alpha + 1))
    return math.log(total) / (alpha - 1)


@pytest.mark.parametrize("q,z", [(0.00256, 0.4), (0.01, 1.0), (0.1, 2.0), (0.3, 0.8)])
def test_wor_thm9_closed_form_and_against_thm27(q, z):
    ints = [2, 3, 4, 7, 12]
    assert wor_gaussian_rdp_thm9(q, z, ints) == pytest.approx([_thm9_by_hand(q, z, a) for a in ints], rel=1e-10)
    orders = (1.5, 2.0, 2.5, 3.0, 6.0, 20.0, 64.0)
    thm9 = wor_gaussian_rdp_thm9(q, z, orders)
    from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_sample_wor_gaussian
    thm27 = _compute_rdp_sample_wor_gaussian(q, z, orders)
    assert np.all(thm27 <= thm9 * (1 + 1e-9))  # Thm. 27 strengthens Thm. 9
    assert thm9[1] == pytest.approx(thm27[1], rel=1e-9)  # identical at alpha = 2
    claim = PrivacyClaim(SampledWithoutReplacementDpEvent(1000, max(1, round(q * 1000)), GaussianDpEvent(z)),
                         "replace-one", "example", 1e-5)
    assert RdpAccountant(wor_bound="thm9").epsilon(claim).details["wor_bound"] == "thm9"


@pytest.mark.parametrize("claim,reason", [
    (PrivacyClaim(PoissonSampledDpEvent(0.1, GaussianDpEvent(1.0)), "replace-one", "example", 1e-5),
     "neighboring_relation must be `ADD_OR_REMOVE_ONE`"),
    (PrivacyClaim(SampledWithoutReplacementDpEvent(100, 10, GaussianDpEvent(1.0)), "add-remove", "example", 1e-5),
     "neighboring_relation must be `REPLACE_ONE`"),
    (PrivacyClaim(LogisticDpEvent(1.0), "add-remove", "example", 1e-5), "no RDP curve for the logistic mechanism"),
])
def test_not_applicable_says_why(claim, reason):
    r = epsilon(claim, "rdp")
    assert r.epsilon is None and not r.applicable and reason in r.reason


def test_conversion_option_orders_the_results():
    claim = poisson(1.0, 0.01, 1000)
    eps = {c: epsilon(claim, "rdp", conversion=c).epsilon for c in ("mironov", "balle2020", "cks2020")}
    assert eps["cks2020"] == pytest.approx(eps["balle2020"], rel=1e-12)
    assert eps["mironov"] > eps["balle2020"] * 1.05


@pytest.mark.parametrize("q,z", [(0.01, 0.6), (0.5, 0.6), (0.1, 1.5), (0.001, 3.0)])
def test_poisson_rdp_matches_numerical_integration(q, z):
    """A_alpha = E_{x ~ N(0, z^2)} [((1-q) + q exp((2x - 1) / (2 z^2)))^alpha] (Mironov, Talwar & Zhang 2019)."""
    from scipy.integrate import quad
    from scipy.stats import norm

    orders = (1.1, 1.5, 2.0, 2.5, 4.3, 8.0)
    curve = RdpAccountant(orders=orders).rdp_curve(poisson(z, q, 1))
    for alpha, rho in zip(orders, curve):
        def integrand(x, alpha=alpha):
            return norm.pdf(x, 0, z) * ((1 - q) + q * math.exp((2 * x - 1) / (2 * z * z))) ** alpha

        value, _ = quad(integrand, -12 * z - 10, 12 * z + 10 + alpha / z, limit=500, epsabs=0, epsrel=1e-12)
        assert rho == pytest.approx(math.log(value) / (alpha - 1), rel=1e-6)
