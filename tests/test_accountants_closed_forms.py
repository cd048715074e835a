"""gaussian, pure and tree accountants against closed forms and the libraries."""

import math

import pytest
from dp_accounting import (ComposedDpEvent, GaussianDpEvent, LaplaceDpEvent, NeighboringRelation,
                           PoissonSampledDpEvent, SelfComposedDpEvent, SingleEpochTreeAggregationDpEvent)
from dp_accounting.rdp import RdpAccountant as DpRdp
from scipy.optimize import brentq

from privaudit.accountants import PrivacyClaim, epsilon
from privaudit.accountants.events import LogisticDpEvent, TreeAggregationDpEvent, event_from_dict, event_to_dict
from privaudit.accountants.gaussian import analytic_gaussian_delta, classical_gaussian_epsilon
from privaudit.accountants.tree import (_enumerated_sensitivity_squared, _programmed_sensitivity_squared, restart_tree_depth,
                              tree_sensitivity_squared)


def claim(event, delta=1e-5, relation="add-remove"):
    return PrivacyClaim(event, relation, "example", delta)


@pytest.mark.parametrize("z,delta", [(0.5, 1e-5), (1.0, 1e-5), (3.0, 1e-6), (20.0, 1e-3)])
def test_gaussian_analytic_solves_balle_wang_theorem_8(z, delta):
    eps = epsilon(claim(GaussianDpEvent(z), delta), "gaussian").epsilon
    root = brentq(lambda e: analytic_gaussian_delta(z, e) - delta, 0.0, 200.0, xtol=1e-12)
    assert eps == pytest.approx(root, rel=1e-6, abs=1e-9)
    # composition of Gaussians is the effective Gaussian
    composed = claim(ComposedDpEvent([GaussianDpEvent(z * math.sqrt(2)), GaussianDpEvent(z * math.sqrt(2))]), delta)
    assert epsilon(composed, "gaussian").epsilon == pytest.approx(eps, rel=1e-9)


def test_classical_bound_and_its_validity_range():
    r = epsilon(claim(GaussianDpEvent(5.0)), "gaussian")
    assert r.details["classical"] == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 5, rel=1e-12)
    assert r.details["classical_valid"] and r.details["classical"] > r.epsilon  # classical is loose
    inside = epsilon(claim(GaussianDpEvent(5.0)), "gaussian", method="classical")
    assert inside.epsilon == pytest.approx(classical_gaussian_epsilon(5.0, 1e-5))
    outside = epsilon(claim(GaussianDpEvent(1.0)), "gaussian", method="classical")
    assert outside.epsilon is None and "outside the bound's validity range eps < 1" in outside.reason
    assert not epsilon(claim(GaussianDpEvent(1.0)), "gaussian").details["classical_valid"]
    sampled = epsilon(claim(PoissonSampledDpEvent(0.1, GaussianDpEvent(1.0))), "gaussian")
    assert sampled.epsilon is None and "only unsampled Gaussian" in sampled.reason


def test_pure_laplace_logistic_and_composition():
    assert epsilon(claim(LaplaceDpEvent(0.25), 0.0), "pure").epsilon == pytest.approx(4.0)
    assert epsilon(claim(LogisticDpEvent(0.5), 0.0, "replace-one"), "pure").epsilon == pytest.approx(2.0)  # ALM Thm 4.1
    mixed = ComposedDpEvent([SelfComposedDpEvent(LaplaceDpEvent(2.0), 3), SelfComposedDpEvent(LogisticDpEvent(4.0), 2)])
    assert epsilon(claim(mixed, 0.0), "pure").epsilon == pytest.approx(3 * 0.5 + 2 * 0.25)
    assert "not Gaussian" in epsilon(claim(GaussianDpEvent(1.0)), "pure").reason
    ev = SelfComposedDpEvent(LogisticDpEvent(2.0), 3)
    assert event_from_dict(event_to_dict(ev)) == ev


def test_logistic_log_density_is_one_over_s_lipschitz():
    """ALM Thm. 4.1 numerically: the privacy loss of Logistic(0, s) shifted by Delta never exceeds Delta / s."""
    import numpy as np

    s, shift = 0.7, 1.3
    x = np.linspace(-60, 60, 200_001)
    logpdf = lambda t: -t / s - np.log(s) - 2 * np.log1p(np.exp(-t / s))  # noqa: E731
    loss = logpdf(x) - logpdf(x - shift)
    assert np.max(np.abs(loss)) <= shift / s + 1e-9
    assert np.max(np.abs(loss)) == pytest.approx(shift / s, rel=1e-6)  # approached in the tails: tight


@pytest.mark.parametrize("args", [(20, 3, 2), (33, 4, 3), (64, 3, 10), (37, 6, 3), (16, 4, 0), (300, 2, 100)])
def test_tree_sensitivity_programme_matches_enumeration(args):
    assert _programmed_sensitivity_squared(*args) == _enumerated_sensitivity_squared(*args)


def test_tree_closed_forms_and_dp_ftrl_numbers():
    # one participation in a complete tree of 2^h leaves touches h + 1 nodes
    for h in range(1, 8):
        assert tree_sensitivity_squared(2 ** h, 1, 0) == h + 1
    # every leaf participating: sum over levels of (#nodes) x (leaves per node)^2 = 2^h (2^{h+1} - 1)
    assert tree_sensitivity_squared(16, 16, 0) == 16 * 31
    # restarted trees: our zCDP equals dp-accounting's RDP of SingleEpochTreeAggregation (alpha * depth / 2z^2)
    lib = DpRdp([2.0, 8.0], NeighboringRelation.REPLACE_SPECIAL)
    lib.compose(SingleEpochTreeAggregationDpEvent(3.0, 100))
    r = epsilon(claim(SingleEpochTreeAggregationDpEvent(3.0, 100), 1e-6), "tree")
    assert r.details["rho"] == pytest.approx(restart_tree_depth(100) / 18)
    assert list(lib.rdp) == pytest.approx([2 * r.details["rho"], 8 * r.details["rho"]])
    # DP-FTRL-FedEmb (Table 1): 800 rounds, 11 epochs of 77 rounds, noise 16.64 on sensitivity 2 x clip
    tree = epsilon(claim(TreeAggregationDpEvent(16.64 / 2, 800, 11, 76), 1e-7), "tree")
    assert tree_sensitivity_squared(800, 11, 76) == 177
    assert round(tree.details["rho"], 2) == 1.28 and round(tree.epsilon, 2) == 9.67
    assert epsilon(claim(TreeAggregationDpEvent(16.64 / 2, 800, 11, 76), 1e-7), "rdp").epsilon == \
        pytest.approx(tree.epsilon, rel=1e-3)
    # the whole release is one Gaussian of sensitivity sqrt(177): the exact epsilon is below the zCDP one
    exact = epsilon(claim(TreeAggregationDpEvent(16.64 / 2, 800, 11, 76), 1e-7), "gaussian").epsilon
    assert exact == pytest.approx(epsilon(claim(GaussianDpEvent(8.32 / math.sqrt(177)), 1e-7), "gaussian").epsilon)
    assert exact < tree.epsilon
    assert epsilon(claim(PoissonSampledDpEvent(0.1, GaussianDpEvent(1.0))), "tree").epsilon is None
