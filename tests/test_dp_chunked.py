"""The memory-bounded layerwise engine (units and rows in chunks) against the vmap reference.

Small models with the budgets shrunk so that every unit shape goes through chunks: partitions with
the recorded pass reused or recorded chunk by chunk, units larger than a row chunk, dense units with
own and shared rows, two towers and weights.
"""

from types import SimpleNamespace

import pytest
import torch

import privaudit.defenses.dp.engine.chunked as chunked
import privaudit.defenses.dp.engine.layerwise as layerwise
from privaudit.defenses.dp import Embedder, Source, TwoTower, clipped_sum, dense_units, partition_units
from privaudit.defenses.nn.model import ModelSpec, build_model

TOL = 1e-9


def tiny(encoder="cnn", seed=0, proj_dim=4):
    spec = ModelSpec(encoder=encoder, in_shape=(1, 8, 8), width=4, rep_dim=8, proj_hidden=8, proj_dim=proj_dim, groups=2)
    return build_model(spec, seed=seed).double()


def rows(n, seed=1):
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def budget(monkeypatch, emb, units_per_chunk, rows_per_chunk):
    """Shrink the byte budgets to ``units_per_chunk`` unit gradients and ``rows_per_chunk`` recorded rows."""
    per_row = chunked.row_bytes(emb, emb.params(), Source(rows(1)))
    monkeypatch.setattr(chunked, "GRAD_BYTES", units_per_chunk * emb.space.size * 8)
    monkeypatch.setattr(chunked, "ROW_BYTES", rows_per_chunk * per_row)


def compare(emb, sources, units, clip, chunks=True):
    fast = clipped_sum(emb, emb.params(), sources, units, clip, engine="layerwise")
    ref = clipped_sum(emb, emb.params(), sources, units, clip, engine="vmap")
    assert fast.engine == "layerwise"
    assert fast.detail.startswith("chunked") == chunks
    assert float((fast.norms - ref.norms).abs().max()) <= TOL * float(ref.norms.abs().max())
    assert float((fast.total - ref.total).norm()) <= TOL * float(ref.total.norm())
    return fast


@pytest.mark.parametrize("units_per_chunk,rows_per_chunk", [(2, 100), (3, 4), (100, 5), (1, 1)])
@pytest.mark.parametrize("encoder", ["cnn", "mlp"])
def test_partition_units_in_chunks_match_vmap(monkeypatch, encoder, units_per_chunk, rows_per_chunk):
    emb = Embedder(tiny(encoder))
    budget(monkeypatch, emb, units_per_chunk, rows_per_chunk)
    x = rows(12)
    cot = torch.randn(12, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    owners = torch.tensor([0, 0, 1, 1, 2, 2, 3, -1, 5, 5, 5, 0])  # a unit of 4 rows, a row in no unit
    units = partition_units("group", (cot,), (owners,))
    compare(emb, (Source(x),), units, 0.3)
    weighted = type(units)(units.kind, units.cotangents, units.rows, torch.linspace(0.5, 2, len(units)).double(),
                           row_owners=units.row_owners)
    compare(emb, (Source(x),), weighted, 0.3)


@pytest.mark.parametrize("units_per_chunk,rows_per_chunk", [(2, 100), (3, 4), (1, 1)])
def test_dense_units_in_chunks_match_vmap(monkeypatch, units_per_chunk, rows_per_chunk):
    """DP-SGD's shape (own anchors, shared rows, a row in no unit) and fully dense cotangents."""
    emb = Embedder(tiny("cnn", proj_dim=4))
    budget(monkeypatch, emb, units_per_chunk, rows_per_chunk)
    monkeypatch.setattr(layerwise, "MEMORY_LIMIT", 1)  # the single pass never fits
    n = 5
    x = rows(n + 5)
    g = torch.Generator().manual_seed(15)
    cot = torch.zeros(n, len(x), 4, dtype=torch.float64)
    cot[torch.arange(n), torch.arange(n)] = torch.randn(n, 4, generator=g, dtype=torch.float64)
    cot[:, n:n + 3] = torch.randn(n, 3, 4, generator=g, dtype=torch.float64)
    cot[1, n + 3] = 1.0
    for units in (dense_units("term", (cot,)), dense_units("term", (torch.randn(4, 7, 4, generator=g).double(),))):
        sources = (Source(x if units.cotangents[0].shape[1] == len(x) else x[:7]),)
        for clip in (1e-3, 1e3):
            compare(emb, sources, units, clip)


def test_two_towers_in_chunks_match_vmap(monkeypatch):
    emb = Embedder(TwoTower(tiny("cnn", 0), tiny("mlp", 1)))
    budget(monkeypatch, emb, 2, 3)
    monkeypatch.setattr(layerwise, "MEMORY_LIMIT", 1)
    x1, x2 = rows(6, 4), rows(6, 5)
    g = torch.Generator().manual_seed(6)
    c1, c2 = (torch.randn(6, 4, generator=g, dtype=torch.float64) for _ in range(2))
    owners = torch.tensor([0, 1, 2, 0, 1, 2])
    compare(emb, (Source(x1, 0), Source(x2, 1)), partition_units("group", (c1, c2), (owners, owners)), 0.2)
    dense = dense_units("term", (torch.randn(5, 6, 4, generator=g, dtype=torch.float64),
                                 torch.randn(5, 6, 4, generator=g, dtype=torch.float64)))
    compare(emb, (Source(x1, 0), Source(x2, 1)), dense, 0.2)


def test_small_problems_take_the_single_pass():
    emb = Embedder(tiny("cnn"))
    x = rows(8)
    cot = torch.randn(8, 4, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    compare(emb, (Source(x),), partition_units("example", (cot,), (torch.arange(8) % 4,)), 0.1, chunks=False)


def test_the_plan_follows_the_budgets(monkeypatch):
    emb = Embedder(tiny("cnn"))
    per_row = chunked.row_bytes(emb, emb.params(), Source(rows(3)))
    assert per_row == chunked.row_bytes(emb, emb.params(), Source(rows(1)))  # per row, cached per input shape
    budget(monkeypatch, emb, 5, 7)
    plan = chunked.chunk_plan(emb, emb.params(), (Source(rows(20)),))
    assert (plan.units, plan.rows) == (5, 7)
    assert chunked.records(emb, emb.params(), (Source(rows(7)),))
    assert not chunked.records(emb, emb.params(), (Source(rows(8)),))


@pytest.mark.parametrize("total, scale", [(143_771 << 20, 8), (81_559 << 20, 4), (8 << 30, 1)])
def test_gpu_budgets_grow_with_the_device_memory(monkeypatch, total, scale):
    """On the CPU the chunk budgets stay those that keep a ResNet-18 step under 8 GB; a CUDA device takes them
    once per 16 GiB of its memory (an H200: 8 times; an H100: 4; a small card: once)."""
    assert chunked.budgets(torch.device("cpu")) == (chunked.GRAD_BYTES, chunked.ROW_BYTES)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=total))
    assert chunked.budget_scale(torch.device("cuda", 0)) == scale
    assert chunked.budgets(torch.device("cuda", 0)) == (scale * chunked.GRAD_BYTES, scale * chunked.ROW_BYTES)
