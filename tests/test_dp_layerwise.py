"""The layerwise per-unit engine against the vmap/torch.func reference: same clipped sum, same norms.

Every unit shape (dense terms with fewer and more units than the embedding dimension, partitions into
views / groups / examples with rows in no unit, weights), both encoders, two towers, frozen layers,
and the fallback for what the engine has no rule for (a layer type, units that share rows).
"""

import pytest
import torch
import torch.nn as nn

from privaudit.defenses import Budget, make_defense
from privaudit.defenses.dp import Embedder, Source, TwoTower, clipped_sum, dense_units, pair_units, partition_units
from privaudit.defenses.dp.engine.gradients import engine_reason
from privaudit.defenses.dp.engine.layerwise import unsupported_reason
from privaudit.defenses.nn.model import ContrastiveModel, ModelSpec, build_model

TOL = 1e-9  # float64: the two engines agree to rounding


def tiny(encoder="cnn", seed=0, proj_dim=4, normalize=True):
    spec = ModelSpec(encoder=encoder, in_shape=(1, 8, 8), width=4, rep_dim=8, proj_hidden=8, proj_dim=proj_dim,
                     normalize=normalize, groups=2)
    return build_model(spec, seed=seed).double()


def both(emb, sources, units, clip, weights=None):
    fast = clipped_sum(emb, emb.params(), sources, units, clip, chunk=3, engine="layerwise")
    ref = clipped_sum(emb, emb.params(), sources, units, clip, chunk=3, engine="vmap")
    assert fast.engine == "layerwise" and ref.engine == "vmap"
    return fast, ref


def assert_same(fast, ref):
    assert fast.norms.shape == ref.norms.shape
    assert float((fast.norms - ref.norms).abs().max()) <= TOL * float(ref.norms.abs().max().clamp_min(1))
    assert float((fast.total - ref.total).norm()) <= TOL * float(ref.total.norm().clamp_min(1))


def rows(n=10, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 8, 8, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("encoder", ["cnn", "mlp"])
@pytest.mark.parametrize("n_units", [3, 9])  # fewer units than D = 4... and more (the basis backward)
def test_dense_units_match_vmap(encoder, n_units):
    model = tiny(encoder, proj_dim=4 if n_units == 9 else 8)
    emb = Embedder(model)
    x = rows()
    d = model(x).shape[-1]
    cot = torch.randn(n_units, len(x), d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    units = dense_units("term", (cot,))
    for clip in (1e-3, 1e3):  # every unit clipped / none clipped
        fast, ref = both(emb, (Source(x),), units, clip)
        assert_same(fast, ref)


@pytest.mark.parametrize("encoder", ["cnn", "mlp"])
@pytest.mark.parametrize("kind", ["view", "example", "group", "batch"])
def test_partition_units_match_vmap(encoder, kind):
    model = tiny(encoder)
    emb = Embedder(model)
    x = rows(12)
    cot = torch.randn(12, model(x).shape[-1], generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    owners = {"view": torch.arange(12), "example": torch.arange(12) % 6,
              "group": torch.tensor([0, 0, 1, 1, 2, 2, 3, -1, 5, 5, 5, 0]), "batch": torch.zeros(12, dtype=torch.long)}
    units = partition_units(kind, (cot,), (owners[kind],))
    fast, ref = both(emb, (Source(x),), units, 0.3)
    assert_same(fast, ref)
    weighted = type(units)(units.kind, units.cotangents, units.rows, torch.linspace(0.5, 2, len(units)).double())
    fast, ref = both(emb, (Source(x),), weighted, 0.3)
    assert_same(fast, ref)


def test_two_sources_and_two_towers_match_vmap():
    emb = Embedder(TwoTower(tiny("cnn", 0), tiny("mlp", 1)))
    x1, x2 = rows(6, 4), rows(6, 5)
    g = torch.Generator().manual_seed(6)
    c1, c2 = (torch.randn(6, 4, generator=g, dtype=torch.float64) for _ in range(2))
    owners = torch.tensor([0, 1, 2, 0, 1, 2])
    units = partition_units("group", (c1, c2), (owners, owners))
    fast, ref = both(emb, (Source(x1, 0), Source(x2, 1)), units, 0.2)
    assert_same(fast, ref)
    dense = dense_units("term", (torch.randn(5, 6, 4, generator=g, dtype=torch.float64),
                                 torch.randn(5, 6, 4, generator=g, dtype=torch.float64)))
    fast, ref = both(emb, (Source(x1, 0), Source(x2, 1)), dense, 0.2)
    assert_same(fast, ref)


def test_frozen_layers_match_vmap():
    model = tiny("cnn")
    for name, p in model.named_parameters():
        if name.startswith("encoder.net.1") or name.endswith("bias"):
            p.requires_grad_(False)
    emb = Embedder(model)
    x = rows(8)
    cot = torch.randn(8, 4, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    units = partition_units("example", (cot,), (torch.arange(8) % 4,))
    fast, ref = both(emb, (Source(x),), units, 0.1)
    assert_same(fast, ref)
    assert fast.total.numel() == emb.space.size < sum(p.numel() for p in model.parameters())


class Scale(nn.Module):
    """A layer the engine has no rule for (a trainable elementwise scale)."""

    def __init__(self, dim):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * self.gain


def test_unsupported_layer_falls_back_to_vmap_and_says_so():
    base = tiny("mlp")
    model = ContrastiveModel(nn.Sequential(base.encoder, Scale(8)), base.projector).double()
    emb = Embedder(model)
    reason = unsupported_reason(model)
    assert reason is not None and "Scale" in reason
    x = rows(6)
    cot = torch.randn(6, 4, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    units = partition_units("example", (cot,), (torch.arange(6),))
    auto = clipped_sum(emb, emb.params(), (Source(x),), units, 0.5)
    ref = clipped_sum(emb, emb.params(), (Source(x),), units, 0.5, engine="vmap")
    assert auto.engine.startswith("vmap (") and "Scale" in auto.engine
    assert torch.equal(auto.total, ref.total)
    with pytest.raises(ValueError, match="Scale"):
        clipped_sum(emb, emb.params(), (Source(x),), units, 0.5, engine="layerwise")


def test_shared_rows_fall_back_to_vmap():
    model = tiny("mlp")
    emb = Embedder(model)
    x, y = rows(4, 9), rows(4, 10)
    g = torch.Generator().manual_seed(11)
    a, b = (torch.randn(4, 4, 4, generator=g, dtype=torch.float64) for _ in range(2))
    units = pair_units(a, b)
    assert "not a partition" in engine_reason(emb, units)
    out = clipped_sum(emb, emb.params(), (Source(torch.cat([x, y])),), units, 0.5)
    assert out.engine.startswith("vmap (")


def test_bad_engine_is_a_config_error():
    from privaudit.core.errors import ConfigError

    with pytest.raises(ConfigError, match="engine"):
        make_defense("dpsgd", {"engine": "fast"})


@pytest.mark.parametrize("name", ["dpsgd", "dp-gcl", "dpcl-simclr", "dp-clip"])
def test_training_step_is_the_same_with_either_engine(digits, name):
    """One DP step of the defense: the released noisy gradient agrees between engines."""
    params = {"width": 4, "rep_dim": 8, "proj_hidden": 8, "proj_dim": 4, "batch_size": 16, "epochs": 1,
              "init": "random"}
    grads = {}
    for engine in ("layerwise", "vmap"):
        run = make_defense(name, {**params, "engine": engine}).prepare(digits, Budget(noise_multiplier=1.0), seed=0)
        assert run.extras["dp"]["engine"].startswith(engine)
        run.step(torch.arange(16))
        grads[engine] = torch.cat([p.grad.reshape(-1) for p in run.model.parameters() if p.grad is not None])
    assert float((grads["layerwise"] - grads["vmap"]).norm() / grads["vmap"].norm()) < 1e-4


@pytest.mark.parametrize("encoder", ["cnn", "mlp"])
def test_row_jacobians_match_vmap(encoder):
    """Logit-DP's per-row Jacobians (n, D, p): layerwise (rows replicated D times) against vmap."""
    from privaudit.defenses.dp.engine.layerwise import row_jacobians
    from privaudit.defenses.dp.engine.pairs import per_sample_jacobians

    emb = Embedder(tiny(encoder))
    x = rows(5, 12)
    fast = row_jacobians(emb, emb.params(), Source(x))
    ref = per_sample_jacobians(emb, emb.params(), x)
    assert fast.shape == ref.shape == (5, 4, emb.space.size)
    assert float((fast - ref).abs().max()) <= TOL * float(ref.abs().max())


def test_logit_dp_step_is_the_same_with_either_gram_engine(digits):
    """Layerwise: ghost Grams over D - 1 tangent directions per row; vmap: Grams of the full row Jacobians."""
    params = {"width": 4, "rep_dim": 8, "proj_hidden": 8, "proj_dim": 4, "batch_size": 8, "epochs": 1,
              "init": "random"}
    grads = {}
    for engine in ("layerwise", "vmap"):
        run = make_defense("logit-dp", {**params, "engine": engine}).prepare(digits, Budget(noise_multiplier=1.0),
                                                                             seed=0)
        assert run.extras["dp"]["engine"].startswith(engine)
        run.step(torch.arange(8))
        grads[engine] = torch.cat([p.grad.reshape(-1) for p in run.model.parameters() if p.grad is not None])
    assert float((grads["layerwise"] - grads["vmap"]).norm() / grads["vmap"].norm()) < 1e-4


def test_units_beyond_the_memory_bound_go_through_the_layerwise_engine_in_chunks(monkeypatch):
    """Beyond the single pass's memory bound the layerwise engine cuts the step into chunks
    (defenses.dp.engine.chunked, tests/test_dp_chunked.py) rather than falling back to vmap."""
    import privaudit.defenses.dp.engine.layerwise as layerwise

    emb = Embedder(tiny("mlp"))
    x = rows(6)
    cot = torch.randn(6, 4, generator=torch.Generator().manual_seed(13), dtype=torch.float64)
    units = partition_units("example", (cot,), (torch.arange(6),))
    assert engine_reason(emb, units) is None
    monkeypatch.setattr(layerwise, "MEMORY_LIMIT", 10)
    dense = dense_units("term", (torch.randn(3, 6, 4, dtype=torch.float64),))
    assert engine_reason(emb, dense) is None
    out = clipped_sum(emb, emb.params(), (Source(x),), dense, 0.5)
    assert out.engine == "layerwise" and out.detail.startswith("chunked")
    assert engine_reason(emb, units) is None  # partitions: one (U, p) matrix, segments in chunks


def test_auto_uses_vmap_for_dense_units_unless_layerwise_backpropagates_fewer_rows():
    """auto: layerwise iff R_own + min(U, D) R_shared <= 3/4 U R (rows through the backward, vmap: U R)."""
    emb = Embedder(tiny("mlp", proj_dim=4))
    g = torch.Generator().manual_seed(16)
    few = dense_units("term", (torch.randn(5, 6, 4, generator=g, dtype=torch.float64),))  # 4 * 6 > 3/4 * 5 * 6
    many = dense_units("term", (torch.randn(8, 6, 4, generator=g, dtype=torch.float64),))  # 4 * 6 <= 3/4 * 8 * 6
    assert "vmap is faster" in engine_reason(emb, few)
    assert engine_reason(emb, few, "layerwise") is None
    assert engine_reason(emb, many) is None
    # D = U = 4 over 8 rows: every row shared 4 * 8 = 32 rows (vmap); half of them own 4 + 4 * 4 = 20 <= 24
    shared = torch.randn(4, 8, 4, generator=g, dtype=torch.float64)
    assert "vmap is faster" in engine_reason(emb, dense_units("term", (shared,)))
    own = shared.clone()
    own[:, :4] = 0
    own[torch.arange(4), torch.arange(4)] = 1.0
    assert engine_reason(emb, dense_units("term", (own,))) is None


def test_segments_cover_every_unit_row_once():
    from privaudit.defenses.dp.engine.layerwise import segments

    owners = torch.tensor([2, 0, -1, 2, 2, 1, 0, 2, -1, 2])
    seg = segments(owners, 3, width=2)
    # unit 0: rows 1, 6; unit 1: row 5; unit 2: rows 0, 3, 4, 7, 9 (three segments of <= 2 rows)
    assert seg.unit.tolist() == [0, 1, 2, 2, 2] and not seg.one_per_unit
    assert seg.index.tolist() == [[1, 6], [5, 10], [0, 3], [4, 7], [9, 10]]  # padded with 10 = number of rows
    assert segments(torch.tensor([1, 0, 1, 0]), 2).one_per_unit  # default width: mean rows per unit


@pytest.mark.parametrize("width", [1, 2, None])
def test_segments_in_chunks_match_vmap(monkeypatch, width):
    """Units split over several segments (index_add into units) and segments processed a few at a time."""
    import privaudit.defenses.dp.engine.layerwise as layerwise

    real = layerwise.segments
    monkeypatch.setattr(layerwise, "segments", lambda owners, n: real(owners, n, width))
    monkeypatch.setattr(layerwise, "SEGMENT_LIMIT", 200)  # a few segments per chunk
    emb = Embedder(tiny("cnn"))
    x = rows(11)
    cot = torch.randn(11, 4, generator=torch.Generator().manual_seed(14), dtype=torch.float64)
    units = partition_units("group", (cot,), (torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, -1, 3]),))
    fast, ref = both(emb, (Source(x),), units, 0.3)
    assert_same(fast, ref)


@pytest.mark.parametrize("n_units,proj_dim", [(5, 8), (9, 4)])  # replicated with the units' / the basis cotangents
def test_dense_units_with_own_and_unused_rows_match_vmap(n_units, proj_dim):
    """DP-SGD's shape: row i only in unit i (its anchor), shared rows in every unit, rows in none."""
    emb = Embedder(tiny("cnn", proj_dim=proj_dim))
    x = rows(n_units + 5)
    g = torch.Generator().manual_seed(15)
    cot = torch.zeros(n_units, len(x), proj_dim, dtype=torch.float64)
    cot[torch.arange(n_units), torch.arange(n_units)] = torch.randn(n_units, proj_dim, generator=g, dtype=torch.float64)
    cot[:, n_units:n_units + 3] = torch.randn(n_units, 3, proj_dim, generator=g, dtype=torch.float64)
    cot[1, n_units + 3] = 1.0  # a row in one unit only, not its "own" index
    units = dense_units("term", (cot,))
    for clip in (1e-3, 1e3):
        fast, ref = both(emb, (Source(x),), units, clip)
        assert_same(fast, ref)
