"""The vectorised privacy buckets (accountants/pld/pld_buckets.py) against dp-accounting's own: the same PMF, bucket by
bucket, in both directions, and the same epsilon after composition; the PLD accountant's lower bracket uses it."""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from privaudit.accountants.pld.pld_buckets import optimistic_gaussian_pld


def _dense(pmf):
    return pmf.to_dense_pmf() if hasattr(pmf, "to_dense_pmf") else pmf


@pytest.mark.parametrize("z, q, interval, steps", [(1.0, 0.01, 2.5e-4, 200), (0.7, 0.1, 1e-3, 50), (2.0, 1.0, 1e-4, 10),
                                                   (5.0, 0.003, 1e-5, 1000), (0.5, 0.5, 1e-3, 3), (30.0, 0.02, 1e-3, 5)])
def test_equals_dp_accountings_privacy_buckets(z, q, interval, steps):
    library = pld_lib.from_gaussian_mechanism(z, pessimistic_estimate=False, value_discretization_interval=interval,
                                              sampling_prob=q, use_connect_dots=False)
    ours = optimistic_gaussian_pld(z, q, interval)
    for side in ("_pmf_remove", "_pmf_add"):
        a, b = _dense(getattr(library, side)), _dense(getattr(ours, side))
        assert (a._lower_loss, len(a._probs), a._infinity_mass) == (b._lower_loss, len(b._probs), b._infinity_mass)
        np.testing.assert_allclose(b._probs, a._probs, rtol=1e-9, atol=1e-18)
        assert a._pessimistic_estimate is False and b._pessimistic_estimate is False
    expected = library.self_compose(steps).get_epsilon_for_delta(1e-5)
    assert ours.self_compose(steps).get_epsilon_for_delta(1e-5) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_a_pessimistic_build_would_be_caught():
    """The comparison can fail: the pessimistic PLD (buckets rounded up) differs from ours in its epsilon."""
    pessimistic = pld_lib.from_gaussian_mechanism(1.0, pessimistic_estimate=True, value_discretization_interval=1e-3,
                                                  sampling_prob=0.01, use_connect_dots=False)
    ours = optimistic_gaussian_pld(1.0, 0.01, 1e-3)
    assert ours.self_compose(100).get_epsilon_for_delta(1e-5) < pessimistic.self_compose(100).get_epsilon_for_delta(1e-5)


def test_the_pld_accountant_brackets_with_it():
    """The accountant's optimistic end is built by the vectorised buckets and lies below its pessimistic end."""
    from privaudit.accountants.events import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
    from privaudit.accountants.pld.pld import _gaussian_pld, build_pld

    _gaussian_pld.cache_clear()
    event = SelfComposedDpEvent(PoissonSampledDpEvent(0.02, GaussianDpEvent(1.1)), 100)
    low = build_pld(event, "add-remove", pessimistic=False, interval=1e-3).get_epsilon_for_delta(1e-5)
    high = build_pld(event, "add-remove", pessimistic=True, interval=1e-3).get_epsilon_for_delta(1e-5)
    library = pld_lib.from_gaussian_mechanism(1.1, pessimistic_estimate=False, value_discretization_interval=1e-3,
                                              sampling_prob=0.02, use_connect_dots=False)
    assert low == pytest.approx(library.self_compose(100).get_epsilon_for_delta(1e-5), rel=1e-9)
    assert 0 < low <= high <= low * 1.05
