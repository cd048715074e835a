"""Logit-DP's row Grams for a large encoder, in blocks of rows, within bounded memory.

:func:`privaudit.defenses.dp.engine.row_grams.layer_grams` holds every row's recorded forward pass, its K
backward passes' layer output gradients (K = D - 1 tangent directions) and, for the pull-back, every
layer's float64 factors: for a ResNet-18 at 32 x 32 about 0.1 GB per row, far beyond memory at
Logit-DP's batch sizes. The Grams are sums over the parameters of products of two rows' pieces, own
blocks G_r = J_r J_r^T of one row and cross blocks K_ij = J_{x_i} J_{y_j}^T of an x row and a y row,
so they come block by block:

* the x rows in blocks X_s, the y rows in blocks Y_t; block X_s's forward and K backward passes are
  held while every Y_t is run (:func:`~privaudit.defenses.dp.engine.row_grams.backward_directions`), and each
  layer's rule adds the Grams of X_s and Y_t (the same rules and float64 products as the single pass,
  :meth:`~privaudit.defenses.dp.engine.layer_rules.LayerRule.grams`); the cross block K[X_s, Y_t] is kept,
  every own block and row scale once;
* the pull-back sum_r J_r^T c_r (the clipped sum, Logit-DP Sec. 5.3) is one autograd backward pass of
  sum_r <f(x_r), Q_r c_r> over the rows, a block at a time, instead of the stored factors.

Every Gram entry is the same sum of the same exact float64 products as in the single pass, so the
rounding slack (:func:`privaudit.defenses.dp.engine.pairs.rounding_slack`) bounds it alike. The cost is the
y rows' backward passes once per x block; :func:`blocks` sizes the blocks from
:data:`privaudit.defenses.dp.engine.chunked.ROW_BYTES`.
"""

from __future__ import annotations

from typing import Mapping

import torch

from privaudit.defenses.dp.engine import chunked
from privaudit.defenses.dp.engine.embedder import Embedder, Source
from privaudit.defenses.dp.engine.row_grams import Directions, Grams, PairGrams, backward_directions


def _run_bytes(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor, copies: int) -> int:
    """Bytes per row of a forward and ``copies`` backward passes (layer outputs, their gradients, the float64
    factors of one layer at a time): about (copies + 2) x the layer outputs."""
    outputs = chunked.row_bytes(embedder, params, Source(x)) // chunked.TAPE_FACTOR
    return (copies + 2) * outputs


def _copies(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor, tangent: bool) -> int:
    """K: the embedding's dimension D (:meth:`Embedder.embedding_dim`), less one with ``tangent``."""
    dim = embedder.embedding_dim(params, x)
    return dim - 1 if tangent and dim > 1 else dim


def fits(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
         tangent: bool) -> bool:
    """Whether the single pass (every row at once, factors kept for the pull-back) fits in
    :data:`~privaudit.defenses.dp.engine.chunked.ROW_BYTES`: about (2K + 2) x the layer outputs per row."""
    if len(x) == 0:
        return True
    copies = _copies(embedder, params, x, tangent)
    per_row = _run_bytes(embedder, params, x, 2 * copies)
    return (len(x) + len(y)) * per_row <= chunked.budgets(x.device)[1]


def blocks(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor, tangent: bool) -> tuple[int, int]:
    """Rows per x block (held across the y blocks: ROW_BYTES) and per y block (ROW_BYTES / 2), ROW_BYTES times
    :func:`~privaudit.defenses.dp.engine.chunked.budget_scale` on a GPU."""
    per_row = _run_bytes(embedder, params, x, _copies(embedder, params, x, tangent))
    budget = chunked.budgets(x.device)[1]
    return max(1, budget // per_row), max(1, budget // (2 * per_row))


def blocked_layer_grams(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                        cross: bool = True, tangent: bool = False) -> PairGrams:
    """:func:`~privaudit.defenses.dp.engine.row_grams.layer_grams` block by block of rows (module docstring)."""
    n, m = len(x), len(y)
    bx, by = blocks(embedder, params, x, tangent)
    runs_y: list[Directions | None] = []
    out: Grams | None = None
    zs, bases = [None] * 2, [[], []]
    for i0 in range(0, n, bx):
        run_x = backward_directions(embedder, params, x[i0:i0 + bx], tangent)
        if run_x is None:
            return blocked_layer_grams(embedder, params, x, y, cross, tangent=False)
        for j0 in range(0, m, by):
            run_y = backward_directions(embedder, params, y[j0:j0 + by], tangent)
            if run_y is None:
                return blocked_layer_grams(embedder, params, x, y, cross, tangent=False)
            if out is None:
                out = Grams(n, m, run_x.copies, cross, run_x.zs.device)
            _add_block(out, run_x, run_y, params, i0, j0, first_x=j0 == 0, first_y=i0 == 0)
            if i0 == 0:
                _collect(zs, bases, 1, run_y)
            del run_y
        _collect(zs, bases, 0, run_x)
    assert out is not None
    scale = out.scales()
    zx, zy = torch.cat(zs[0]), torch.cat(zs[1])
    basis = None if not bases[0] else (torch.cat(bases[0]), torch.cat(bases[1]))
    rows = torch.cat([x, y])
    directions = None if basis is None else torch.cat(basis)

    def pullback(cx: torch.Tensor, cy: torch.Tensor) -> torch.Tensor:
        return _pullback(embedder, params, rows, torch.cat([cx, cy]), directions, bx)

    detail = f"row blocks: {-(-n // bx)} x blocks of <= {bx} rows, {-(-m // by)} y blocks of <= {by} rows"
    return PairGrams(out.own[:n], out.own[n:], out.cross, pullback, out.bound(), scale[:n], scale[n:], (zx, zy), basis,
                     detail)


def _collect(zs: list, bases: list, side: int, run: Directions) -> None:
    """Append a block's embeddings (and tangent bases) to side 0 (x) or 1 (y)."""
    zs[side] = (zs[side] or []) + [run.zs]
    if run.basis is not None:
        bases[side].append(run.basis)


def _add_block(out: Grams, run_x: Directions, run_y: Directions, params: Mapping[str, torch.Tensor], i0: int,
               j0: int, first_x: bool, first_y: bool) -> None:
    """Each layer's Grams of x block ``run_x`` (rows i0..) and y block ``run_y`` (rows j0..) into ``out``: the
    cross block always, the own blocks and scales of a block the first time it is seen."""
    nx, ny = len(run_x.zs), len(run_y.zs)
    acc = Grams(nx, ny, run_x.copies, out.cross is not None, run_x.zs.device)
    for layer in run_x.tape.layers:
        (cx,), (cy,) = run_x.tape.calls[layer.name], run_y.tape.calls[layer.name]
        a = torch.cat([cx.inp, cy.inp])
        b = torch.cat([run_x.layer_grads(layer.name, keep=True), run_y.layer_grads(layer.name)])
        layer.rule.grams(acc, layer.module, layer.own(params), a, b)  # the pull-backs are not kept
    acc.flush()
    n = out.n
    if first_x:
        out.own[i0:i0 + nx] = acc.own[:nx]
        out.scale2[i0:i0 + nx] = acc.scale2[:nx]
    if first_y:
        out.own[n + j0:n + j0 + ny] = acc.own[nx:]
        out.scale2[n + j0:n + j0 + ny] = acc.scale2[nx:]
    if out.cross is not None:
        out.cross[i0:i0 + nx, :, j0:j0 + ny] = acc.cross
    out.length, out.sums = max(out.length, acc.length), max(out.sums, acc.sums)


def _pullback(embedder: Embedder, params: Mapping[str, torch.Tensor], rows: torch.Tensor, c: torch.Tensor,
              basis: torch.Tensor | None, block: int) -> torch.Tensor:
    """sum_r J_r^T (Q_r c_r) (Q_r the rows' tangent bases, or the identity) as a flat (p,) vector: one autograd
    backward pass per block of rows."""
    names = embedder.space.names
    ref = next(iter(params.values()))
    cot = c if basis is None else torch.einsum("rdk,rk->rd", basis, c.to(basis.dtype))
    total = torch.zeros(embedder.space.size, dtype=ref.dtype, device=ref.device)
    for r0 in range(0, len(rows), block):
        leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        with torch.enable_grad():
            z = embedder.embed(leaves, rows[r0:r0 + block])
            grads = torch.autograd.grad(z, [leaves[k] for k in names], cot[r0:r0 + block].to(z.dtype),
                                        allow_unused=True)
        total += torch.cat([torch.zeros(leaves[k].numel(), dtype=ref.dtype, device=ref.device) if g is None
                            else g.reshape(-1) for k, g in zip(names, grads)])
    return total
