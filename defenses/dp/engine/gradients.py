"""Per-unit gradients and their clipped sum, vectorised with ``torch.func``.

Given the cotangents of :class:`~privaudit.defenses.dp.engine.units.Units`, unit u's gradient g_u = sum_r J_r^T c_{u,r}
is computed without a Python loop over units:

* gathered units (view, example, group, batch, pair): ``vmap(grad(surrogate))`` over units, where
  the surrogate l_u(theta) = sum_k <f_theta(x_{rows[u,k]}), c_{u,k}> sees only the unit's rows (the
  detached-embedding-gradient trick of the field notes: one extra forward/backward per row);
* dense units (loss terms): one forward, then ``vmap`` of its vector-Jacobian product over the
  units' cotangents (one batched backward per chunk of units).

Units are processed in chunks of ``chunk`` so memory stays at chunk x p; the clipped sum
sum_u w_u * min(1, C / ||g_u||) * g_u is accumulated chunk by chunk.

:func:`clipped_sum` computes the same sum with the layerwise engine (:mod:`privaudit.defenses.dp.engine.layerwise`: one
forward and one backward pass, per-unit gradients from layer activations) whenever it applies, and
with ``vmap`` otherwise: models with layers it has no rule for, units that share rows (Logit-DP's
pairs), and the differentiable evaluation of the sensitivity checks. ``ClippedSum.engine`` says which
ran and, for ``vmap``, why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import torch
from torch.func import grad, vjp, vmap

from privaudit.defenses.dp.engine.clipping import clip_factors, clipped_fraction
from privaudit.defenses.dp.engine.embedder import Embedder, Source
from privaudit.defenses.dp.engine.units import Units

ENGINES = ("auto", "layerwise", "vmap")
log = logging.getLogger(__name__)
_WARNED: set[str] = set()


def unit_gradients(embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source], units: Units,
                   chunk: int = 64) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start, G)`` with G (k, p) the flat gradients of units[start:start + k]."""
    if chunk <= 0:
        raise ValueError(f"chunk: must be > 0, got {chunk}")
    space = embedder.space
    n = len(units)
    if n == 0:
        return
    if units.dense:
        _, vjp_fn = vjp(lambda p: embedder.embed_sources(p, sources), dict(params))
        batched = vmap(vjp_fn)
        for start in range(0, n, chunk):
            (g,) = batched(tuple(c[start:start + chunk] for c in units.cotangents))
            yield start, space.flatten(g, lead=1)
        return

    assert units.rows is not None
    active = [s for s in range(len(sources)) if units.rows[s].shape[1] > 0]
    towers = [sources[s].tower for s in active]

    def surrogate(p, xs, cs):
        total = 0.0
        for x, c, tower in zip(xs, cs, towers):
            total = total + (embedder.embed(p, x, tower) * c).sum()
        return total

    per_unit = vmap(grad(surrogate), in_dims=(None, 0, 0))
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        xs = tuple(sources[s].x[units.rows[s][start:stop]] for s in active)
        cs = tuple(units.cotangents[s][start:stop] for s in active)
        yield start, space.flatten(per_unit(dict(params), xs, cs), lead=1)


def all_unit_gradients(embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source],
                       units: Units, chunk: int = 64) -> torch.Tensor:
    """Every unit's flat gradient, stacked (U, p) (for tests and small problems)."""
    parts = [g for _, g in unit_gradients(embedder, params, sources, units, chunk)]
    if not parts:
        return torch.zeros(0, embedder.space.size)
    return torch.cat(parts)


@dataclass
class ClippedSum:
    """sum_u w_u Clip_C(g_u) with the unit norms ||g_u|| it was computed from."""

    total: torch.Tensor
    norms: torch.Tensor
    clip: float
    kind: str
    engine: str = "vmap"
    detail: str = ""  # the layerwise engine's chunks, where memory made it cut the step (defenses.dp.engine.chunked)
    entered: torch.Tensor | None = None  # ||Clip_C(g_u)|| as each unit entered the sum (the factor applied)

    @property
    def entered_max(self) -> float:
        """The largest clipped unit norm that entered the sum (before the unit's weight): at most the clip the
        claim's sensitivity was derived from, whatever clip the code actually applied (the trace checks it)."""
        if self.entered is None or not self.entered.numel():
            return 0.0
        return float(self.entered.max())

    @property
    def n_units(self) -> int:
        return int(self.norms.numel())

    @property
    def clipped_fraction(self) -> float:
        return clipped_fraction(self.norms, self.clip)


def engine_reason(embedder: Embedder, units: Units | None = None, engine: str | None = None) -> str | None:
    """None if the layerwise engine serves this model (and these units), else why ``vmap`` is used.

    Under ``auto`` (the default) it is used only where it measured faster than ``vmap`` on CPU.
    """
    from privaudit.defenses.dp.engine.contrastive import tracking
    from privaudit.defenses.dp.engine.layerwise import engine_model_reason, units_reason

    if tracking():
        return "differentiable evaluation (sensitivity checks) runs through torch.func"
    reason = engine_model_reason(embedder)
    if reason is None and units is not None:
        auto = (embedder.engine if engine is None else engine) == "auto"
        reason = units_reason(units, embedder.space.size, auto=auto)
    return reason


def clipped_sum(embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source], units: Units,
                clip: float, chunk: int = 64, engine: str | None = None) -> ClippedSum:
    """Clip every unit gradient to norm ``clip``, weight it by ``units.weights`` and sum.

    ``engine``: ``auto`` (layerwise where it applies, else vmap), ``layerwise`` (error where it does
    not apply) or ``vmap`` (the reference); None: the embedder's ``engine``.
    """
    engine = embedder.engine if engine is None else engine
    if engine not in ENGINES:
        raise ValueError(f"engine: {engine!r} not in {ENGINES}")
    tape, embedder.tape = embedder.tape, None
    if engine != "vmap":
        reason = engine_reason(embedder, units, engine)
        if reason is None:
            from privaudit.defenses.dp.engine.chunked import chunked_clipped_sum, single_pass
            from privaudit.defenses.dp.engine.layerwise import layerwise_clipped_sum

            if single_pass(embedder, params, sources, units):
                out = layerwise_clipped_sum(embedder, params, sources, units, clip, chunk, tape)
            else:  # the single pass would not fit in memory: units and rows in chunks
                out = chunked_clipped_sum(embedder, params, sources, units, clip, tape)
            return ClippedSum(out.total, out.norms, clip, units.kind, "layerwise", out.detail, out.entered)
        if engine == "layerwise":
            raise ValueError(f"layerwise engine: {reason}")
        if reason not in _WARNED:
            _WARNED.add(reason)
            log.info("per-unit gradients with vmap (the layerwise engine does not apply: %s)", reason)
        return _vmap_clipped_sum(embedder, params, sources, units, clip, chunk, f"vmap ({reason})")
    return _vmap_clipped_sum(embedder, params, sources, units, clip, chunk, "vmap")


def _vmap_clipped_sum(embedder: Embedder, params: Mapping[str, torch.Tensor], sources: Sequence[Source],
                      units: Units, clip: float, chunk: int, engine: str) -> ClippedSum:
    ref = next(iter(params.values()))
    total = torch.zeros(embedder.space.size, dtype=ref.dtype, device=ref.device)
    norms = torch.zeros(len(units), dtype=ref.dtype, device=ref.device)
    entered = torch.zeros(len(units), dtype=ref.dtype, device=ref.device)
    for start, g in unit_gradients(embedder, params, sources, units, chunk):
        stop = start + g.shape[0]
        nrm = torch.linalg.vector_norm(g, dim=1)
        factors = clip_factors(nrm, clip)
        scale = factors if units.weights is None else factors * units.weights[start:stop].to(factors)
        total += scale @ g
        norms[start:stop] = nrm
        entered[start:stop] = factors * nrm
    return ClippedSum(total, norms, clip, units.kind, engine, entered=entered)


def zero_sum(embedder: Embedder, params: Mapping[str, torch.Tensor], clip: float, kind: str) -> ClippedSum:
    """The clipped sum of an empty batch."""
    ref = next(iter(params.values()))
    return ClippedSum(torch.zeros(embedder.space.size, dtype=ref.dtype, device=ref.device),
                      torch.zeros(0, dtype=ref.dtype, device=ref.device), clip, kind)
