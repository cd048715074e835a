"""The pessimistic Gaussian PLD with its inverse privacy loss vectorised equals dp-accounting's own: the composed
epsilon, and each PMF's probabilities (to the last bits of a cutoff: 1e-9 relative), for rates from 0.004 to 1 and both
discretisations the accountants use; a
cutoff shifted by a hundredth of the sensitivity (planted) is not equal."""

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm

from privaudit.accountants.pld import pld_gaussian
from privaudit.accountants.pld.pld_gaussian import VectorisedGaussianLoss, pessimistic_gaussian_pld


def library(z: float, q: float, interval: float):
    return pld_lib.from_gaussian_mechanism(z, sensitivity=1.0, pessimistic_estimate=True,
                                           value_discretization_interval=interval, sampling_prob=q,
                                           use_connect_dots=True)


def probs(pmf) -> np.ndarray:
    return np.asarray(pmf.to_dense_pmf()._probs if hasattr(pmf, "to_dense_pmf") else pmf._probs)


@pytest.mark.parametrize("z, q, interval", [(1.0, 0.004, 1e-4), (0.6, 0.3, 1e-3), (2.0, 1.0, 1e-4), (5.0, 0.9, 1e-3)])
def test_equal_to_the_library(z, q, interval):
    ours, theirs = pessimistic_gaussian_pld(z, q, interval), library(z, q, interval)
    for mine, ref in ((ours._pmf_remove, theirs._pmf_remove), (ours._pmf_add, theirs._pmf_add)):
        assert probs(mine).shape == probs(ref).shape
        np.testing.assert_allclose(probs(mine), probs(ref), rtol=1e-9, atol=1e-15)  # the last bits of a cutoff
    a = ours.self_compose(50).get_epsilon_for_delta(1e-5)
    b = theirs.self_compose(50).get_epsilon_for_delta(1e-5)
    assert a == pytest.approx(b, rel=1e-9)


def test_scalar_and_grid_divergences_agree_with_the_library_at_the_edges():
    """Each adjacency's divergence on a grid through its edge (log(1 - q) for REMOVE, -log(1 - q) for ADD), and a
    scalar epsilon, are the library's."""
    q = 0.25
    for kind in (plm.AdjacencyType.ADD, plm.AdjacencyType.REMOVE):
        ours = VectorisedGaussianLoss(0.9, sampling_prob=q, adjacency_type=kind)
        theirs = plm.GaussianPrivacyLoss(0.9, sampling_prob=q, adjacency_type=kind)
        grid = np.concatenate([np.linspace(-3, 3, 601), [np.log1p(-q), -np.log1p(-q)]])
        np.testing.assert_allclose(ours.get_delta_for_epsilon(grid), theirs.get_delta_for_epsilon(grid),
                                   rtol=1e-10, atol=1e-15)
        assert ours.get_delta_for_epsilon(0.5) == pytest.approx(theirs.get_delta_for_epsilon(0.5), rel=1e-12)


def test_a_shifted_cutoff_is_caught(monkeypatch):
    """Planted: every cutoff a hundredth of the sensitivity off; the comparison above then fails."""
    real = VectorisedGaussianLoss.inverse_losses
    monkeypatch.setattr(VectorisedGaussianLoss, "inverse_losses", lambda self, losses: real(self, losses) + 0.01)
    ours, theirs = pessimistic_gaussian_pld(1.0, 0.004, 1e-4), library(1.0, 0.004, 1e-4)
    a = ours.self_compose(50).get_epsilon_for_delta(1e-5)
    b = theirs.self_compose(50).get_epsilon_for_delta(1e-5)
    assert a != pytest.approx(b, rel=1e-9), (a, b)  # what test_equal_to_the_library compares


def test_without_the_librarys_internals_the_librarys_function_is_used(monkeypatch):
    monkeypatch.setattr(pld_gaussian, "_INTERNALS", False)
    ours, theirs = pessimistic_gaussian_pld(1.0, 0.3, 1e-3), library(1.0, 0.3, 1e-3)
    np.testing.assert_array_equal(probs(ours._pmf_remove), probs(theirs._pmf_remove))
