"""``dp-clip``: batch-level clipping (Huang et al.'s DP-CLIP as DP-GCL Eq. 7 describes it; Logit-DP's
"Naive-DP", Sec. 2.3).

    g_batch = Clip_C( grad_theta L(batch) ),     Delta = 2C under add/remove

One unit per batch: the whole batch gradient is clipped, so any loss works (InfoNCE by default;
NT-Xent, Barlow Twins, spreadout). The sensitivity does not depend on the batch size, but neither
does the signal: the gradient accumulation effect is lost (DP-GCL Sec. 2.3.2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from privaudit.defenses.dp import bounds
from privaudit.defenses.dp.accounting import Mechanism, SamplingPlan
from privaudit.defenses.dp.base import DPConfig, DPDefense, StepContext, StepOutput, quantity
from privaudit.defenses.dp.engine.contrastive import embed_views, loss_cotangents
from privaudit.defenses.dp.engine.gradients import clipped_sum
from privaudit.defenses.dp.release.randomness import StepRandomness
from privaudit.defenses.dp.engine.units import dense_units
from privaudit.defenses.losses import make_objective


@dataclass(frozen=True)
class DPClipConfig(DPConfig):
    loss: str = "infonce"
    temperature: float = 0.5
    batch_size: int = 128
    epochs: int = 20
    lr: float = 3e-4  # fine-tuning the public init (defenses.dp.base.DEFAULTS_NOTE)
    clip: float = 1.0


class DPClip(DPDefense):
    """Clip the batch gradient as one unit, Gaussian noise 2C."""

    name = "dp-clip"
    Config = DPClipConfig
    unit_kind = "batch"
    source = "DP-GCL Sec. 2.3.2, Eq. 7 (batch-level clipping, Huang et al.); Logit-DP Sec. 2.3 (Naive-DP)"
    paper_accountant = "rdp (DP-GCL: Opacus RDP accountant, Poisson sampling)"

    def mechanisms(self, plan: SamplingPlan) -> list[Mechanism]:
        return [Mechanism("gradient", bounds.dpgcl_batch_level(self.config.clip), 1.0, "DP-GCL Eq. 7")]

    def min_batch(self) -> int:
        return 2 if self.config.loss in ("barlow", "spreadout") else 1

    def compute(self, ctx: StepContext, x: torch.Tensor, rnd: StepRandomness) -> StepOutput:
        cfg = self.config
        b = x.shape[0]
        sources, z = embed_views(ctx, x, rnd)
        objective = make_objective(cfg.loss, temperature=cfg.temperature, barlow_lambda=cfg.barlow_lambda,
                                   reduction="sum")
        loss, (cot,) = loss_cotangents(lambda zz: objective(zz[:b], zz[b:]), (z,))
        units = dense_units("batch", (cot[None],))
        clipped = clipped_sum(ctx.embedder, ctx.params, sources, units, cfg.clip, ctx.chunk)
        return StepOutput(clipped, float(loss))

    def notes(self, plan: SamplingPlan, mechanisms: list[Mechanism]) -> list[str]:
        return [f"unit: the whole batch gradient of the summed {self.config.loss} loss, clipped to C = "
                f"{self.config.clip}; sensitivity 2C = {mechanisms[0].sensitivity:.4g} (add/remove), independent of "
                "the batch size"]

    def privatized_quantities(self, data, model=None, *, noise_multiplier: float = 1.0):
        plan = self.plan(len(data.train))
        fn = self.quantity_function(data, model, noise_multiplier=noise_multiplier)("gradient")
        return [quantity("dpgcl.batch-level", "DP-GCL Eq. 7", "add-remove", fn,
                         lambda p: bounds.dpgcl_batch_level(p["C"]), self.base_params(plan),
                         "clipped gradient of the whole batch's summed loss, before noise")]
