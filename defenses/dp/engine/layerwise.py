"""Per-unit clipping from layer activations and output gradients ("book-keeping", no ``vmap`` over units).

The per-unit engine of :mod:`privaudit.defenses.dp.engine.gradients` differentiates the encoder once per unit
(``vmap(grad(.))``). For the layers small encoders are made of, a row's gradient is a closed form of
its layer input a_r and output gradient b_r (Bu et al. 2023 "book-keeping", Algorithm 1), one rule
per layer type (:mod:`privaudit.defenses.dp.engine.layer_rules`); for a unit of rows u the norm follows from the
Grams without the gradient: ||g_u||^2 = sum_{r,s in u} (a_r . a_s)(b_r . b_s) (Li et al. 2022 ghost norm).

Units (:mod:`privaudit.defenses.dp.engine.units`) come in two shapes, and both need one forward pass:

* partitions of the rows (view / example / group / batch units): ONE backward pass with every row's
  own cotangent gives every b_r; unit u's gradient g_u = sum_{r in u} (row r's rule) is summed over
  segments of at most w of u's rows (:func:`segments`), all segments at once: for a convolution
  sum_{r in s} sum_l b_{r,l} unfold(a_r)_l^T is the weight gradient of a convolution with S groups
  (segment s = group s, slot i of every segment = batch element i; the grouped-convolution trick of
  Opacus' grad samplers, summed over the batch within a group), for a linear layer one batched
  product. No per-row gradient (R x p) is materialised, only the S x p segment sums;
* dense units (loss terms through every embedding, DP-SGD Eq. 6 of DP-GCL): a row with a nonzero
  cotangent in one unit only (DP-SGD's anchor z_i, which enters its own term l_i alone) joins a
  partition (one backward pass for all of them); the rows shared by several units (the second views
  z'_j, in every term's denominator) go through one backward pass of min(U, D) copies, with the
  units' cotangents (U <= D) or the basis cotangents e_1..e_D (row Jacobians; unit t's gradient is
  then the combination sum_{r,d} c_{t,r,d} J_r^T e_d), and one contraction over the rows per layer.
  g_u is the sum of the two parts by linearity of J^T c in c. The copies are the cost floor of exact
  per-term clipping: term i's cotangent on the second view z'_j is a_ij (I - z^'_j z^'_j^T) z^_i / ||z'_j||
  (cosine InfoNCE), and over i these span R^D when B >= D, so no fewer than min(U, D) VJPs per shared
  row give every g_u. At DP-SGD's default (B = 32 terms, D = 32) a step backpropagates 32 + 32 x 32
  rows where a non-private step backpropagates 2 x 32.

Then the clipped sum sum_u w_u min(1, C / ||g_u||) g_u is one product of the (U, p) unit gradients
with the factors (no second backward pass). The maths is that of
:func:`privaudit.defenses.dp.engine.gradients.clipped_sum` exactly (tests compare the two to float tolerance). A model
with a trainable parameter in a layer without a rule, a parameter shared between modules, or units that
are neither a partition nor dense, is not supported: :func:`unsupported_reason` says why, and the
caller uses the ``vmap`` engine instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Sequence

import torch
import torch.nn as nn

from privaudit.defenses.dp.engine.embedder import Embedder, Source
from privaudit.defenses.dp.engine.layer_rules import Grads, LayerRule, layer_rule
from privaudit.defenses.dp.engine.units import Units


class Layer(NamedTuple):
    """A module with trainable parameters, its rule, and its parameters' full names by local name."""

    name: str
    module: nn.Module
    rule: LayerRule
    names: Mapping[str, str]  # local ("weight") -> full ("encoder.net.1.weight")

    def own(self, params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The layer's parameters in ``params``, by local name."""
        return {local: params[full] for local, full in self.names.items() if full in params}

    def qualify(self, grads: Grads) -> Grads:
        """Gradients by local name -> by full name."""
        return {self.names[local]: g for local, g in grads.items()}


def _layers(model: nn.Module, names: Sequence[str]) -> tuple[list[Layer], str | None]:
    """The modules owning trainable parameters, or the reason the layerwise engine cannot serve ``model``."""
    wanted, seen, layers = set(names), set(), []
    for mod_name, mod in model.named_modules():
        own = [(p, f"{mod_name}.{p}" if mod_name else p, t) for p, t in mod.named_parameters(recurse=False)]
        trainable = [(p, n) for p, n, t in own if t.requires_grad]
        if not trainable:
            continue
        for _, n in trainable:
            if n not in wanted:
                return [], f"parameter {n!r} is shared with another module"
            seen.add(n)
        rule = layer_rule(mod)
        if rule is None:
            return [], f"{mod_name or 'model'} ({type(mod).__name__}) has trainable parameters and no per-unit rule"
        reason = rule.unsupported(mod, mod_name)
        if reason is not None:
            return [], reason
        layers.append(Layer(mod_name, mod, rule, dict(trainable)))
    if seen != wanted:
        return [], f"parameters {sorted(wanted - seen)} are not owned by a module"
    return layers, None


def unsupported_reason(model: nn.Module, names: Sequence[str] | None = None) -> str | None:
    """None if the layerwise engine supports every trainable parameter of ``model``, else why not."""
    if names is None:
        names = [n for n, p in model.named_parameters() if p.requires_grad]
    return _layers(model, names)[1]


def engine_model_reason(embedder: Embedder) -> str | None:
    """:func:`unsupported_reason` for the embedder's model (cached on the embedder), or the vmap request."""
    if embedder.engine == "vmap":
        return "engine = 'vmap' requested"
    cache = embedder.__dict__.setdefault("_layerwise_reason", {})
    if "reason" not in cache:
        cache["reason"] = unsupported_reason(embedder.model, embedder.space.names)
    return cache["reason"]


MEMORY_LIMIT = 1 << 25  # floats of dense units' gradients in one pass (128 MB); beyond, in chunks (chunked.py)
ROW_LIMIT = 1 << 13  # rows of the replicated forward pass of dense units; beyond, in chunks


def units_reason(units: Units, n_params: int | None = None, auto: bool = False) -> str | None:
    """None for dense units or units that partition the rows, else why the layerwise engine does not clip
    them. ``auto``: also None only where the layerwise engine is the faster one.

    Dense units beyond the single pass's memory bounds go in chunks (:mod:`privaudit.defenses.dp.engine.chunked`),
    which ``auto`` takes: ``vmap`` would hold the same (chunk, p) gradients and backpropagate every row
    once per unit (U R rows), more than the chunks' R_own + U R_shared.
    """
    rows = sum(int(c.shape[-2]) for c in units.cotangents) if units.dense else (
        sum(int(o.numel()) for _, o in units.row_owners) if units.row_owners is not None else None)
    if n_params is not None and rows is not None:
        if units.dense:
            dim = int(units.cotangents[0].shape[-1])
            replicas = min(len(units), dim)
            beyond = len(units) * n_params > MEMORY_LIMIT or replicas * rows > ROW_LIMIT
            if auto and not beyond:
                # Rows through the backward: layerwise R_own + min(U, D) R_shared (_dense_unit_grads), vmap
                # U R; layerwise is the faster below about 3/4 of vmap's rows (CPU, docs/notes/defenses-attacks.md).
                shared = sum(int((c.ne(0).any(-1).sum(0) > 1).sum()) for c in units.cotangents)
                own_rows = rows - shared
                if 4 * (own_rows + replicas * shared) > 3 * len(units) * rows:
                    return (f"{len(units)} dense units for embedding dimension {dim} ({shared} of {rows} rows shared):"
                            " vmap is faster unless R_own + min(U, D) R_shared <= 3/4 U R")
    if units.dense or units.row_owners is not None:
        return None
    assert units.rows is not None
    for rows, cot in zip(units.rows, units.cotangents):
        if rows.numel() == 0:
            continue
        valid = cot.ne(0).any(-1)
        used = rows[valid]
        if used.numel() and int(torch.bincount(used).max()) > 1:
            return f"{units.kind} units share rows (not a partition)"
    return None


@dataclass
class Call:
    """One call of a layer: which source, its input and its output (in the autograd graph)."""

    source: int
    inp: torch.Tensor
    out: torch.Tensor


@dataclass
class Tape:
    """One recorded forward pass of the step's sources through the model."""

    params: Mapping[str, torch.Tensor]
    sources: tuple[Source, ...]
    zs: tuple[torch.Tensor, ...]
    layers: list[Layer]
    calls: dict[str, list[Call]] = field(default_factory=dict)

    def matches(self, params: Mapping[str, torch.Tensor], sources: Sequence[Source]) -> bool:
        return (len(sources) == len(self.sources) and all(a.x is b.x and a.tower == b.tower
                                                           for a, b in zip(sources, self.sources))
                and all(params[n] is self.params[n] for n in self.params) and len(params) == len(self.params))

    def outputs(self) -> list[torch.Tensor]:
        """Every recorded layer output, layer by layer and call by call."""
        return [call.out for layer in self.layers for call in self.calls[layer.name]]

    def output_grads(self, grad_outputs: Sequence[torch.Tensor], retain: bool = False) -> dict[str, list[torch.Tensor]]:
        """One backward pass from the embeddings with ``grad_outputs`` (one per source): every layer's
        output gradients, call by call (zeros where a call does not reach the embeddings). ``retain``
        keeps the forward graph for another backward pass."""
        outs = self.outputs()
        bs = torch.autograd.grad(list(self.zs), outs, grad_outputs=list(grad_outputs), allow_unused=True,
                                 retain_graph=retain)
        it = iter(torch.zeros_like(o) if b is None else b for b, o in zip(bs, outs))
        return {layer.name: [next(it) for _ in self.calls[layer.name]] for layer in self.layers}


def model_layers(embedder: Embedder) -> list[Layer]:
    """The embedder's modules with trainable parameters and their rules (cached: the module tree is fixed
    during a run); ValueError where the layerwise engine does not serve the model."""
    cache = embedder.__dict__.setdefault("_layerwise_layers", {})
    key = tuple(embedder.space.names)
    if key not in cache:
        cache[key] = _layers(embedder.model, key)
    layers, reason = cache[key]
    if reason is not None:
        raise ValueError(f"layerwise engine: {reason}")
    return layers


def record(embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source]) -> Tape:
    """Forward every source once, keeping each supported layer's input and output in a graph."""
    layers = model_layers(embedder)
    # The parameters stay out of the graph (their gradients come from the layer rules): the graph starts
    # at the first recorded layer's output, so backward computes input gradients only.
    leaves = {n: p.detach() for n, p in params.items()}
    calls: dict[str, list[Call]] = {layer.name: [] for layer in layers}
    current = [0]

    def hook(name):
        def fn(module, inputs, output):
            if not output.requires_grad:
                output.requires_grad_(True)
            calls[name].append(Call(current[0], inputs[0].detach(), output))
        return fn

    handles = [layer.module.register_forward_hook(hook(layer.name)) for layer in layers]
    try:
        zs = []
        with torch.enable_grad():
            for k, s in enumerate(sources):
                current[0] = k
                zs.append(embedder.embed(leaves, s.x, s.tower))
    finally:
        for h in handles:
            h.remove()
    return Tape(dict(params), tuple(sources), tuple(zs), layers, calls)


# -- the clipped sum -----------------------------------------------------------------------------------

@dataclass
class LayerwiseSum:
    """sum_u scale_u g_u (flat), the unit norms and how the pass was cut (chunks, where there were any)."""

    total: torch.Tensor
    norms: torch.Tensor
    detail: str = ""
    entered: torch.Tensor | None = None  # ||Clip_C(g_u)|| as each unit entered the sum (before its weight)


def row_owners(units: Units, sources: Sequence[Source]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per source: every row's cotangent (R_s, D) and its unit index (R_s,), -1 for rows in no unit."""
    if units.row_owners is not None:
        return [c for c, _ in units.row_owners], [o for _, o in units.row_owners]
    assert units.rows is not None
    cots, owners = [], []
    for s, (rows, cot) in enumerate(zip(units.rows, units.cotangents)):
        r_s = len(sources[s])
        d = cot.shape[-1]
        c = torch.zeros(r_s, d, dtype=cot.dtype, device=cot.device)
        own = torch.full((r_s,), -1, dtype=torch.long, device=cot.device)
        if rows.numel():
            valid = cot.ne(0).any(-1)
            u_idx = torch.arange(rows.shape[0], device=cot.device)[:, None].expand_as(rows)
            c[rows[valid]] = cot[valid]
            own[rows[valid]] = u_idx[valid]
        cots.append(c)
        owners.append(own)
    return cots, owners


def layerwise_clipped_sum(embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source],
                          units: Units, clip: float, chunk: int = 64, tape: Tape | None = None) -> LayerwiseSum:
    """sum_u w_u Clip_C(g_u) and ||g_u|| for every unit, from one forward and one (batched) backward pass
    (where that does not fit in memory: :func:`privaudit.defenses.dp.engine.chunked.chunked_clipped_sum`)."""
    if units.dense:
        grads = _dense_unit_grads(embedder, params, sources, units.cotangents)
    else:
        cots, owners = row_owners(units, sources)
        grads = partition_unit_grads(embedder, params, sources, cots, owners, len(units), tape)
    return clip_unit_grads(grads, units.weights, clip)


def clip_unit_grads(grads: torch.Tensor, weights: torch.Tensor | None, clip: float) -> LayerwiseSum:
    """sum_u w_u min(1, C / ||g_u||) g_u from the unit gradients (U, p) and weights w (U,) (None: 1)."""
    from privaudit.defenses.dp.engine.clipping import clip_factors

    nrm = torch.linalg.vector_norm(grads, dim=1)
    factors = clip_factors(nrm, clip)
    scale = factors if weights is None else factors * weights.to(factors)
    return LayerwiseSum(scale @ grads, nrm, entered=factors * nrm)


def partition_unit_grads(embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source],
                          cots: Sequence[torch.Tensor], owners: Sequence[torch.Tensor], n_units: int,
                          tape: Tape | None = None, out: torch.Tensor | None = None,
                          retain: bool = False) -> torch.Tensor:
    """(U, p): g_u = sum_{r: owner(r) = u} J_r^T c_r, from one forward (or ``tape``) and ONE backward
    pass carrying every row's own cotangent c_r (rows are independent through the encoder). With
    ``out`` the gradients are added to it; ``retain`` keeps ``tape``'s graph for another backward pass."""
    ref = next(iter(params.values()))
    if tape is None or not tape.matches(params, sources):
        tape = record(embedder, params, sources)
    if n_units == 0 or not tape.outputs():
        return torch.zeros(n_units, embedder.space.size, dtype=ref.dtype, device=ref.device) if out is None else out
    per = tape.output_grads(cots, retain)
    return partition_grads(tape, params, embedder.space.names, per, owners, n_units, out)


SEGMENT_LIMIT = 1 << 23  # gathered activation / patch entries per chunk of segments (memory bound)


@dataclass
class Segments:
    """The rows of a partition cut into segments of at most ``width`` rows of one unit each.

    ``index`` (S, width) holds row indices, padded with ``pad`` (the number of rows: an appended zero
    output gradient, so padding adds exactly zero); ``unit`` (S,) is each segment's unit. Unit u's
    gradient at a layer is the sum of its segments' gradients, and a segment's gradient is one small
    matrix product over its rows (and output positions), so all of them are one batched product.
    """

    index: torch.Tensor
    unit: torch.Tensor
    pad: int
    one_per_unit: bool  # segment s is unit s (the unit sum is the identity)


def segments(owners: torch.Tensor, n_units: int, width: int | None = None) -> Segments:
    """Cut the rows owned by units 0..n_units-1 (owner -1: no unit) into segments of ``width`` rows.

    ``width`` defaults to the largest unit's rows (one segment per unit) where that at most doubles
    the rows, else to the mean number of rows per unit (rounded up), which keeps the padding under
    one segment per unit; a unit of m rows gets ceil(m / width) segments.
    """
    device = owners.device
    rows = (owners >= 0).nonzero().flatten()
    unit = owners[rows]
    order = torch.argsort(unit, stable=True)
    rows, unit = rows[order], unit[order]
    counts = torch.bincount(unit, minlength=n_units)
    if width is None:  # one segment per unit (no sum over segments) unless that pads the rows over 2x
        largest = int(counts.max()) if n_units else 1
        width = largest if n_units * largest <= 2 * rows.numel() else -(-rows.numel() // max(1, n_units))
        width = max(1, width)
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(rows.numel(), device=device) - starts[unit]
    n_seg = (counts + width - 1) // width
    seg_start = torch.cumsum(n_seg, 0) - n_seg
    total = int(n_seg.sum())
    index = torch.full((total, width), owners.numel(), dtype=torch.long, device=device)
    index[seg_start[unit] + pos // width, pos % width] = rows
    seg_unit = torch.repeat_interleave(torch.arange(n_units, device=device), n_seg)
    return Segments(index, seg_unit, owners.numel(), total == n_units and bool((n_seg == 1).all()))


def _unit_sums(rows: torch.Tensor, slot: torch.Tensor, n_units: int) -> torch.Tensor:
    """(U, ...): per-row quantities (R, ...) summed into units; ``slot`` (R,) is each row's unit, or
    ``n_units`` for rows in no unit (a dropped slot)."""
    return rows.new_zeros(n_units + 1, *rows.shape[1:]).index_add_(0, slot, rows)[:n_units]


def partition_grads(tape: Tape, params: Mapping[str, torch.Tensor], names: Sequence[str],
                     per: Mapping[str, list[torch.Tensor]], owners: Sequence[torch.Tensor], n_units: int,
                     out: torch.Tensor | None = None) -> torch.Tensor:
    """Partition units: every unit's gradient (U, p) straight from the rows' layer inputs and output
    gradients ``per`` (by layer, call by call), layer by layer (:func:`_layer_partition_grads`).
    With ``out`` (U, p), the gradients are added to it layer by layer (no second (U, p) copy)."""
    ref = next(iter(params.values()))
    offsets = _offsets(params, names) if out is not None else {}
    grads: dict[str, torch.Tensor] = {}
    cache: dict[tuple[int, ...], tuple[Segments, torch.Tensor]] = {}
    for layer in tape.layers:
        calls = tape.calls[layer.name]
        if not calls:  # a layer these rows do not pass through (the other tower): gradient zero
            continue
        key = tuple(c.source for c in calls)
        if key not in cache:
            own = torch.cat([owners[k] for k in key])
            cache[key] = segments(own, n_units), torch.where(own >= 0, own, n_units)
        seg, slot = cache[key]
        a = torch.cat([c.inp for c in calls]) if len(calls) > 1 else calls[0].inp
        bs = per[layer.name]
        b = torch.cat(bs) if len(bs) > 1 else bs[0]
        layer_grads = layer.qualify(_layer_partition_grads(layer, layer.own(params), a, b, seg, slot, n_units))
        if out is None:
            grads.update(layer_grads)
            continue
        for n, g in layer_grads.items():
            lo, hi = offsets[n]
            out[:, lo:hi].add_(g.reshape(n_units, -1))
    if out is not None:
        return out
    return torch.cat([grads[n].reshape(n_units, -1) if n in grads else ref.new_zeros(n_units, params[n].numel())
                      for n in names], dim=1)


def _offsets(params: Mapping[str, torch.Tensor], names: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Each parameter's slice [lo, hi) of the flat layout of ``names``."""
    out, start = {}, 0
    for n in names:
        out[n] = (start, start + params[n].numel())
        start += params[n].numel()
    return out


def _layer_partition_grads(layer: Layer, own: Mapping[str, torch.Tensor], a: torch.Tensor, b: torch.Tensor,
                           seg: Segments, slot: torch.Tensor, n_units: int) -> Grads:
    """One layer's unit gradients (U, *shape) by local name, for rows with inputs a and output gradients b.

    Unit u's gradient is sum_{r in u} (row r's layer rule). The rule's segmented parameters (the weights
    of linear and convolution layers): sums over segments of u's rows (:func:`segments`), one batched
    product per chunk of segments, no per-row gradients (R x p) materialised; the padding is a zero row
    appended to the smaller of a and b. The other parameters (biases, group norm): per-row rules summed
    into units directly. A parameter left out (no unit has a row through the layer) has gradient zero.
    """
    rule, mod = layer.rule, layer.module
    per_row = {k: v for k, v in own.items() if k not in rule.segmented}
    out = {k: _unit_sums(g, slot, n_units) for k, g in rule.row_grads(mod, per_row, a, b).items()} if per_row else {}
    segmented = [k for k in rule.segmented if k in own]
    n_seg, width = seg.index.shape
    if not segmented or n_seg == 0:
        return out
    if a[:1].numel() <= b[:1].numel():  # pad the smaller one with the zero row
        a = torch.cat([a, a.new_zeros(1, *a.shape[1:])])
    else:
        b = torch.cat([b, b.new_zeros(1, *b.shape[1:])])
    step = max(1, SEGMENT_LIMIT // max(1, a[:1].numel() * width))  # segments per chunk
    for k in segmented:
        parts = [rule.segment_grads(mod, own, k, a, b, seg.index[lo:lo + step]) for lo in range(0, n_seg, step)]
        v = torch.cat(parts) if len(parts) > 1 else parts[0]
        if not seg.one_per_unit:
            v = v.new_zeros(n_units, *v.shape[1:]).index_add_(0, seg.unit, v)
        out[k] = rule.parametrisation_vjp(mod, own, k, v)
    return out


def _dense_unit_grads(embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source],
                      cotangents: Sequence[torch.Tensor]) -> torch.Tensor:
    """(U, p): g_u = sum_r J_r^T c_{u,r} for dense cotangents (U, R_s, D) per source.

    The rows split in two: a row with a nonzero cotangent in at most one unit ("own" row: DP-SGD's
    anchor z_i appears only in its own InfoNCE term l_i, DP-GCL Eq. 6) contributes J_r^T c_{u(r),r} to
    that unit alone (a row in no unit contributes nothing), so all own rows take ONE backward pass as a partition
    (:func:`partition_unit_grads`); only the rows shared by several units (the positives/negatives
    z'_j of every term) need the replicated backward of :func:`_replicated_unit_grads`. The sum is
    the same g_u (linearity of the VJP in the cotangent), at the cost of min(U, D) copies of the shared
    rows only.
    """
    ref = next(iter(params.values()))
    n_units = int(cotangents[0].shape[0]) if cotangents else 0
    grads = torch.zeros(n_units, embedder.space.size, dtype=ref.dtype, device=ref.device)
    if n_units == 0:
        return grads
    split = split_dense(sources, cotangents)
    if split.own_sources:
        grads += partition_unit_grads(embedder, params, split.own_sources, split.own_cotangents, split.own_owners,
                                      n_units)
    if split.shared_sources:
        grads += _replicated_unit_grads(embedder, params, split.shared_sources, split.shared_cotangents)
    return grads


@dataclass
class DenseSplit:
    """Dense units' rows split into own rows (a nonzero cotangent in one unit: a partition) and shared rows."""

    own_sources: list[Source]
    own_cotangents: list[torch.Tensor]  # (R_s,  D): each own row's one nonzero cotangent
    own_owners: list[torch.Tensor]  # (R_s,): its unit
    shared_sources: list[Source]
    shared_cotangents: list[torch.Tensor]  # (U, R_s, D)


def split_dense(sources: Sequence[Source], cotangents: Sequence[torch.Tensor]) -> DenseSplit:
    """Own and shared rows of dense cotangents (U, R_s, D) per source; rows in no unit are dropped."""
    split = DenseSplit([], [], [], [], [])
    for s, c in zip(sources, cotangents):
        touched = c.ne(0).any(-1)  # (U, R_s)
        count = touched.sum(0)
        own = (count == 1).nonzero().flatten()  # rows in no unit contribute nothing
        shared = (count > 1).nonzero().flatten()
        if own.numel():
            split.own_sources.append(Source(s.x[own], s.tower))
            split.own_cotangents.append(c[:, own].sum(0))  # the one nonzero term of each row
            split.own_owners.append(touched[:, own].to(torch.int8).argmax(0))
        if shared.numel():
            split.shared_sources.append(Source(s.x[shared], s.tower))
            split.shared_cotangents.append(c[:, shared])
    return split


def _replicated_unit_grads(embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source],
                           cotangents: Sequence[torch.Tensor]) -> torch.Tensor:
    """Dense units: the rows' Jacobians from one forward/backward of the rows replicated V = min(U, D) times.

    With V = D the copies carry the basis cotangents e_1..e_D, so copy d's output gradient at a layer
    is M_{r,d} (row r's Jacobian of the layer output, applied to e_d); with V = U the copies carry the
    units' own cotangents (:func:`_call_unit_grads`).
    (A batched backward, ``is_grads_batched``, gives the same numbers but loops over the batch in
    convolution and group-norm backward on CPU.)
    """
    n_units = int(cotangents[0].shape[0])
    dim = cotangents[0].shape[-1]
    basis = dim < n_units
    v = dim if basis else n_units
    rep = tuple(Source(s.x.repeat(v, *([1] * (s.x.dim() - 1))), s.tower) for s in sources)
    tape = record(embedder, params, rep)
    grad_out = []
    for s, c in zip(sources, cotangents):
        r_s = len(s)
        if basis:
            eye = torch.eye(dim, dtype=c.dtype, device=c.device)
            grad_out.append(eye[:, None, :].expand(dim, r_s, dim).reshape(dim * r_s, dim))
        else:
            grad_out.append(c.reshape(n_units * r_s, dim))
    per = tape.output_grads(grad_out)
    grads: dict[str, torch.Tensor] = {}
    for layer in tape.layers:
        own = layer.own(params)
        per_unit: dict[str, torch.Tensor] = {}
        for call, b in zip(tape.calls[layer.name], per[layer.name]):
            r_s = len(sources[call.source])
            g = _call_unit_grads(layer, own, call, b.reshape(v, r_s, *b.shape[1:]), cotangents[call.source], basis)
            for k, val in g.items():
                per_unit[k] = per_unit[k] + val if k in per_unit else val
        grads.update(layer.qualify({k: layer.rule.parametrisation_vjp(layer.module, own, k, g)
                                    for k, g in per_unit.items()}))
    return embedder.space.flatten(grads, lead=1)


def _call_unit_grads(layer: Layer, own: Mapping[str, torch.Tensor], call: Call, b: torch.Tensor, c: torch.Tensor,
                     basis: bool) -> Grads:
    """Unit gradients (U, *shape) of one call's R rows from their replicated output gradients b (V, R, ...)
    and the units' cotangents c (U, R, D).

    Copies carrying the units' cotangents: the rule's per-unit sums. Copies carrying the basis: unit t's
    gradient is either sum_r (sum_d c_{t,r,d} M_{r,d}) a_r^T (contract the cotangents first) or
    sum_{r,d} c_{t,r,d} (M_{r,d} a_r^T) (per-row Jacobians first), whichever needs fewer products.
    """
    rule, mod = layer.rule, layer.module
    n_units, r_s, dim = c.shape
    a0 = call.inp[:r_s]
    if not basis:
        return rule.unit_grads(mod, own, a0, b)
    positions, cols = rule.cost(mod, call.out, r_s * dim)
    numel = b[0, 0].numel() // positions  # output channels
    contract_first = n_units * r_s * dim * numel * positions + n_units * r_s * positions * numel * cols
    jacobian_first = dim * r_s * numel * positions * cols + n_units * dim * r_s * numel * cols
    if contract_first <= jacobian_first:
        return rule.unit_grads(mod, own, a0, torch.einsum("trd,dr...->tr...", c, b))
    rows_j = rule.basis_row_grads(mod, own, a0, b)  # (D, R, ...)
    coef = c.permute(0, 2, 1).reshape(n_units, dim * r_s)
    return {k: torch.tensordot(coef, j.reshape(dim * r_s, *j.shape[2:]), dims=1) for k, j in rows_j.items()}


def row_jacobians(embedder: Embedder, params: Mapping[str, torch.Tensor], source: Source) -> torch.Tensor:
    """J (R, D, p): each row's Jacobian of its embedding with respect to the flat parameters.

    One forward/backward of the rows replicated D times with the basis cotangents e_1..e_D (copy d
    holds row r's Jacobian applied to e_d at every layer), then the per-row layer rules on the D x R
    rows. Same numbers as :func:`privaudit.defenses.dp.engine.pairs.per_sample_jacobians` (``vmap`` of D VJPs per row).
    """
    space = embedder.space
    r = len(source)
    with torch.no_grad():
        dim = embedder.embed(params, source.x[:1], source.tower).shape[-1]
    rep = Source(source.x.repeat(dim, *([1] * (source.x.dim() - 1))), source.tower)
    tape = record(embedder, params, (rep,))
    (z,) = tape.zs
    eye = torch.eye(dim, dtype=z.dtype, device=z.device)
    per = tape.output_grads([eye[:, None, :].expand(dim, r, dim).reshape(dim * r, dim)])
    per_param: dict[str, torch.Tensor] = {}
    for layer in tape.layers:
        (call,) = tape.calls[layer.name]
        (b,) = per[layer.name]
        own, rule = layer.own(params), layer.rule
        rows = rule.basis_row_grads(layer.module, own, call.inp[:r], b.reshape(dim, r, *call.out.shape[1:]))
        per_param.update(layer.qualify({k: rule.parametrisation_vjp(layer.module, own, k, g) for k, g in rows.items()}))
    flat = torch.cat([per_param[n].reshape(dim, r, -1) for n in space.names], dim=-1)  # (D, R, p)
    return flat.transpose(0, 1).contiguous()
