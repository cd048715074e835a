"""``dpsgd``: DP-SGD with sample-level clipping of InfoNCE terms (DP-GCL Sec. 2.3.1, Eq. 6).

    g_sample = sum_i Clip_C( grad_theta -log( e^{s_ii/tau} / sum_j e^{s_ij/tau} ) )

Each unit is one loss *term* differentiated through every embedding of the batch (the term's
denominator involves all positives), so adding an example adds its term and can change all the
others: Delta = (2B + 1) C under add/remove (DP-GCL). B is the realised Poisson batch size, so with
``sensitivity='sound'`` (default) the noise is calibrated to the largest batch b the run allows,
(2b - 1) C, and a batch above b (probability <= ``overflow_tolerance`` over the run) releases noise
only; ``sensitivity='paper'`` uses (2B + 1) C at the expected batch size, which larger batches
exceed. With ``loss='simclr'`` (NT-Xent, two terms per example) the bound is (2B + 1) 2C.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from privaudit.core.errors import one_of
from privaudit.defenses.dp import bounds
from privaudit.defenses.dp.accounting import Mechanism, SamplingPlan
from privaudit.defenses.dp.base import DPConfig, DPDefense, StepContext, StepOutput, quantity
from privaudit.defenses.dp.engine.contrastive import embed_views, term_cotangents
from privaudit.defenses.dp.engine.gradients import clipped_sum
from privaudit.defenses.dp.release.randomness import StepRandomness
from privaudit.defenses.dp.engine.units import dense_units
from privaudit.defenses.losses import info_nce, nt_xent

LOSSES = ("infonce", "simclr")


@dataclass(frozen=True)
class DPSGDConfig(DPConfig):
    loss: str = "infonce"
    temperature: float = 0.5
    batch_size: int = 32
    epochs: int = 3
    lr: float = 3e-4  # fine-tuning the public init: chosen on the public/shadow splits (defenses.dp.base.DEFAULTS_NOTE)
    clip: float = 1.0

    def validate(self) -> None:
        super().validate()
        if self.loss not in LOSSES:
            raise one_of("loss", self.loss, LOSSES)


class DPSGD(DPDefense):
    """Per-term clipping of the InfoNCE (or NT-Xent) loss, Gaussian noise (2B + 1) C."""

    name = "dpsgd"
    Config = DPSGDConfig
    unit_kind = "term"
    source = "DP-GCL Sec. 2.3.1, Eq. 6 (DP-SGD of Abadi et al. 2016 on InfoNCE terms)"
    paper_accountant = "rdp (DP-GCL: Opacus RDP accountant, Poisson sampling)"

    @property
    def terms_per_example(self) -> int:
        return 1 if self.config.loss == "infonce" else 2

    def batch_bounded(self) -> bool:
        return self.config.sensitivity == "sound"

    def mechanisms(self, plan: SamplingPlan) -> list[Mechanism]:
        cfg, t = self.config, self.terms_per_example
        paper = bounds.dpgcl_sample_level(plan.batch_size, cfg.clip, t)
        if cfg.sensitivity == "sound":
            sens = bounds.dpgcl_sample_level_sound(plan.max_batch or plan.batch_size, cfg.clip, t)
        else:
            sens = paper
        return [Mechanism("gradient", sens, 1.0, "DP-GCL Eq. 6", paper_sensitivity=paper)]

    def normalizer(self, plan: SamplingPlan) -> float:
        return float(plan.batch_size * self.terms_per_example)

    def terms(self, z: torch.Tensor, b: int) -> torch.Tensor:
        cfg = self.config
        if cfg.loss == "infonce":
            return info_nce(z[:b], z[b:], cfg.temperature, reduction="none")
        return nt_xent(z[:b], z[b:], cfg.temperature, reduction="none")

    def compute(self, ctx: StepContext, x: torch.Tensor, rnd: StepRandomness) -> StepOutput:
        b = x.shape[0]
        sources, z = embed_views(ctx, x, rnd, record=False)  # term units are dense: the engine replicates the rows
        terms, (cot,) = term_cotangents(lambda zz: self.terms(zz, b), (z,))
        units = dense_units("term", (cot,))
        clipped = clipped_sum(ctx.embedder, ctx.params, sources, units, self.config.clip, ctx.chunk)
        return StepOutput(clipped, float(terms.sum()))

    def notes(self, plan: SamplingPlan, mechanisms: list[Mechanism]) -> list[str]:
        m = mechanisms[0]
        notes = [f"unit: one InfoNCE term through all embeddings of the batch (DP-GCL Eq. 6); clip C = {self.config.clip}"]
        if self.config.sensitivity == "sound":
            notes.append(f"sensitivity (2b - 1) t C = {m.sensitivity:.4g} for batches of at most b = {plan.max_batch} "
                         f"examples (t = {self.terms_per_example} terms per example); the paper's (2B + 1) C at the "
                         f"expected B = {plan.batch_size} is {m.paper_sensitivity:.4g} and does not hold for larger "
                         "Poisson batches")
        else:
            notes.append(f"sensitivity (2B + 1) t C = {m.sensitivity:.4g} at the expected batch size B = "
                         f"{plan.batch_size}: NOT valid for Poisson batches larger than B (about half of them)")
        return notes

    def privatized_quantities(self, data, model=None, *, noise_multiplier: float = 1.0):
        plan = self.plan(len(data.train))
        fn = self.quantity_function(data, model, noise_multiplier=noise_multiplier)("gradient")
        t = self.terms_per_example
        return [quantity(
            "dpgcl.sample-level", "DP-GCL Sec. 2.3.1, Eq. 6", "add-remove", fn,
            lambda p: bounds.dpgcl_sample_level(int(p["B"]), p["C"], int(p["t"])),
            {**self.base_params(plan), "t": t},
            "sum over InfoNCE terms of the clipped term gradient (through all embeddings), before noise; "
            "B in the bound is the smaller neighbour's batch size")]
