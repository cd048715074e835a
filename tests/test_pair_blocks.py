"""Logit-DP's row Grams in blocks of rows (large encoders) equal the single pass, and the step uses them."""

import pytest
import torch

import privaudit.defenses.dp.engine.chunked as chunked
from privaudit.defenses.dp import Embedder, Source
from privaudit.defenses.dp.engine.pair_blocks import blocked_layer_grams, blocks, fits
from privaudit.defenses.dp.engine.pairs import pair_grams
from privaudit.defenses.dp.engine.row_grams import layer_grams
from privaudit.defenses.nn.model import ModelSpec, build_model


def problem(n=7, m=5, proj_dim=4):
    spec = ModelSpec(encoder="cnn", in_shape=(1, 8, 8), width=4, rep_dim=8, proj_hidden=8, proj_dim=proj_dim, groups=2)
    model = build_model(spec, seed=0).double()
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, 1, 8, 8, generator=g, dtype=torch.float64)
    y = torch.rand(m, 1, 8, 8, generator=g, dtype=torch.float64)
    emb = Embedder(model)
    return emb, emb.params(), x, y


def shrink(monkeypatch, emb, params, x, rows, copies=3):
    """A byte budget of ``rows`` rows per y block (twice as many per x block) with ``copies`` directions."""
    outputs = chunked.row_bytes(emb, params, Source(x)) // chunked.TAPE_FACTOR
    monkeypatch.setattr(chunked, "ROW_BYTES", 2 * rows * (copies + 2) * outputs)


@pytest.mark.parametrize("rows,tangent", [(1, True), (2, True), (3, False)])
def test_blocked_grams_equal_the_single_pass(monkeypatch, rows, tangent):
    emb, params, x, y = problem()
    whole = layer_grams(emb, params, x, y, tangent=tangent)
    shrink(monkeypatch, emb, params, x, rows, 3 if tangent else 4)
    assert blocks(emb, params, x, tangent)[1] == rows and not fits(emb, params, x, y, tangent)
    got = blocked_layer_grams(emb, params, x, y, tangent=tangent)
    for field in ("own_x", "own_y", "cross", "scale_x", "scale_y"):
        want = getattr(whole, field)
        assert float((getattr(got, field) - want).abs().max() / want.abs().max()) < 1e-12, field
    assert got.length == whole.length
    for a, b in zip(got.embeddings, whole.embeddings):
        assert torch.allclose(a, b, atol=1e-14)
    if tangent:
        assert all(torch.allclose(a, b, atol=1e-12) for a, b in zip(got.basis, whole.basis))
    k = whole.own_x.shape[-1]
    cx, cy = torch.randn(len(x), k, dtype=torch.float64), torch.randn(len(y), k, dtype=torch.float64)
    pulled, want = got.pullback(cx, cy), whole.pullback(cx, cy)
    assert float((pulled - want).norm() / want.norm()) < 1e-10


def test_pair_grams_takes_blocks_only_beyond_the_budget(monkeypatch):
    emb, params, x, y = problem()
    assert fits(emb, params, x, y, True)
    calls = []
    import privaudit.defenses.dp.engine.pair_blocks as pair_blocks

    real = pair_blocks.blocked_layer_grams
    monkeypatch.setattr(pair_blocks, "blocked_layer_grams", lambda *a, **k: calls.append(1) or real(*a, **k))
    pair_grams(emb, params, x, y, tangent=True)
    assert not calls
    shrink(monkeypatch, emb, params, x, 2)
    pair_grams(emb, params, x, y, tangent=True)
    assert calls
