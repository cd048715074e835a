"""Logit-DP: the efficient recombination equals the direct pair-gradient reference."""

import pytest
import torch

from privaudit.defenses.dp import Embedder, Source, all_unit_gradients, pair_units
from privaudit.defenses.dp.engine.pairs import direct_pair_sum, efficient_pair_sum, pair_derivatives, pair_norms
from privaudit.defenses.logit_dp import cosine_pair
from privaudit.defenses.losses import info_nce_from_logits, spreadout_from_similarity
from privaudit.defenses.nn.model import ModelSpec, build_model


def setup(n=6, tau=1.0, loss="infonce", encoder="cnn", proj_dim=4):
    spec = ModelSpec(encoder=encoder, in_shape=(1, 8, 8), width=4, rep_dim=8, proj_hidden=8, proj_dim=proj_dim, groups=2)
    model = build_model(spec, seed=0).double()
    g = torch.Generator().manual_seed(2)
    x = torch.rand(n, 1, 8, 8, generator=g, dtype=torch.float64)
    y = (x + 0.1 * torch.randn(x.shape, generator=g, dtype=torch.float64)).clamp(0, 1)
    scale = 1 / tau if loss == "infonce" else 1.0
    sim = lambda u, v: cosine_pair(u, v) * scale  # noqa: E731
    emb = Embedder(model)
    params = emb.params()
    with torch.no_grad():
        zx, zy = model(x), model(y)
    logits = (torch.nn.functional.normalize(zx, dim=1) @ torch.nn.functional.normalize(zy, dim=1).T * scale)
    logits.requires_grad_(True)
    total = info_nce_from_logits(logits, "sum") if loss == "infonce" else spreadout_from_similarity(logits, "sum")
    (tau_ij,) = torch.autograd.grad(total, logits)
    a, b = pair_derivatives(sim, zx, zy)
    return emb, params, x, y, sim, tau_ij, a, b


def rel_err(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("loss,tau", [("infonce", 1.0), ("infonce", 0.5), ("spreadout", 1.0)])
def test_efficient_equals_direct(loss, tau):
    emb, params, x, y, sim, tau_ij, a, b = setup(tau=tau, loss=loss)
    norms = pair_norms(emb, params, x, y, a, b)
    clip = float(norms.median())  # about half the pairs are clipped
    direct = direct_pair_sum(emb, params, x, y, tau_ij, a, b, clip, chunk=7)
    fast = efficient_pair_sum(emb, params, x, y, sim, tau_ij, a, b, clip)
    assert 0.3 < fast.clipped_fraction < 0.7
    assert rel_err(fast.total, direct.total) < 1e-5
    assert torch.allclose(fast.norms, direct.norms, rtol=1e-6)


def test_pair_norms_are_exact_and_the_upper_bound_bounds_them():
    emb, params, x, y, sim, tau_ij, a, b = setup(n=5, encoder="mlp")
    grads = all_unit_gradients(emb, params, (Source(torch.cat([x, y])),), pair_units(a, b))
    exact = pair_norms(emb, params, x, y, a, b, "exact")
    upper = pair_norms(emb, params, x, y, a, b, "upper-bound")
    assert torch.allclose(exact.reshape(-1), grads.norm(dim=1), rtol=1e-8)
    assert bool((upper >= exact * (1 - 1e-9)).all()) and bool((upper > exact * 1.01).any())
    clip = float(exact.median())
    loose = efficient_pair_sum(emb, params, x, y, sim, tau_ij, a, b, clip, norms="upper-bound")
    scale = torch.clamp(clip / upper.reshape(-1), max=1.0)
    expected = ((tau_ij.reshape(-1) * scale)[:, None] * grads).sum(0)
    assert rel_err(loose.total, expected) < 1e-8
    assert float((grads * scale[:, None]).norm(dim=1).max()) <= clip * (1 + 1e-9)  # every clipped pair <= B


def test_pair_norms_never_fall_below_the_true_norm_where_the_parts_cancel():
    """Gram-identity norms in float32 lose the true norm to cancellation; the rounding slack restores the bound."""
    g = torch.Generator().manual_seed(0)
    n, d, p = 6, 2, 20000
    jx = 100 * torch.randn(n, d, p, generator=g)
    jy = -jx + 1e-3 * torch.randn(n, d, p, generator=g)  # pair (i, i): a^T J_x + b^T J_y nearly cancels
    a = torch.zeros(n, n, d)
    a[..., 0] = 1.0
    b = a.clone()
    norms = pair_norms(None, None, None, None, a, b, "exact", jacobians=(jx, jy))
    true = (jx[:, None, 0].double() + jy[None, :, 0].double()).norm(dim=-1)
    assert (norms.double() >= true * (1 - 1e-6)).all()
    # the plain float32 identity falls below the truth on the cancelling pairs (what the slack is for)
    gx, gy = (jx[:, 0] * jx[:, 0]).sum(-1), (jy[:, 0] * jy[:, 0]).sum(-1)
    plain = (gx[:, None] + gy[None, :] + 2 * jx[:, 0] @ jy[:, 0].T).clamp_min(0).sqrt()
    assert (plain.diagonal().double() < true.diagonal()).any()
    # and the slack is a small relative cost where nothing cancels
    off = ~torch.eye(n, dtype=torch.bool)
    assert (norms[off].double() <= true[off] * 1.01).all()
