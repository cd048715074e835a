"""Memory-bounded per-unit clipping for large encoders: units in chunks, their rows in chunks.

The layerwise engine (:mod:`privaudit.defenses.dp.engine.layerwise`) holds the step's whole recorded forward
pass (every layer's input and output for every row, then their gradients) and the (U, p) unit
gradients at once. For a ResNet-18 (11.2M parameters) at batch 256 that is tens of GB. Clipping is
per unit, so the clipped sum splits over chunks T of units, and each unit's gradient over chunks S of
its rows (the rows are independent through the encoder: no BatchNorm; the VJP is linear in the rows):

    sum_u w_u Clip_C(g_u) = sum_T sum_{u in T} w_u Clip_C(g_u),     g_u = sum_S sum_{r in S, r in u} J_r^T c_r.

A chunk of units holds only its own (|T|, p) gradients, exact and complete before it is clipped, so the
clipped sum is the single-pass one up to the order of float additions. Each chunk of rows is one
recorded forward and one backward of those rows (Opacus' ``BatchMemoryManager`` does the same for
per-example clipping: physical batches inside a logical one).

* partitions (view / example / group / batch units): the rows of the chunk's units, in row chunks;
  where all the step's rows fit in one row chunk, one recorded forward and one backward serve every
  unit chunk (each takes its units' rows of the recorded pass);
* dense units (DP-SGD's terms, Eq. 6 of DP-GCL): a term's own row joins the partition above; the rows
  shared by every term go through one autograd backward per unit with that unit's cotangents, on one
  forward per row chunk (no replicated forward). That is U backward passes of the shared rows, against
  min(U, D) in the single pass's basis form, whose (D x rows) layer gradients would not fit: the price
  of bounded memory for exact per-term clipping. Each unit's gradient is materialised once, into its
  chunk's (|T|, p) block.

:func:`chunk_plan` sizes the chunks from :data:`GRAD_BYTES` and :data:`ROW_BYTES` and the model's
measured bytes per recorded row (:func:`row_bytes`); :func:`single_pass` says whether the layerwise
engine's single pass fits, and the engine takes this path only where it does not (the numbers agree to
float rounding, tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from privaudit.defenses.dp.engine import layerwise
from privaudit.defenses.dp.engine.embedder import Embedder, Source
from privaudit.defenses.dp.engine.layerwise import (Call, LayerwiseSum, Tape, clip_unit_grads, model_layers,
    partition_grads, partition_unit_grads, record, row_owners, split_dense)
from privaudit.defenses.dp.engine.units import Units

GRAD_BYTES = 1 << 30  # one chunk's unit gradients (|T|, p)
ROW_BYTES = 2 << 30  # one chunk's recorded forward pass and its layer output gradients
TAPE_FACTOR = 3  # a recorded row holds each layer's output, its gradient and autograd's saved tensors
#: The budgets above keep a CPU host's step under 8 GB (ResNet-18 at batch 256). A CUDA device takes them once
#: per GPU_SHARE of its memory (an H200's 141 GB: 8 times, an H100's 80 GB: 4 times): fewer, larger chunks and
#: row blocks, which a GPU runs faster (the same sums in another float order).
GPU_SHARE = 16 << 30


def budget_scale(device: torch.device) -> int:
    """How many times :data:`GRAD_BYTES` and :data:`ROW_BYTES` a step on ``device`` may hold: 1 off CUDA, else
    the device's total memory / :data:`GPU_SHARE` (at least 1; fixed per device, so runs repeat)."""
    if device.type != "cuda":
        return 1
    return max(1, torch.cuda.get_device_properties(device).total_memory // GPU_SHARE)


def budgets(device: torch.device) -> tuple[int, int]:
    """(unit-gradient bytes, recorded-row bytes) one chunk may hold on ``device``."""
    scale = budget_scale(device)
    return GRAD_BYTES * scale, ROW_BYTES * scale


def row_bytes(embedder: Embedder, params: Mapping[str, torch.Tensor], source: Source) -> int:
    """Bytes one row of ``source`` takes in a recorded forward and backward: :data:`TAPE_FACTOR` x the
    outputs of the layers with parameters (measured once per tower and input shape by a forward of one row)."""
    if len(source) == 0:
        return 0
    cache = embedder.__dict__.setdefault("_row_bytes", {})
    key = (source.tower, tuple(source.x.shape[1:]), source.x.dtype)
    if key not in cache:
        total = [0]

        def count(module, inputs, output):
            total[0] += output[:1].numel() * output.element_size()

        handles = [layer.module.register_forward_hook(count) for layer in model_layers(embedder)]
        try:
            with torch.no_grad():
                embedder.embed(params, source.x[:1], source.tower)
        finally:
            for h in handles:
                h.remove()
        cache[key] = TAPE_FACTOR * total[0]
    return cache[key]


@dataclass(frozen=True)
class ChunkPlan:
    """How many units' gradients and how many rows' recorded passes are held at once."""

    units: int
    rows: int

    def describe(self, n_units: int, n_rows: int) -> str:
        return (f"chunked: {-(-n_units // self.units)} chunks of <= {self.units} units, rows recorded <= "
                f"{self.rows} at a time ({n_rows} rows)")


def chunk_plan(embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source]) -> ChunkPlan:
    """Units per chunk from :data:`GRAD_BYTES` / (p x element size); rows per chunk from :data:`ROW_BYTES`
    / :func:`row_bytes` (the costliest source's); both budgets times :func:`budget_scale` on a GPU."""
    ref = next(iter(params.values()))
    per_row = max([row_bytes(embedder, params, s) for s in sources] + [1])
    grad_bytes, rows_bytes = budgets(ref.device)
    return ChunkPlan(max(1, grad_bytes // (embedder.space.size * ref.element_size())), max(1, rows_bytes // per_row))


def records(embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source]) -> bool:
    """Whether one recorded forward pass of every row of ``sources`` fits in :data:`ROW_BYTES`."""
    return sum(len(s) for s in sources) <= chunk_plan(embedder, params, sources).rows


def single_pass(embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source],
                units: Units) -> bool:
    """Whether the layerwise engine's single pass fits: every unit's gradient at once and one recorded pass
    of the rows (dense units: the rows replicated min(U, D) times, within :data:`MEMORY_LIMIT` and
    :data:`ROW_LIMIT` of :mod:`~privaudit.defenses.dp.engine.layerwise` as well)."""
    plan = chunk_plan(embedder, params, sources)
    n_units, rows = len(units), sum(len(s) for s in sources)
    if not units.dense:
        return n_units <= plan.units and rows <= plan.rows
    if not units.cotangents:
        return True
    if n_units * embedder.space.size > layerwise.MEMORY_LIMIT:
        return False
    dim = int(units.cotangents[0].shape[-1])
    shared = sum(int((c.ne(0).any(-1).sum(0) > 1).sum()) for c in units.cotangents)
    replicated = min(n_units, dim) * shared
    return replicated <= layerwise.ROW_LIMIT and rows - shared + replicated <= plan.rows


def chunked_clipped_sum(embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source],
                        units: Units, clip: float, tape: Tape | None = None) -> LayerwiseSum:
    """sum_u w_u Clip_C(g_u) and ||g_u|| with units and rows in chunks (see the module docstring)."""
    plan = chunk_plan(embedder, params, sources)
    ref = next(iter(params.values()))
    n_units, size = len(units), embedder.space.size
    total = torch.zeros(size, dtype=ref.dtype, device=ref.device)
    norms = torch.zeros(n_units, dtype=ref.dtype, device=ref.device)
    entered = torch.zeros(n_units, dtype=ref.dtype, device=ref.device)
    if units.dense:
        split = split_dense(sources, units.cotangents)
        own = _Rows(embedder, params, split.own_sources, split.own_cotangents, split.own_owners, plan)
        shared = _SharedRows(embedder, params, split.shared_sources, split.shared_cotangents, plan)
    else:
        cots, owners = row_owners(units, sources)
        own, shared = _Rows(embedder, params, sources, cots, owners, plan, tape), None
    for lo in range(0, n_units, plan.units):
        hi = min(n_units, lo + plan.units)
        grads = torch.zeros(hi - lo, size, dtype=ref.dtype, device=ref.device)
        own.add(lo, hi, grads)
        if shared is not None:
            shared.add(lo, hi, grads)
        part = clip_unit_grads(grads, None if units.weights is None else units.weights[lo:hi], clip)
        total += part.total
        norms[lo:hi] = part.norms
        entered[lo:hi] = part.entered
        del grads
    return LayerwiseSum(total, norms, plan.describe(n_units, sum(len(s) for s in sources)), entered)


class _Rows:
    """Rows that partition units (owner -1: no unit): their unit gradients, chunk by chunk of units.

    Where every row fits in one recorded pass, the pass (``tape`` or a new one) and its backward run once
    and each unit chunk takes its rows of it; otherwise each unit chunk's rows are recorded and
    backpropagated in chunks of ``plan.rows``."""

    def __init__(self, embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source],
                 cots: Sequence[torch.Tensor], owners: Sequence[torch.Tensor], plan: ChunkPlan,
                 tape: Tape | None = None):
        self.embedder, self.params, self.sources, self.cots, self.owners = embedder, params, sources, cots, owners
        self.plan = plan
        self.tape, self.per = None, None
        if sources and sum(len(s) for s in sources) <= plan.rows:
            if tape is None or not tape.matches(params, sources):
                tape = record(embedder, params, sources)
            if tape.outputs():
                self.tape, self.per = tape, tape.output_grads(cots)

    def add(self, lo: int, hi: int, out: torch.Tensor) -> None:
        """Add the gradients of units lo..hi-1 to ``out`` (hi - lo, p)."""
        if not self.sources:
            return
        mine = [((o >= lo) & (o < hi)).nonzero().flatten() for o in self.owners]
        if self.tape is not None:
            tape, per, owners = _select(self.tape, self.per, mine, self.owners, lo)
            partition_grads(tape, self.params, self.embedder.space.names, per, owners, hi - lo, out)
            return
        for s, rows in enumerate(mine):
            for start in range(0, rows.numel(), self.plan.rows):
                idx = rows[start:start + self.plan.rows]
                src = (Source(self.sources[s].x[idx], self.sources[s].tower),)
                partition_unit_grads(self.embedder, self.params, src, (self.cots[s][idx],),
                                     (self.owners[s][idx] - lo,), hi - lo, out=out)


def _select(tape: Tape, per: Mapping[str, list[torch.Tensor]], rows: Sequence[torch.Tensor],
            owners: Sequence[torch.Tensor], lo: int) -> tuple[Tape, dict[str, list[torch.Tensor]], list[torch.Tensor]]:
    """The recorded pass and output gradients restricted to ``rows`` of each source, owners shifted by -lo."""
    pick = [_picker(r) for r in rows]
    calls = {layer.name: [Call(c.source, pick[c.source](c.inp), c.out) for c in tape.calls[layer.name]]
             for layer in tape.layers}
    grads = {layer.name: [pick[c.source](b) for c, b in zip(tape.calls[layer.name], per[layer.name])]
             for layer in tape.layers}
    view = Tape(tape.params, tape.sources, tape.zs, tape.layers, calls)
    return view, grads, [pick_(o) - lo for pick_, o in zip(pick, owners)]


def _picker(rows: torch.Tensor):
    """Rows ``rows`` (increasing) of a tensor: a view where they are consecutive, else a copy."""
    if rows.numel() and int(rows[-1]) - int(rows[0]) + 1 == rows.numel():
        start, count = int(rows[0]), rows.numel()
        return lambda t: t.narrow(0, start, count)
    return lambda t: t.index_select(0, rows)


class _SharedRows:
    """Rows in several dense units: each unit's gradient over them is one autograd backward pass with its
    own cotangents (every parameter's gradient at once, the encoder's own backward kernels), on one forward
    per chunk of rows (made once where they all fit)."""

    def __init__(self, embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source],
                 cots: Sequence[torch.Tensor], plan: ChunkPlan):
        self.embedder, self.params = embedder, params
        self.pieces: list[tuple[tuple[Source, ...], tuple[torch.Tensor, ...]]] = []
        if sum(len(s) for s in sources) <= plan.rows:
            if sources:
                self.pieces.append((tuple(sources), tuple(cots)))
        else:
            for s, c in zip(sources, cots):
                for start in range(0, len(s), plan.rows):
                    self.pieces.append(((Source(s.x[start:start + plan.rows], s.tower),),
                                        (c[:, start:start + plan.rows],)))
        self.graph = self._forward(self.pieces[0][0]) if len(self.pieces) == 1 else None

    def _forward(self, sources: Sequence[Source]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The parameters as leaves that require grad and the sources' embeddings in their graph."""
        leaves = {n: p.detach().requires_grad_(True) for n, p in self.params.items()}
        with torch.enable_grad():
            zs = [self.embedder.embed(leaves, s.x, s.tower) for s in sources]
        return [leaves[n] for n in self.embedder.space.names], zs

    def add(self, lo: int, hi: int, out: torch.Tensor) -> None:
        for sources, cots in self.pieces:
            leaves, zs = self.graph if self.graph is not None else self._forward(sources)
            for u in range(lo, hi):
                grads = torch.autograd.grad(zs, leaves, [c[u] for c in cots], retain_graph=True, allow_unused=True)
                out[u - lo] += torch.cat([torch.zeros_like(p).reshape(-1) if g is None else g.reshape(-1)
                                          for p, g in zip(leaves, grads)])
