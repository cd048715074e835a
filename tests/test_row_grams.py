"""Per-layer (ghost) row Grams equal the Grams of materialised Jacobians, for every layer rule."""

import random
from fractions import Fraction

import pytest
import torch

from privaudit.defenses.dp import Embedder
from privaudit.defenses.dp.engine import row_grams
from privaudit.defenses.dp.engine.pairs import per_sample_jacobians
from privaudit.defenses.dp.engine.row_grams import jacobian_grams, layer_grams, rounding_gamma
from privaudit.defenses.nn.model import ModelSpec, build_model


def problem(encoder: str, n: int = 5, m: int = 4, proj_dim: int = 3):
    spec = ModelSpec(encoder=encoder, in_shape=(1, 8, 8), width=4, rep_dim=8, proj_hidden=8, proj_dim=proj_dim, groups=2)
    model = build_model(spec, seed=0).double()
    with torch.no_grad():  # weights away from the init's symmetric values, so every rule's terms are nonzero
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=p.dtype))
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, 1, 8, 8, generator=g, dtype=torch.float64)
    y = torch.rand(m, 1, 8, 8, generator=g, dtype=torch.float64)
    emb = Embedder(model)
    return emb, emb.params(), x, y


@pytest.mark.parametrize("encoder,ghost_convs", [("cnn", "never"), ("cnn", "always"), ("cnn", "auto"), ("mlp", "auto")])
def test_layer_grams_equal_the_jacobian_grams(monkeypatch, encoder, ghost_convs):
    if ghost_convs != "auto":
        monkeypatch.setattr(row_grams, "_conv_ghost_cheaper", lambda *a: ghost_convs == "always")
    emb, params, x, y = problem(encoder)
    jx, jy = per_sample_jacobians(emb, params, x), per_sample_jacobians(emb, params, y)
    ref = jacobian_grams(jx, jy)
    got = layer_grams(emb, params, x, y)
    for field in ("own_x", "own_y", "cross"):
        want = getattr(ref, field)
        assert float((getattr(got, field) - want).abs().max() / want.abs().max()) < 1e-10, field
    cx, cy = torch.randn(len(x), 3, dtype=torch.float64), torch.randn(len(y), 3, dtype=torch.float64)
    pulled, want = got.pullback(cx, cy), ref.pullback(cx, cy)
    assert float((pulled - want).norm() / want.norm()) < 1e-10
    # the embeddings come out of the same forward pass
    with torch.no_grad():
        assert torch.allclose(got.embeddings[0], emb.embed(params, x), atol=1e-12)
    # every row direction's scale bounds its Jacobian row norm (the rounding slack's premise)
    assert bool((got.scale_x >= jx.norm(dim=-1) * (1 - 1e-12)).all())
    assert bool((got.scale_y >= jy.norm(dim=-1) * (1 - 1e-12)).all())


def test_the_weight_standardisation_corrections_are_needed(monkeypatch):
    """Without the per-filter rank-2 corrections the Grams would be those of g / sigma, not of the WS gradient."""
    emb, params, x, y = problem("cnn")
    ref = jacobian_grams(per_sample_jacobians(emb, params, x), per_sample_jacobians(emb, params, y))
    orig = row_grams._ws_hat
    monkeypatch.setattr(row_grams, "_ws_hat", lambda w: (orig(w)[0], torch.zeros_like(orig(w)[1])))
    wrong = layer_grams(emb, params, x, y)
    assert float((wrong.own_x - ref.own_x).abs().max() / ref.own_x.abs().max()) > 1e-3


def test_conv_ghost_choice_follows_the_cost():
    """Ghost products only where 4 n m D out L (L + D) + (nL)(mL) in k^2 < (nD)(mD) out in k^2."""
    conv = torch.nn.Conv2d(32, 32, 3)
    assert row_grams._conv_costs(conv, 4, 64, 64, 8) == (4 * 64 * 64 * 8 * 32 * 4 * 12 + 256 * 256 * 288,
                                                         512 * 512 * 32 * 288)
    assert row_grams._conv_ghost_cheaper(conv, 4, 64, 64, 8)  # 2 x 2 outputs: ghost
    assert row_grams._conv_ghost_cheaper(conv, 16, 64, 64, 8)  # 4 x 4 outputs: ghost
    assert not row_grams._conv_ghost_cheaper(conv, 64, 64, 64, 8)  # 8 x 8 outputs: materialise
    assert not row_grams._conv_ghost_cheaper(torch.nn.Conv2d(8, 16, 3), 16, 128, 128, 7)  # few filters: materialise


def test_tangent_directions_give_the_same_pair_norms_and_sum():
    """Cosine pair cotangents lie in z^perp: D - 1 backpropagated directions per row give the same
    pair norms and clipped sum as all D, and as the direct reference."""
    from privaudit.defenses.dp.engine.pairs import direct_pair_sum, efficient_pair_sum, pair_derivatives, pair_norms
    from privaudit.defenses.logit_dp import cosine_pair
    from privaudit.defenses.losses import info_nce_from_logits

    emb, params, x, y = problem("cnn", n=6, m=6, proj_dim=4)
    with torch.no_grad():
        zx, zy = emb.embed(params, x), emb.embed(params, y)
    logits = (torch.nn.functional.normalize(zx, dim=1) @ torch.nn.functional.normalize(zy, dim=1).T).requires_grad_(True)
    (tau,) = torch.autograd.grad(info_nce_from_logits(logits, "sum"), logits)
    a, b = pair_derivatives(cosine_pair, zx, zy)
    tangent = layer_grams(emb, params, x, y, tangent=True)
    full = layer_grams(emb, params, x, y)
    assert tangent.own_x.shape[-1] == 3 and full.own_x.shape[-1] == 4
    qx = tangent.basis[0]
    assert torch.allclose(qx.transpose(1, 2) @ qx, torch.eye(3, dtype=torch.float64).expand(6, 3, 3), atol=1e-12)
    assert float((torch.einsum("idk,ide,iel->ikl", qx, full.own_x, qx) - tangent.own_x).abs().max()) < 1e-10
    exact = pair_norms(emb, params, x, y, a, b, grams=full)
    assert torch.allclose(pair_norms(emb, params, x, y, a, b, grams=tangent), exact, rtol=1e-9)
    clip = float(exact.median())
    direct = direct_pair_sum(emb, params, x, y, tau, a, b, clip)
    fast = efficient_pair_sum(emb, params, x, y, cosine_pair, tau, a, b, clip, grams=tangent)
    assert float((fast.total - direct.total).norm() / direct.total.norm()) < 1e-9
    # a cotangent along z itself is not carried by the tangent directions (why the flag is the caller's)
    along = zx[:, None, :].expand(6, 6, 4).clone()
    assert float(pair_norms(emb, params, x, y, along, torch.zeros_like(b), grams=tangent).max()) < 1e-6


def test_ghost_cross_in_chunks_is_the_same(monkeypatch):
    """The memory bounds on a ghost product block and on the waiting narrow factors split the x rows into chunks
    and take every product at once; the Grams do not change."""
    emb, params, x, y = problem("cnn", n=7, m=5)
    monkeypatch.setattr(row_grams, "_conv_ghost_cheaper", lambda *a: True)
    whole = layer_grams(emb, params, x, y)
    monkeypatch.setattr(row_grams, "GHOST_LIMIT", 1)  # one x row per chunk (convolution and Linear ghost products)
    monkeypatch.setattr(row_grams, "FLUSH_LIMIT", 1)  # no factor waits
    chunked = layer_grams(emb, params, x, y)
    assert torch.allclose(chunked.cross, whole.cross, rtol=1e-12, atol=0)
    assert torch.allclose(chunked.own_x, whole.own_x, rtol=1e-12, atol=0)


@pytest.mark.parametrize("wide", [0, 10**6])
def test_convolution_rows_in_filter_blocks_are_the_same(monkeypatch, wide):
    """The rows' weight gradients one filter at a time (blocks sharing one buffer where each block's product is
    taken at once, ``WIDE`` 0; fresh blocks where they wait for one wide product) give the Grams of the whole
    rows: a block overwritten while a waiting product still holds it would change them."""
    emb, params, x, y = problem("cnn", n=7, m=5)
    monkeypatch.setattr(row_grams, "_conv_ghost_cheaper", lambda *a: False)
    whole = layer_grams(emb, params, x, y)
    monkeypatch.setattr(row_grams, "ROWS_CHUNK", 1)  # one filter per block
    monkeypatch.setattr(row_grams, "WIDE", wide)
    blocked = layer_grams(emb, params, x, y)
    for field in ("cross", "own_x", "own_y", "scale_x"):
        assert torch.allclose(getattr(blocked, field), getattr(whole, field), rtol=1e-12, atol=0), field


def test_the_rounding_bound_covers_two_summation_orders(monkeypatch):
    """Two float64 evaluations of the same Gram entries (ghost vs materialised convolutions; narrow factors merged
    into one wide product vs one product each) lie within gamma_k s_d s_e of the exact sum each, so they differ by
    at most twice that, with k the Grams' stated bound (``length``) and s the row-direction scales: the premise of
    :func:`~privaudit.defenses.dp.engine.pairs.rounding_slack`. IEEE arithmetic guarantees this whatever order the BLAS
    kernel sums in; how far two orders actually differ is the kernel's and the CPU's business, so the too-small
    slacks are shown to fail on constructed sums (the next test), not here. A single float32 rounding of each entry
    (what a float32 product would add at the least) is not covered. Float32 model, as in training."""
    spec = ModelSpec(encoder="cnn", in_shape=(1, 8, 8), width=4, rep_dim=8, proj_hidden=8, proj_dim=4, groups=2)
    emb = Embedder(build_model(spec, seed=0))
    params = emb.params()
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(16, 1, 8, 8, generator=g), torch.rand(12, 1, 8, 8, generator=g)
    runs = {}
    for name, ghost, merged in [("ghost", True, True), ("rows", False, True), ("separate", False, False)]:
        monkeypatch.setattr(row_grams, "_conv_ghost_cheaper", lambda *a, ghost=ghost: ghost)
        monkeypatch.setattr(row_grams, "WIDE", row_grams.WIDE if merged else 0)  # 0: every product taken at once
        runs[name] = layer_grams(emb, params, x, y, tangent=True)
    for one, other in [("ghost", "rows"), ("rows", "separate")]:
        a, b = runs[one], runs[other]
        k = max(a.length, b.length)
        scale = torch.maximum(a.scale_x, b.scale_x)[:, :, None, None] * torch.maximum(a.scale_y, b.scale_y)[None, None]
        spread = (a.cross - b.cross).abs() / scale
        assert float(spread.max()) <= 2 * rounding_gamma(k), (one, other)
    rows = runs["rows"]
    planted = rows.cross.float().double()  # a float32 rounding per entry, the bound still counting float64 ones
    scale = rows.scale_x[:, :, None, None] * rows.scale_y[None, None]
    assert float(((planted - rows.cross).abs() / scale).max()) > 2 * rounding_gamma(rows.length)


def sequential_sum(terms: list[float]) -> float:
    """Left-to-right float64 sum in Python's own floats: IEEE round-to-nearest-even at every addition, on every
    machine (no BLAS, no vector units, no fused operations)."""
    total = 0.0
    for t in terms:
        total = total + t
    return total


def test_a_too_small_rounding_slack_fails_on_a_sum_whose_exact_value_is_known():
    """1 followed by m copies of 2^-53, summed left to right: each addition is a tie that rounds back to 1, so the
    computed sum is 1 against the exact 1 + m 2^-53 (m u, u = 2^-53); summed small terms first it is exact. The
    stated bound gamma_k with k the terms counted covers both orders (and every other: 200 shuffles), against the
    exact rational sum; a slack of one rounding (gamma_1), or of half the terms, does not. Every number here is
    fixed by IEEE 754, so the planted slacks fail on any machine."""
    m = 64
    terms = [1.0] + [2.0 ** -53] * m
    exact = sum(Fraction(t) for t in terms)
    magnitude = sum(Fraction(abs(t)) for t in terms)
    big_first, small_first = sequential_sum(terms), sequential_sum(terms[::-1])
    assert big_first == 1.0 and Fraction(small_first) == exact  # the constructed case is what it says

    def covered(computed: float, gamma: float) -> bool:
        return abs(Fraction(computed) - exact) <= Fraction(gamma) * magnitude

    rng = random.Random(0)
    orders = [big_first, small_first] + [sequential_sum(rng.sample(terms, len(terms))) for _ in range(200)]
    assert all(covered(c, rounding_gamma(len(terms))) for c in orders)
    assert not covered(big_first, rounding_gamma(1))  # the planted slack of one rounding fails
    assert not covered(big_first, rounding_gamma(m // 2))
    spread = abs(Fraction(big_first) - Fraction(small_first))  # two orders: within twice the bound, not 2 gamma_1
    assert spread <= 2 * Fraction(rounding_gamma(len(terms))) * magnitude
    assert spread > 2 * Fraction(rounding_gamma(1)) * magnitude


def test_rounding_gamma_is_highams_and_refuses_too_many_roundings():
    u = 2.0 ** -53
    assert rounding_gamma(1) == u / (1 - u) and rounding_gamma(0) == 0.0
    assert rounding_gamma(10 ** 6) == pytest.approx(10 ** 6 * u, rel=1e-9)
    with pytest.raises(ValueError, match="rounding count k"):
        rounding_gamma(2 ** 53)
