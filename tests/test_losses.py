"""Losses against independent, loop-based computations of the papers' formulas."""

import math

import pytest
import torch

from privaudit.defenses.losses import (barlow_twins, cross_correlation, cosine_similarity_matrix, feature_sse, feature_stats, info_nce,
                             make_objective, nt_xent, spreadout)

def _randn(*shape, seed=0):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _cos(a, b):
    return float(a @ b / (a.norm() * b.norm()))


def loop_info_nce(u, v, tau):
    """DP-GCL Eq. 4 term by term."""
    total = 0.0
    for i in range(u.shape[0]):
        num = math.exp(_cos(u[i], v[i]) / tau)
        den = sum(math.exp(_cos(u[i], v[j]) / tau) for j in range(v.shape[0]))
        total += -math.log(num / den)
    return total


def loop_nt_xent(z1, z2, tau):
    """DPCL Eqs. 3-4 with interleaved views 2k-1, 2k as the paper writes them."""
    n = z1.shape[0]
    z = [None] * (2 * n)
    for k in range(n):
        z[2 * k], z[2 * k + 1] = z1[k], z2[k]

    def ell(i, j):
        num = math.exp(_cos(z[i], z[j]) / tau)
        den = sum(math.exp(_cos(z[i], z[k]) / tau) for k in range(2 * n) if k != i)
        return -math.log(num / den)

    return sum(ell(2 * k, 2 * k + 1) + ell(2 * k + 1, 2 * k) for k in range(n)) / (2 * n)


def loop_barlow(z1, z2, lambd):
    """DPCL Eqs. 5-6 with centred features."""
    a = z1 - z1.mean(0)
    b = z2 - z2.mean(0)
    d = z1.shape[1]
    loss = 0.0
    for i in range(d):
        for j in range(d):
            c = float((a[:, i] * b[:, j]).sum() / (a[:, i].pow(2).sum().sqrt() * b[:, j].pow(2).sum().sqrt()))
            loss += (1 - c) ** 2 if i == j else lambd * c ** 2
    return loss


def loop_spreadout(u, v):
    n = u.shape[0]
    return sum(sum(_cos(u[i], v[j]) ** 2 for j in range(n) if j != i) / (n - 1) for i in range(n))


@pytest.mark.parametrize("tau", [0.1, 0.5, 1.0])
def test_info_nce_matches_loop(tau):
    u, v = _randn(7, 5, seed=1), _randn(7, 5, seed=2)
    assert float(info_nce(u, v, tau)) == pytest.approx(loop_info_nce(u, v, tau), rel=1e-9)
    terms = info_nce(u, v, tau, reduction="none")
    assert terms.shape == (7,) and float(terms.sum()) == pytest.approx(loop_info_nce(u, v, tau), rel=1e-9)


@pytest.mark.parametrize("tau", [0.2, 0.5])
def test_nt_xent_matches_loop(tau):
    z1, z2 = _randn(6, 4, seed=3), _randn(6, 4, seed=4)
    assert float(nt_xent(z1, z2, tau)) == pytest.approx(loop_nt_xent(z1, z2, tau), rel=1e-9)


def test_nt_xent_is_minimised_by_aligned_views():
    z = torch.nn.functional.normalize(_randn(8, 16, seed=10), dim=1)
    aligned = nt_xent(z, z, 0.1)
    shuffled = nt_xent(z, z.roll(1, dims=0), 0.1)
    assert float(aligned) < float(shuffled)


def test_barlow_matches_loop_and_uses_given_stats():
    z1, z2 = _randn(9, 4, seed=5), _randn(9, 4, seed=6)
    assert float(barlow_twins(z1, z2, 0.05)) == pytest.approx(loop_barlow(z1, z2, 0.05), rel=1e-5)  # eps in sqrt
    # Supplying the exact batch statistics changes nothing; supplying other ones does.
    same = barlow_twins(z1, z2, 0.05, stats1=feature_stats(z1), stats2=feature_stats(z2))
    assert float(same) == pytest.approx(loop_barlow(z1, z2, 0.05), rel=1e-5)
    mean, var = feature_stats(z1)
    # A mean shift of one view cancels against the centred other view; a variance change scales C.
    shifted = barlow_twins(z1, z2, 0.05, stats1=(mean + 1.0, var), stats2=feature_stats(z2))
    assert float(shifted) == pytest.approx(float(same), rel=1e-9)
    scaled = cross_correlation(z1, z2, stats1=(mean, 4 * var), eps=0.0)
    assert torch.allclose(scaled, cross_correlation(z1, z2, eps=0.0) / 2, atol=1e-12)


def test_feature_stats_are_dpcl_eqs_7_to_9():
    z = _randn(11, 3, seed=7)
    mean, var = feature_stats(z)
    assert torch.allclose(mean, z.mean(0))
    assert torch.allclose(var, z.var(0, unbiased=True))
    assert torch.allclose(feature_sse(z), ((z - z.mean(0)) ** 2).sum(0))


def test_spreadout_matches_loop():
    u, v = _randn(6, 5, seed=8), _randn(6, 5, seed=9)
    assert float(spreadout(u, v)) == pytest.approx(loop_spreadout(u, v), rel=1e-9)


def test_cosine_similarity_matrix():
    u, v = _randn(3, 4, seed=11), _randn(5, 4, seed=12)
    s = cosine_similarity_matrix(u, v)
    assert s.shape == (3, 5)
    assert float(s[1, 2]) == pytest.approx(_cos(u[1], v[2]), rel=1e-5)


def test_make_objective_rejects_unknown_loss():
    from privaudit.core.errors import ConfigError

    with pytest.raises(ConfigError, match="loss: unknown value 'triplet'; accepted: simclr"):
        make_objective("triplet")


def test_nt_xent_batch_dimensions_equal_one_call_per_batch():
    """The ensemble's stacked NT-Xent (leading model axis) gives each model's own loss terms."""
    from privaudit.defenses.losses import nt_xent

    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(3, 5, 4, generator=g), torch.randn(3, 5, 4, generator=g)
    stacked = nt_xent(z1, z2, 0.5, reduction="none")
    assert stacked.shape == (3, 10)
    for k in range(3):
        torch.testing.assert_close(stacked[k], nt_xent(z1[k], z2[k], 0.5, reduction="none"))
