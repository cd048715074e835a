"""A worked example of a new DP defense: DP-SGD with per-example clipping of the alignment loss.

    g = sum_{i in batch} Clip_C( grad_theta -cos(f(v1_i), f(v2_i)) ),    Delta = C under add/remove

Each example's loss term reads only its own two views, so adding or removing one example adds or removes one
clipped unit: the sum's L2 sensitivity is the clip norm C. (A contrastive loss such as InfoNCE couples the
batch and needs a larger bound: ``privaudit.defenses.dpsgd``.)

Subclassing :class:`~privaudit.defenses.dp.base.DPDefense` is what puts a defense under every check of the gate
(docs/extending.md): the class supplies the step's mechanisms and its pre-noise computation; the base class
calibrates the noise, states the claim, adds the noise through the canary hook and records the training trace.

Use it from a suite (with this folder on ``PYTHONPATH``)::

    allow_plugins = true
    [[defenses]]
    name = "my_defense:AlignmentDPSGD"
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from privaudit.defenses.dp.accounting import Mechanism, SamplingPlan
from privaudit.defenses.dp.base import DPConfig, DPDefense, StepContext, StepOutput, quantity
from privaudit.defenses.dp.engine.contrastive import embed_views, loss_cotangents
from privaudit.defenses.dp.engine.gradients import clipped_sum
from privaudit.defenses.dp.release.randomness import StepRandomness
from privaudit.defenses.dp.engine.units import partition_units


@dataclass(frozen=True)
class AlignmentDPSGDConfig(DPConfig):
    """The DP settings (clip, noise calibration, init, ...) of :class:`DPConfig`, with this method's defaults."""

    batch_size: int = 32
    epochs: int = 2
    lr: float = 3e-4


def alignment_terms(z: torch.Tensor, b: int) -> torch.Tensor:
    """-cos(z1_i, z2_i) for each example i of the stacked views [view 1; view 2] (2b rows)."""
    return -torch.nn.functional.cosine_similarity(z[:b], z[b:], dim=1)


class AlignmentDPSGD(DPDefense):
    """Per-example clipped alignment loss, Gaussian noise at sensitivity C (add/remove, per example)."""

    name = "my_defense:AlignmentDPSGD"
    Config = AlignmentDPSGDConfig
    unit_kind = "example"
    source = "docs/extending.md (worked example)"
    paper_accountant = "pld"

    def mechanisms(self, plan: SamplingPlan) -> list[Mechanism]:
        """One Gaussian release per step: the clipped gradient sum, sensitivity C."""
        return [Mechanism("gradient", self.config.clip, 1.0, "one clipped unit per example")]

    def compute(self, ctx: StepContext, x: torch.Tensor, rnd: StepRandomness) -> StepOutput:
        """Everything before the noise: both views embedded, each example's two rows one unit, clipped and summed."""
        b = x.shape[0]
        sources, z = embed_views(ctx, x, rnd)
        loss, (cot,) = loss_cotangents(lambda zz: alignment_terms(zz, b).sum(), (z,))
        owners = torch.arange(2 * b, device=cot.device) % b  # row r of [view 1; view 2] belongs to example r mod b
        units = partition_units("example", (cot,), (owners,))
        clipped = clipped_sum(ctx.embedder, ctx.params, sources, units, self.config.clip, ctx.chunk)
        return StepOutput(clipped, float(loss))

    def notes(self, plan: SamplingPlan, mechanisms: list[Mechanism]) -> list[str]:
        return [f"unit: one example's alignment-loss gradient through its own two views, clipped to C = "
                f"{self.config.clip}; sensitivity C under add/remove"]

    def privatized_quantities(self, data, model=None, *, noise_multiplier: float = 1.0):
        """The clipped sum before noise, computed by the same :meth:`compute` training runs, with its bound C."""
        plan = self.plan(len(data.train))
        fn = self.quantity_function(data, model, noise_multiplier=noise_multiplier)("gradient")
        return [quantity("example.alignment", self.source, "add-remove", fn, lambda p: p["C"],
                         self.base_params(plan), "sum over examples of the clipped alignment-loss gradient")]
