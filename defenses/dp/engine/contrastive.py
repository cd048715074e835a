"""Pieces the DP methods share around the engine: views, embeddings, loss cotangents.

The loss is always evaluated on *detached* embeddings, so its gradient with respect to the
embeddings (the cotangents of :mod:`privaudit.defenses.dp.engine.units`) comes from one small autograd call and the
encoder is differentiated only by the per-unit engine.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import torch
from torch.func import jacrev

from privaudit.defenses.dp.engine.embedder import Source
from privaudit.defenses.dp.release.randomness import StepRandomness


def two_views(ctx, x: torch.Tensor, rnd: StepRandomness) -> tuple[torch.Tensor, torch.Tensor]:
    """The positive pair of every example: two independent augmentations (position-stable draws)."""
    return rnd.views(ctx.augment, x, "view1"), rnd.views(ctx.augment, x, "view2")


def embed_views(ctx, x: torch.Tensor, rnd: StepRandomness, record: bool = True
                ) -> tuple[tuple[Source, ...], torch.Tensor]:
    """The batch's two views stacked as one source [view 1; view 2] (2B rows) and their embeddings
    (:func:`embed`; ``record`` as there)."""
    v1, v2 = two_views(ctx, x, rnd)
    sources = (Source(torch.cat([v1, v2])),)
    (z,) = embed(ctx, sources, record=record)
    return sources, z


_TRACKING = [0]


@contextmanager
def differentiable_quantities() -> Iterator[None]:
    """Keep the autograd graph from the step's inputs (and parameters) to its privatized quantities.

    Training needs no such graph: embeddings are computed without one and the loss is differentiated
    on detached embeddings. The sensitivity checks differentiate ||f(D) - f(D')|| with respect to the
    inputs, so inside this context :func:`embed` records the graph, :func:`loss_cotangents` builds
    dL/dz with ``create_graph=True`` (a double backward), and the per-unit engine's
    ``vmap(grad(.))`` runs on tensors that carry the outer graph -- the per-unit gradients, their
    norms and the clipping factors min(1, C / ||g||) (piecewise smooth) are then differentiable.
    The values are identical to the untracked computation.
    """
    _TRACKING[0] += 1
    try:
        with torch.enable_grad():
            yield
    finally:
        _TRACKING[0] -= 1


def tracking() -> bool:
    """Whether :func:`differentiable_quantities` is active."""
    return _TRACKING[0] > 0


def embed(ctx, sources: Sequence[Source], record: bool = True) -> tuple[torch.Tensor, ...]:
    """Embeddings of every source at the step's parameters (no graph unless :func:`tracking`).

    ``record=False``: the step's clipped sum will not reuse this forward pass (dense units replicate
    the rows), so none is recorded.
    """
    if tracking():
        return ctx.embedder.embed_sources(ctx.params, sources)
    from privaudit.defenses.dp.engine.chunked import records
    from privaudit.defenses.dp.engine.layerwise import engine_model_reason, record

    if record and engine_model_reason(ctx.embedder) is None and records(ctx.embedder, ctx.params, sources):
        # Record the forward pass once; the layerwise engine's clipped sum reuses it (no second forward).
        # (A pass too large to record whole is recorded in chunks of rows by the engine: defenses.dp.engine.chunked.)

        tape = record(ctx.embedder, ctx.params, sources)
        ctx.embedder.tape = tape
        return tuple(z.detach() for z in tape.zs)
    with torch.no_grad():
        return ctx.embedder.embed_sources(ctx.params, sources)


def loss_cotangents(loss_fn: Callable[..., torch.Tensor], zs: Sequence[torch.Tensor]
                    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """(L, dL/dz for every embedding tensor) with L = loss_fn(*zs) on detached embeddings.

    Under :func:`tracking` the embeddings keep their graph and dL/dz is itself differentiable.
    """
    if tracking():
        leaves = [z if z.requires_grad else z.detach().requires_grad_(True) for z in zs]
        loss = loss_fn(*leaves)
        grads = torch.autograd.grad(loss, leaves, allow_unused=True, create_graph=True)
        cots = tuple(torch.zeros_like(z) if g is None else g for z, g in zip(leaves, grads))
        return loss.detach(), cots
    leaves = [z.detach().requires_grad_(True) for z in zs]
    with torch.enable_grad():
        loss = loss_fn(*leaves)
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    cots = tuple(torch.zeros_like(z) if g is None else g for z, g in zip(leaves, grads))
    return loss.detach(), cots


def term_cotangents(terms_fn: Callable[..., torch.Tensor], zs: Sequence[torch.Tensor]
                    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """(terms (T,), d term_t / dz for every embedding tensor, each (T, *z.shape)) via ``jacrev``."""
    zs = tuple(z.detach() for z in zs)
    terms = terms_fn(*zs)
    jac = jacrev(terms_fn, argnums=tuple(range(len(zs))))(*zs)
    return terms, tuple(jac)
