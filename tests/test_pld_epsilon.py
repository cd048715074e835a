"""accountants/pld/pld_epsilon.py against dp-accounting's own epsilon-for-delta scan, on the PLDs the audits compose."""

import math

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from privaudit.accountants.pld.pld_epsilon import epsilon_for_delta


def _plds():
    for sigma, q, steps, interval, pessimistic in [(1.0, 1.0, 1, 1e-3, True), (0.8, 0.07, 210, 2.4e-4, False),
                                                   (2.0, 0.01, 2000, 1e-4, True), (0.5, 0.3, 10, 1e-3, False),
                                                   (5.0, 0.5, 30, 1e-3, True), (0.3, 1.0, 4, 1e-2, False)]:
        base = pld_lib.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=interval,
                                               pessimistic_estimate=pessimistic)
        yield (sigma, q, steps), base.self_compose(steps) if steps > 1 else base


@pytest.mark.parametrize("delta", [1e-10, 1e-5, 1e-2, 0.5])
def test_the_vectorised_scan_is_the_librarys(delta):
    for key, pld in _plds():
        ours, theirs = epsilon_for_delta(pld, delta), pld.get_epsilon_for_delta(delta)
        assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-15), (key, delta, ours, theirs)


def test_its_edge_cases_are_the_librarys():
    """Infinite mass above delta: inf; a delta above every divergence: 0; both as the library says."""
    pld = pld_lib.from_gaussian_mechanism(0.5, value_discretization_interval=1e-2)
    assert epsilon_for_delta(pld, 0.99) == pld.get_epsilon_for_delta(0.99) == 0
    truncated = pld_lib.from_gaussian_mechanism(0.05, value_discretization_interval=1e-2, log_mass_truncation_bound=-5)
    theirs = truncated.get_epsilon_for_delta(1e-12)
    assert epsilon_for_delta(truncated, 1e-12) == theirs and math.isinf(theirs)


def test_losses_beyond_the_float_range_of_the_ratio_are_the_librarys_without_a_warning():
    """Large losses whose L_k is denormal: the quotient (M_k - delta) / L_k overflows (NumPy would warn; privaudit
    claims printed it) where the scan does not stop; the epsilon is still the library's, and nothing is printed."""
    import warnings

    pld = pld_lib.from_gaussian_mechanism(0.03, value_discretization_interval=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = epsilon_for_delta(pld, 1e-5)
    assert ours == pytest.approx(pld.get_epsilon_for_delta(1e-5), rel=1e-12) and 600 < ours < 800


def test_a_planted_off_by_one_scan_is_caught(monkeypatch):
    """The test's power: a scan that stops one loss too late differs from the library's on a composed PLD."""
    import privaudit.accountants.pld.pld_epsilon as module

    first = module._first
    monkeypatch.setattr(module, "_first", lambda mask: first(mask) + 1 if mask.any() else mask.size)
    _, pld = list(_plds())[1]
    assert epsilon_for_delta(pld, 1e-5) != pytest.approx(pld.get_epsilon_for_delta(1e-5), rel=1e-12)
