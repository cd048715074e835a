"""Functions with known sensitivity, to calibrate the samplers (and a deliberately buggy one).

Each is a :class:`~privaudit.defenses.base.PrivatizedQuantity` like a defense's, on batches of free vectors
x (N, d) in float64:

* ``clipped_sum`` — sum_i Clip_C(x_i), Clip_C(v) = v min(1, C / ||v||). Add/remove sensitivity C
  (the added term, norm C when ||x|| >= C); replace-one 2C (antipodal terms of norm >= C).
* ``unit_mean`` — (1/N) sum_i x_i / ||x_i||, replace-one sensitivity 2/N (antipodal rows).
* ``buggy_clipped_sum`` — the clipped sum whose clipping norm *forgets one term*: the factor is
  min(1, C / ||v_{1..d-1}||), the squared norm summed without the last coordinate. Its claimed
  add/remove sensitivity is C, but a vector along the last coordinate escapes the clip: the true
  sensitivity is unbounded.

They are differentiable in x, so the gradient ascent applies.
"""

from __future__ import annotations

import math
from typing import Mapping

import torch

from privaudit.defenses.base import PrivatizedQuantity

SOURCE = "reference function with known sensitivity"


def clip_rows(x: torch.Tensor, clip: float) -> torch.Tensor:
    """Clip_C of every row: x min(1, C / ||x||) (0 stays 0)."""
    norms = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    return x * torch.clamp(clip / norms.clamp_min(1e-300), max=1.0)


def clipped_sum(x: torch.Tensor, clip: float) -> torch.Tensor:
    return clip_rows(x, clip).sum(dim=0)


def unit_mean(x: torch.Tensor) -> torch.Tensor:
    return (x / torch.linalg.vector_norm(x, dim=1, keepdim=True).clamp_min(1e-300)).mean(dim=0)


def buggy_clipped_sum(x: torch.Tensor, clip: float) -> torch.Tensor:
    """The bug: the norm that decides the clip factor omits the last coordinate's square."""
    partial = torch.sqrt(x[:, :-1].pow(2).sum(dim=1, keepdim=True))
    return (x * torch.clamp(clip / partial.clamp_min(1e-300), max=1.0)).sum(dim=0)


def reference_quantities(dim: int = 16, clip: float = 1.0) -> list[PrivatizedQuantity]:
    """The four reference quantities (claim ids ``reference.*``), bounds as functions of C and N."""

    def params(**extra: float) -> Mapping[str, float]:
        return {"C": clip, "d": dim, **extra}

    return [
        PrivatizedQuantity("reference.clipped-sum.add-remove", SOURCE, "add-remove",
                           lambda x, randomness=0: clipped_sum(x, clip), lambda p: float(p["C"]), params(),
                           description="sum of rows clipped to norm C; adding a row moves it by at most C"),
        PrivatizedQuantity("reference.clipped-sum.replace-one", SOURCE, "replace-one",
                           lambda x, randomness=0: clipped_sum(x, clip), lambda p: 2.0 * float(p["C"]), params(),
                           description="sum of rows clipped to norm C; replacing a row moves it by at most 2C"),
        PrivatizedQuantity("reference.unit-mean", SOURCE, "replace-one",
                           lambda x, randomness=0: unit_mean(x), lambda p: 2.0 / float(p["N"]), params(N=math.nan),
                           description="mean of N L2-normalised rows; replace-one sensitivity 2/N"),
        PrivatizedQuantity("reference.buggy-clip", SOURCE, "add-remove",
                           lambda x, randomness=0: buggy_clipped_sum(x, clip), lambda p: float(p["C"]), params(),
                           description="clipped sum whose clip norm forgets the last coordinate; claims C, "
                                       "true sensitivity unbounded"),
    ]
