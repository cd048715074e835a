"""pld (dp-accounting) and prv (Opacus): agreement with the libraries, with each other, and declared support."""

import math

import dp_accounting
import pytest
from dp_accounting import (ComposedDpEvent, GaussianDpEvent, LaplaceDpEvent, PoissonSampledDpEvent,
                           SampledWithoutReplacementDpEvent, SelfComposedDpEvent)
from dp_accounting.pld import PLDAccountant

from privaudit.accountants import PrivacyClaim, epsilon
from privaudit.accountants.events import LogisticDpEvent, TreeAggregationDpEvent
from privaudit.accountants.gaussian import analytic_gaussian_epsilon


def claim(event, relation="add-remove", delta=1e-5):
    return PrivacyClaim(event, relation, "example", delta)


def dpsgd(z, q, steps):
    return SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), steps)


def test_pld_and_prv_are_their_libraries():
    from opacus.accountants import PRVAccountant

    event = dpsgd(1.1, 0.01, 500)
    lib = PLDAccountant(value_discretization_interval=1e-4)
    lib.compose(event)
    # Same PLD up to rounding: equal to 1e-12 with dp-accounting 0.6, 2e-12 apart with 0.4.4 (the floor), whose
    # accountant composes the same PLD along another path.
    assert epsilon(claim(event), "pld").epsilon == pytest.approx(lib.get_epsilon(1e-5), rel=1e-10)
    opacus = PRVAccountant()
    opacus.history = [(1.1, 0.01, 500)]
    assert epsilon(claim(event), "prv").epsilon == pytest.approx(opacus.get_epsilon(1e-5), rel=1e-12)


@pytest.mark.parametrize("q,z,steps,delta", [
    (0.002, 0.8, 50, 1e-4), (0.002, 2.0, 2000, 1e-6), (0.02, 0.8, 2000, 1e-6), (0.02, 2.0, 50, 1e-4),
    (0.02, 1.2, 1000, 1e-5), (0.2, 0.8, 50, 1e-4), (0.2, 2.0, 400, 1e-6), (0.001, 1.0, 20_000, 1e-7),
])
def test_pld_and_prv_agree_and_are_tighter_than_rdp(q, z, steps, delta):
    event = dpsgd(z, q, steps)
    pld = epsilon(claim(event, delta=delta), "pld").epsilon
    prv = epsilon(claim(event, delta=delta), "prv").epsilon
    # Opacus' eps_error (0.01 by default) is absolute: the PRV upper bound is within it of the truth
    assert abs(prv - pld) <= max(0.01 * pld, 0.011)
    assert pld <= epsilon(claim(event, delta=delta), "rdp").epsilon * 1.001


def test_same_batch_gaussians_are_one_effective_gaussian_for_pld_and_prv():
    shared = SelfComposedDpEvent(PoissonSampledDpEvent(0.05, ComposedDpEvent([GaussianDpEvent(1.0),
                                                                               GaussianDpEvent(2.0)])), 100)
    z_eff = (1.0 ** -2 + 2.0 ** -2) ** -0.5
    shared_eps = {name: epsilon(claim(shared), name).epsilon for name in ("pld", "prv")}
    for name in ("pld", "prv"):
        effective = epsilon(claim(dpsgd(z_eff, 0.05, 100)), name).epsilon
        assert shared_eps[name] == pytest.approx(effective, rel=1e-9)
    # separately sampled mechanisms are a heterogeneous composition, smaller here than the shared batch
    separate = SelfComposedDpEvent(ComposedDpEvent([PoissonSampledDpEvent(0.05, GaussianDpEvent(1.0)),
                                                    PoissonSampledDpEvent(0.05, GaussianDpEvent(2.0))]), 100)
    pld_sep, prv_sep = epsilon(claim(separate), "pld").epsilon, epsilon(claim(separate), "prv").epsilon
    assert prv_sep == pytest.approx(pld_sep, rel=0.01)
    assert pld_sep < shared_eps["pld"]


@pytest.mark.parametrize("relation", ["add-remove", "replace-one"])
def test_unsampled_gaussian_is_exact_under_both_relations(relation):
    for z in (0.7, 2.0, 10.0):
        exact = analytic_gaussian_epsilon(z, 1e-6)
        c = claim(GaussianDpEvent(z), relation, 1e-6)
        assert epsilon(c, "gaussian").epsilon == pytest.approx(exact, rel=1e-9)
        assert epsilon(c, "pld").epsilon == pytest.approx(exact, rel=0.01)
        assert epsilon(c, "prv", eps_error=1e-3).epsilon == pytest.approx(exact, rel=0.01)


def test_laplace_pld_and_poisson_laplace():
    # one Laplace: the PLD's epsilon at tiny delta approaches the pure 1/b
    assert epsilon(claim(LaplaceDpEvent(0.5), delta=1e-12), "pld").epsilon == pytest.approx(2.0, abs=2e-3)
    sampled = claim(SelfComposedDpEvent(PoissonSampledDpEvent(0.1, LaplaceDpEvent(1.0)), 10))
    lib = PLDAccountant(value_discretization_interval=1e-4)
    lib.compose(sampled.event)
    assert epsilon(sampled, "pld").epsilon == pytest.approx(lib.get_epsilon(1e-5), rel=1e-9)
    assert epsilon(sampled, "prv").epsilon is None


@pytest.mark.parametrize("event,relation,accountant,reason", [
    (SelfComposedDpEvent(SampledWithoutReplacementDpEvent(1000, 10, GaussianDpEvent(1.0)), 10), "add-remove", "pld",
     "sampling without replacement is accounted under replace-one only"),
    (SelfComposedDpEvent(SampledWithoutReplacementDpEvent(1000, 10, GaussianDpEvent(1.0)), 10), "replace-one", "prv",
     "only supports Poisson-subsampled Gaussian"),
    (PoissonSampledDpEvent(0.1, GaussianDpEvent(1.0)), "replace-one", "pld", "add/remove only"),
    (PoissonSampledDpEvent(0.1, GaussianDpEvent(1.0)), "replace-one", "prv",
     "assumes Poisson sampling under add/remove"),
    (LogisticDpEvent(1.0), "add-remove", "pld", "logistic"),
    (TreeAggregationDpEvent(1.0, 8, 1, 0), "add-remove", "prv", "only supports Poisson-subsampled Gaussian"),
])
def test_not_applicable_with_reason(event, relation, accountant, reason):
    r = epsilon(claim(event, relation), accountant)
    assert r.epsilon is None and reason in r.reason


def test_all_epsilons_answers_every_accountant_for_the_defense_shapes():
    from privaudit.accountants import ACCOUNTANTS, all_epsilons

    shapes = [
        claim(dpsgd(1.0, 0.01, 100)),
        claim(SelfComposedDpEvent(PoissonSampledDpEvent(0.01, ComposedDpEvent([GaussianDpEvent(1.0),
                                                                                GaussianDpEvent(1.2)])), 100)),
        claim(SelfComposedDpEvent(SampledWithoutReplacementDpEvent(500, 50, GaussianDpEvent(1.0)), 100), "replace-one"),
        claim(LogisticDpEvent(2.0), delta=0.0), claim(LaplaceDpEvent(2.0), delta=0.0),
        claim(GaussianDpEvent(3.0)), claim(TreeAggregationDpEvent(5.0, 64, 2, 20), delta=1e-6),
        claim(dp_accounting.SingleEpochTreeAggregationDpEvent(5.0, 64), delta=1e-6),
    ]
    for c in shapes:
        results = all_epsilons(c)
        assert set(results) == set(ACCOUNTANTS)
        assert any(r.applicable for r in results.values())
        for r in results.values():
            assert r.applicable or (r.reason and r.reason.split(":")[0] in ACCOUNTANTS)
            assert r.epsilon is None or (r.epsilon >= 0 and not math.isnan(r.epsilon))
