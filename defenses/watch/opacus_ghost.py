"""Opacus' fast gradient (ghost) clipping observed as it ran: the norm a clipped unit had as it entered the sum.

Under ``make_private(..., grad_sample_mode="ghost")`` (Opacus >= 1.5) no per-sample gradient exists: the criterion
returns a ``DPTensorFastGradientClipping`` whose ``backward`` runs a first backward pass in which the module's hooks
compute each unit's gradient norm (``param._norm_sample``), asks the module for the clipping coefficients
(``get_clipping_coef``: ``min(1, max_grad_norm / (norm + 1e-6))`` in Opacus 1.6), and runs a second backward pass of
``sum_i coef_i * loss_i``, so the optimizer's clipped sum is ``sum_i coef_i grad(loss_i)`` and its own
``clip_and_accumulate`` does nothing. The per-sample probe of :mod:`privaudit.defenses.watch.opacus_step` has nothing to
run there, so the watch (:meth:`privaudit.defenses.watch.opacus_watch.OpacusWatch._patch_ghost`) shadows, for its
lifetime, ``DPTensorFastGradientClipping.backward`` and every ``get_clipping_coef`` of Opacus' fast-clipping modules;
when the coefficients are asked for inside a backward (the first pass's graph still held), :func:`ghost_probe` measures,
with the module's hooks off:

* the unit the code reported as largest, as it ran: ``coef_top * ||grad(loss_top)||``, its true gradient (one
  ``torch.autograd.grad`` of its own loss) times the coefficient the code gave it, which sees a clip norm other than
  the optimizer's (the one the noise is calibrated to: Opacus' PR #664 class) and norms the code under-reports;
* the same unit rescaled to a norm ``t C`` drawn as the per-sample probe draws it (:func:`drawn_norm`): every
  parameter's reported norm scaled by ``t C / norm_top``, the code's own ``get_clipping_coef`` called on that one row,
  times the rescaled true norm -- so a coefficient that spares mid-norm units, or norms computed wrong, show even
  while every real unit is far above the clip.

The larger of the two is the step's ``unit_norm_max`` (in the optimizer's units: C is its ``max_grad_norm``), the
units counted are the coefficients' rows; a release over several backward passes (virtual steps) takes the largest of
them. What it cannot see: a second backward pass that does not use the coefficients it was given (the release replay
of :mod:`privaudit.audit.user.training.release_replay` sees the released difference end to end), and units other than
the top
one."""

from __future__ import annotations

import math
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch

from privaudit.defenses.watch.opacus_step import drawn_norm

#: Relative slack of the unit-norm check on a ghost-clipped step (the trace's ``unit_norm_slack``): the code's norms
#: are float32 sums of Gram products over a sequence, the probe's true norm a float32 autograd gradient; they differed
#: by at most 1.6e-7, 2.0e-6 and 1.7e-5 of the norm at 16, 256 and 1024 tokens (``tests/test_opacus_ghost.py``
#: measures it), so 1e-3 leaves a margin of fifty at 1024 tokens. A norm the code under-reports by less is not seen.
GHOST_SLACK = 1e-3


@dataclass(frozen=True)
class GhostClip:
    """One backward pass's clipping as the code applied it: its units and the largest clipped norm measured."""

    units: int
    unit_norm_max: float


def ghost_probe(module: Any, loss_per_sample: torch.Tensor, coef: torch.Tensor, original: Callable[[Any], Any],
                clip: float, step: int, released: list[torch.Tensor]) -> GhostClip | None:
    """The probe of the module docstring on the first backward pass's graph; None when there is no unit. The true
    gradient is taken over ``released``, the optimizer's parameters (the module's own list may leave some out)."""
    coef = coef.detach().reshape(-1)
    params = [p for p in module.trainable_parameters if getattr(p, "_norm_sample", None) is not None]
    if not len(coef) or not params:
        return None
    norms = torch.stack([p._norm_sample.detach().reshape(-1) for p in params]).double()
    reported = norms.norm(dim=0)
    top = int(torch.argmax(reported))
    true = _unit_norm(module, loss_per_sample, top, [p for p in released if p.requires_grad])
    applied = float(coef[top]) * true
    if float(reported[top]) > 0:
        scale = drawn_norm(step, clip, float(reported[top])) / float(reported[top])
        applied = max(applied, float(_coef_of(module, params, norms[:, top] * scale, original)) * scale * true)
    return GhostClip(units=int(len(coef)), unit_norm_max=applied)


def _unit_norm(module: Any, loss_per_sample: torch.Tensor, top: int, params: list[torch.Tensor]) -> float:
    """||grad(loss_top)|| over ``params``, with the module's hooks off (its norms stay those of the batch)."""
    enabled = getattr(module, "hooks_enabled", True)
    module.disable_hooks()
    try:
        with warnings.catch_warnings():  # torch's note that the (disabled) module hooks see no input gradient
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            grads = torch.autograd.grad(loss_per_sample[top].sum(), params, retain_graph=True, allow_unused=True)
    finally:
        if enabled:
            module.enable_hooks()
    return math.sqrt(sum(float(g.detach().double().pow(2).sum()) for g in grads if g is not None))


def _coef_of(module: Any, params: list[torch.Tensor], row: torch.Tensor, original: Callable[[Any], Any]) -> float:
    """The code's own coefficient for one unit whose per-parameter norms are ``row`` (the batch's norms restored)."""
    saved = [p._norm_sample for p in params]
    kept = {k: v for k, v in vars(module).items() if k in ("per_sample_gradient_norms", "_per_sample_gradient_norms")}
    try:
        for p, v in zip(params, row):
            p._norm_sample = v.reshape(1).to(dtype=saved[0].dtype, device=saved[0].device)
        return float(original(module).reshape(-1)[0])
    finally:
        for p, s in zip(params, saved):
            p._norm_sample = s
        vars(module).update(kept)  # what get_norm_sample stored (a property in Opacus 1.6) is the batch's again


def ghost_classes() -> tuple[Any, list[type]]:
    """(Opacus' ``DPTensorFastGradientClipping`` or None, every class of a loaded Opacus module that defines
    ``get_clipping_coef`` itself)."""
    try:
        import opacus.grad_sample  # noqa: F401  (the fast-clipping modules)
        from opacus.utils.fast_gradient_clipping_utils import DPTensorFastGradientClipping
    except ImportError:
        return None, []
    found: list[type] = []
    for name, mod in list(sys.modules.items()):
        if name.startswith("opacus") and mod is not None:
            for obj in list(vars(mod).values()):
                for cls in getattr(obj, "__mro__", ()) if isinstance(obj, type) else ():
                    if "get_clipping_coef" in cls.__dict__ and cls not in found:
                        found.append(cls)
    return DPTensorFastGradientClipping, found
