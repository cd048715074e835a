"""The accountant core against Opacus and closed forms."""

import math

import pytest
from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent

from privaudit.accountants import PrivacyClaim, calibrate, epsilon
from privaudit.accountants.events import LogisticDpEvent, event_from_dict, event_to_dict
from privaudit.core.errors import ConfigError


def dpsgd_claim(z, q=0.01, steps=1000, delta=1e-5):
    return PrivacyClaim(SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), steps),
                        "add-remove", "example", delta)


@pytest.mark.parametrize("z,q,steps", [(0.8, 0.02, 500), (1.1, 0.01, 1000), (2.0, 0.1, 200)])
def test_rdp_matches_opacus(z, q, steps):
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    acc.history = [(z, q, steps)]
    ours = epsilon(dpsgd_claim(z, q, steps)).epsilon
    theirs = acc.get_epsilon(1e-5)
    assert ours == pytest.approx(theirs, rel=0.01)


def test_gaussian_rdp_closed_form():
    """One Gaussian step has RDP alpha / (2 sigma^2); the conversion then gives a known epsilon."""
    sigma, delta = 3.0, 1e-5
    claim = PrivacyClaim(GaussianDpEvent(sigma), "add-remove", "example", delta)
    orders = [1.5 + 0.25 * i for i in range(400)]
    expected = min(a / (2 * sigma ** 2) + math.log1p(-1 / a) - (math.log(delta) + math.log(a)) / (a - 1)
                   for a in orders)
    from privaudit.accountants.rdp.rdp import RdpAccountant

    assert RdpAccountant(tuple(orders)).epsilon(claim).epsilon == pytest.approx(expected, rel=1e-9)


def test_calibrate_inverts_epsilon():
    z = calibrate(lambda s: dpsgd_claim(s), 2.0)
    assert epsilon(dpsgd_claim(z)).epsilon == pytest.approx(2.0, rel=1e-4)
    assert epsilon(dpsgd_claim(z * 0.99)).epsilon > 2.0
    with pytest.raises(ConfigError, match="target_epsilon: must be > 0"):
        calibrate(dpsgd_claim, 0.0)


def test_non_private_claim_is_infinite_and_events_serialise():
    r = epsilon(PrivacyClaim.non_private())
    assert r.epsilon == math.inf and r.to_dict()["infinite"]
    ev = SelfComposedDpEvent(LogisticDpEvent(2.0), 3)
    assert event_from_dict(event_to_dict(ev)) == ev
    with pytest.raises(ConfigError, match="claim.relation: unknown value 'swap'"):
        PrivacyClaim(GaussianDpEvent(1.0), "swap", "example", 1e-5)
