"""The per-unit gradient engine against a plain loop (one backward per unit), for every unit kind."""

import pytest
import torch

from privaudit.defenses.dp import (Embedder, Source, TwoTower, all_unit_gradients, clipped_sum, dense_units, pair_units,
                         partition_units)
from privaudit.defenses.dp.engine.contrastive import loss_cotangents, term_cotangents
from privaudit.defenses.dp.engine.pairs import pair_derivatives
from privaudit.defenses.logit_dp import cosine_pair
from privaudit.defenses.losses import group_info_nce, group_info_nce_dual, info_nce, nt_xent
from privaudit.defenses.nn.model import ModelSpec, build_model

TOL = 1e-5


def tiny(encoder="cnn", seed=0, normalize=True):
    spec = ModelSpec(encoder=encoder, in_shape=(1, 8, 8), width=4, rep_dim=8, proj_hidden=8, proj_dim=4,
                     normalize=normalize, groups=2)
    return build_model(spec, seed=seed).double()


def flat_grad(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def rel_err(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def own_rows_loop(model, x, loss_fn, unit_rows):
    """Gradient of loss_fn(Z) through the rows of one unit only (other rows detached): one backward per unit."""
    with torch.no_grad():
        z_all = model(x)
    out = []
    for rows in unit_rows:
        model.zero_grad()
        z = z_all.clone().index_put((rows,), model(x[rows]))
        loss_fn(z).backward()
        out.append(flat_grad(model))
    return torch.stack(out)


@pytest.fixture(scope="module")
def batch(digits):
    g = torch.Generator().manual_seed(1)
    idx = torch.randperm(len(digits.train), generator=g)[:10]
    x = digits.train.x[idx].double()
    noise = 0.05 * torch.randn(x.shape, generator=g, dtype=torch.float64)
    return x, (x + noise).clamp(0, 1)


@pytest.mark.parametrize("encoder", ["cnn", "mlp"])
def test_term_units_match_loop(batch, encoder):
    """DP-GCL Eq. 6: each InfoNCE term through all embeddings."""
    x1, x2 = batch
    b = x1.shape[0]
    model = tiny(encoder)
    emb = Embedder(model)
    rows = torch.cat([x1, x2])
    z = model(rows).detach()
    terms_fn = lambda zz: info_nce(zz[:b], zz[b:], 0.5, reduction="none")  # noqa: E731
    terms, (cot,) = term_cotangents(terms_fn, (z,))
    engine = all_unit_gradients(emb, emb.params(), (Source(rows),), dense_units("term", (cot,)), chunk=3)
    loop = []
    for i in range(b):
        model.zero_grad()
        terms_fn(model(rows))[i].backward()
        loop.append(flat_grad(model))
    loop = torch.stack(loop)
    assert engine.shape == loop.shape == (b, emb.space.size)
    assert max(rel_err(e, l) for e, l in zip(engine, loop)) < TOL
    assert float(terms.sum()) == pytest.approx(float(terms_fn(z).sum()))


@pytest.mark.parametrize("kind", ["view", "example", "batch"])
def test_own_row_units_match_loop(batch, kind):
    """DPCL's per-view / per-example gradients and batch clipping: the loss gradient through the unit's own rows."""
    x1, x2 = batch
    b = x1.shape[0]
    model = tiny()
    emb = Embedder(model)
    rows = torch.cat([x1, x2])
    loss_fn = lambda zz: nt_xent(zz[:b], zz[b:], 0.5, reduction="mean")  # noqa: E731
    _, (cot,) = loss_cotangents(loss_fn, (model(rows).detach(),))
    owners = {"view": torch.arange(2 * b), "example": torch.arange(2 * b) % b, "batch": torch.zeros(2 * b)}[kind]
    units = partition_units(kind, (cot,), (owners,))
    engine = all_unit_gradients(emb, emb.params(), (Source(rows),), units, chunk=4)
    unit_rows = [(owners == u).nonzero().flatten() for u in units.ids]
    loop = own_rows_loop(model, rows, loss_fn, unit_rows)
    assert engine.shape == loop.shape
    assert max(rel_err(e, l) for e, l in zip(engine, loop)) < TOL
    if kind == "batch":  # the single unit is the full gradient
        model.zero_grad()
        loss_fn(model(rows)).backward()
        assert rel_err(engine[0], flat_grad(model)) < TOL


@pytest.mark.parametrize("augmentations", [0, 2])
def test_group_units_match_group_loss_loop(batch, augmentations):
    """DP-GCL Eqs. 10/13: the unit is the gradient of the group's own loss (uneven groups, empty group ids)."""
    x1, x2 = batch
    b, na = x1.shape[0], augmentations
    g = torch.Generator().manual_seed(3)
    aug = [(x2 + 0.05 * torch.randn(x2.shape, generator=g, dtype=torch.float64)).clamp(0, 1) for _ in range(na)]
    groups = torch.tensor([0, 0, 0, 2, 2, 5, 5, 5, 5, 7])  # sizes 3, 2, 4, 1
    model = tiny()
    emb = Embedder(model)
    rows = torch.cat([x1, x2, *aug])

    def loss_fn(zz, members=None):
        aug_z = zz[2 * b:].reshape(na, b, -1) if na else None
        terms = group_info_nce(zz[:b], zz[b:2 * b], 0.7, groups, aug_z)
        return terms.sum() if members is None else terms[members].sum()

    _, (cot,) = loss_cotangents(loss_fn, (model(rows).detach(),))
    units = partition_units("group", (cot,), (groups.repeat(2 + na),))
    assert units.ids.tolist() == [0, 2, 5, 7]
    engine = all_unit_gradients(emb, emb.params(), (Source(rows),), units, chunk=3)
    loop = []
    for k in units.ids:
        model.zero_grad()
        loss_fn(model(rows), members=groups == k).backward()
        loop.append(flat_grad(model))
    assert max(rel_err(e, l) for e, l in zip(engine, torch.stack(loop))) < TOL


def test_dual_tower_group_units_match_loop(batch):
    """DP-GCL Eq. 16: per-group gradients with respect to both towers of a two-encoder model."""
    x1, x2 = batch
    groups = torch.tensor([0, 1, 0, 1, 2, 2, 0, 1, 2, 2])
    model = TwoTower(tiny(seed=0), tiny(encoder="mlp", seed=1))
    emb = Embedder(model)

    def loss_fn(za, zb, members=None):
        terms = group_info_nce_dual(za, zb, 0.5, groups)
        return terms.sum() if members is None else terms[members].sum()

    with torch.no_grad():
        zs = (model(x1, 0), model(x2, 1))
    _, cots = loss_cotangents(loss_fn, zs)
    units = partition_units("group", cots, (groups, groups))
    engine = all_unit_gradients(emb, emb.params(), (Source(x1, 0), Source(x2, 1)), units)
    loop = []
    for k in units.ids:
        model.zero_grad()
        loss_fn(model(x1, 0), model(x2, 1), members=groups == k).backward()
        loop.append(flat_grad(model))
    assert max(rel_err(e, l) for e, l in zip(engine, torch.stack(loop))) < TOL


def test_pair_units_match_loop(batch):
    """Logit-DP: grad_theta Z_ij for every similarity pair."""
    x1, x2 = batch
    x, y = x1[:5], x2[:4]
    model = tiny()
    emb = Embedder(model)
    tau = 0.5
    sim = lambda u, v: cosine_pair(u, v) / tau  # noqa: E731
    with torch.no_grad():
        zx, zy = model(x), model(y)
    a, b = pair_derivatives(sim, zx, zy)
    engine = all_unit_gradients(emb, emb.params(), (Source(torch.cat([x, y])),), pair_units(a, b), chunk=7)
    loop = []
    for i in range(5):
        for j in range(4):
            model.zero_grad()
            sim(model(x[i:i + 1])[0], model(y[j:j + 1])[0]).backward()
            loop.append(flat_grad(model))
    assert engine.shape[0] == 20
    assert max(rel_err(e, l) for e, l in zip(engine, torch.stack(loop))) < TOL


def test_clipped_sum_clips_weights_and_sums(batch):
    x1, x2 = batch
    b = x1.shape[0]
    model = tiny()
    emb = Embedder(model)
    rows = torch.cat([x1, x2])
    _, (cot,) = loss_cotangents(lambda zz: nt_xent(zz[:b], zz[b:], 0.5, reduction="sum"), (model(rows).detach(),))
    units = partition_units("example", (cot,), (torch.arange(2 * b) % b,))
    grads = all_unit_gradients(emb, emb.params(), (Source(rows),), units)
    norms = grads.norm(dim=1)
    ordered = norms.sort().values
    clip = float(ordered[4:6].mean())  # between two norms: half the units are clipped
    out = clipped_sum(emb, emb.params(), (Source(rows),), units, clip, chunk=3)
    expected = (grads * torch.clamp(clip / norms, max=1.0)[:, None]).sum(0)
    assert rel_err(out.total, expected) < 1e-10
    assert torch.allclose(out.norms, norms)
    assert out.clipped_fraction == pytest.approx(0.5)
    w = torch.linspace(-1, 1, b, dtype=torch.float64)
    weighted = clipped_sum(emb, emb.params(), (Source(rows),), type(units)(units.kind, units.cotangents, units.rows, w),
                           clip)
    assert rel_err(weighted.total, (grads * (w * torch.clamp(clip / norms, max=1.0))[:, None]).sum(0)) < 1e-10


def test_resnet18_example_units_match_loop(batch):
    """The same engine on the GroupNorm ResNet-18 used for CIFAR-10 (tiny width, CPU)."""
    x1, x2 = batch
    x1, x2 = x1[:4], x2[:4]
    spec = ModelSpec(encoder="resnet18", in_shape=(1, 8, 8), width=4, rep_dim=8, proj_hidden=8, proj_dim=4, groups=2)
    model = build_model(spec, seed=0).double()
    emb = Embedder(model)
    rows = torch.cat([x1, x2])
    loss_fn = lambda zz: nt_xent(zz[:4], zz[4:], 0.5, reduction="sum")  # noqa: E731
    _, (cot,) = loss_cotangents(loss_fn, (model(rows).detach(),))
    owners = torch.arange(8) % 4
    engine = all_unit_gradients(emb, emb.params(), (Source(rows),), partition_units("example", (cot,), (owners,)))
    loop = own_rows_loop(model, rows, loss_fn, [(owners == u).nonzero().flatten() for u in range(4)])
    assert max(rel_err(e, l) for e, l in zip(engine, loop)) < TOL
