"""Pieces the DP methods share around the engine: views, embeddings, loss cotangents.

The loss is always evaluated on *detached* embeddings, so its gradient with respect to the
embeddings (the cotangents of :mod:`defenses.dp.units`) comes from one small autograd call and the
encoder is differentiated only by the per-unit engine.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Sequence

import torch
from torch.func import jacrev

from defenses.dp.embedder import Source
from defenses.dp.randomness import StepRandomness
from defenses.losses import barlow_twins, info_nce, nt_xent, spreadout

# The DP methods use summed losses (DP-GCL Eqs. 4-13, Logit-DP Eq. 1): the sum is what the
# sensitivity analyses bound; a data-independent normaliser is applied after the noise.
BATCH_OBJECTIVES = ("infonce", "simclr", "barlow", "spreadout")


def batch_objective(name: str, temperature: float, barlow_lambda: float) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if name == "infonce":
        return partial(info_nce, temperature=temperature, reduction="sum")
    if name == "simclr":
        return partial(nt_xent, temperature=temperature, reduction="sum")
    if name == "barlow":
        return partial(barlow_twins, lambd=barlow_lambda, reduction="sum")
    if name == "spreadout":
        return partial(spreadout, reduction="sum")
    raise ValueError(f"no batch objective {name!r}")


def two_views(ctx, x: torch.Tensor, rnd: StepRandomness) -> tuple[torch.Tensor, torch.Tensor]:
    """The positive pair of every example: two independent augmentations (position-stable draws)."""
    return rnd.views(ctx.augment, x, "view1"), rnd.views(ctx.augment, x, "view2")


@torch.no_grad()
def embed(ctx, sources: Sequence[Source]) -> tuple[torch.Tensor, ...]:
    """Embeddings of every source at the step's parameters (no graph)."""
    return ctx.embedder.embed_sources(ctx.params, sources)


def loss_cotangents(loss_fn: Callable[..., torch.Tensor], zs: Sequence[torch.Tensor]
                    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """(L, dL/dz for every embedding tensor) with L = loss_fn(*zs) on detached embeddings."""
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
