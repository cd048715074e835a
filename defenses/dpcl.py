"""DPCL (Li et al. 2022): DP-SGD with a noised "connection point" between per-example gradients.

``dpcl-simclr`` (Sec. 3.2.2): each step samples |B| examples without replacement (fixed size,
replace-one relation, Sec. 4.1 / 5.1), embeds two views (2|B| L2-normalised rows Z), releases the
similarity matrix S(Z) = Z^T Z + N(0, (z_S Delta_S)^2) entrywise with Delta_S = 4 sqrt(2|B| - 1)
(Thm. 1), computes the NT-Xent loss (Eqs. 3-4) from the noised matrix, clips the per-view
gradients (2|B| "per-example" gradients, as per-sample machinery treats each input row) and adds
N(0, (z_g Delta_g)^2) with the paper's Delta_g = 4C. The budget is split equally (Sec. 5.2.2).

``dpcl-barlow`` (Sec. 3.3.2): the same with the Barlow Twins loss (Eq. 5) fed by the noised
per-feature mean (Thm. 2, 2/|B|) and the SSE-based variance max(0, SSE + noise) / (|B| - 1)
(Thm. 3, sensitivity 6) of each view's representations; the budget is split 1/3 gradient,
1/6 for each of the four statistics (Sec. 5.3.2). Representations are L2-normalised, as the
theorems require (Sec. 3.3.2), and the gradient flows through the noised statistics
(mu~ = mu(Z) + e) exactly as it flows through the noised similarity matrix.

Does the 4C argument hold for this code? No. The paper argues that with a noised similarity
matrix "the per-example gradient of all examples excluding the example being changed can be seen
unchanged". But view r's gradient is J_r^T dL/dz_r with dL/dz_r = sum_b (W + W^T)_{rb} z_b,
W = dL/dS~: it contains the embeddings z_b of every other view, including the two views of the
replaced example. Replacing one example therefore changes all 2|B| per-view gradients, and the
clipped sum's sensitivity is 2 (2|B|) C = 4|B|C -- Sec. 3.2.1's bound, which the noised matrix does
not improve. Barlow Twins is the same: the loss couples examples through C = sum_b (...), so every
gradient depends on every example. ``sensitivity='paper'`` (default, to reproduce and audit the
method) calibrates with 4C and the claim says its epsilon is not a valid guarantee;
``sensitivity='sound'`` calibrates with 4|B|C. The quantity is exposed as ``dpcl.simclr-gradient``
/ ``dpcl.barlow-gradient`` for the sensitivity checks, with the sound bound as ``corrected_bound``.

``similarity_noise=False`` / ``stats_noise=False`` give the paper's baseline ("original DPSGD",
Secs. 3.2.1 / 3.3.1, sensitivity 4|B|C, valid). ``clip_unit='example'`` clips both views of an
example together (2C claimed, 2|B|C sound).
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from privaudit.core.errors import ConfigError, one_of
from privaudit.defenses.dp import bounds
from privaudit.defenses.dp.accounting import Mechanism, SamplingPlan, claim_epsilon, separately_sampled_event
from privaudit.defenses.dp.base import DPConfig, DPDefense, StepContext, StepOutput, quantity
from privaudit.defenses.dp.engine.contrastive import embed_views, loss_cotangents
from privaudit.defenses.dp.engine.gradients import clipped_sum
from privaudit.defenses.dp.release.randomness import StepRandomness
from privaudit.defenses.dp.release.release_probes import embedding_dim, observe_release
from privaudit.defenses.dp.engine.units import partition_units
from privaudit.defenses.losses import barlow_twins, feature_mean, feature_sse, nt_xent_from_similarity
from privaudit.defenses.nn.model import ModelSpec

CLIP_UNITS = ("view", "example")


@dataclass(frozen=True)
class DPCLConfig(DPConfig):
    sensitivity: str = "paper"
    clip_unit: str = "view"
    batch_size: int = 128
    epochs: int = 10
    optimizer: str = "sgd"  # Sec. 5.1: SGD with momentum 0.9
    momentum: float = 0.9

    def validate(self) -> None:
        super().validate()
        if self.clip_unit not in CLIP_UNITS:
            raise one_of("clip_unit", self.clip_unit, CLIP_UNITS)
        if self.batch_size < 2:
            raise ConfigError(f"batch_size: DPCL needs at least 2 examples per batch, got {self.batch_size}")


@dataclass(frozen=True)
class DPCLSimCLRConfig(DPCLConfig):
    loss: str = "simclr"
    temperature: float = 0.5
    similarity_noise: bool = True
    lr: float = 3e-4  # fine-tuning the public init (defenses.dp.base.DEFAULTS_NOTE); 0.05 suited random init
    clip: float = 0.05

    def validate(self) -> None:
        super().validate()
        if self.loss != "simclr":
            raise one_of("loss", self.loss, ("simclr",))


@dataclass(frozen=True)
class DPCLBarlowConfig(DPCLConfig):
    loss: str = "barlow"
    stats_noise: bool = True
    # fine-tuning the public init (defenses.dp.base.DEFAULTS_NOTE): the noised means/variances swamp the update
    lr: float = 1e-5
    clip: float = 1.0

    def validate(self) -> None:
        super().validate()
        if self.loss != "barlow":
            raise one_of("loss", self.loss, ("barlow",))

    def model_spec(self, info) -> ModelSpec:
        # Thms. 2-3 assume L2-normalised representations (DPCL Sec. 3.3.2).
        return dataclasses.replace(super().model_spec(info), normalize=True)


class _DPCL(DPDefense):
    sampler = "without-replacement"
    paper_accountant = ("rdp (DPCL Sec. 4: Wang et al. 2019 Thm. 9 for sampling without replacement, Balle et al. "
                        "2020 Thm. 21 conversion; each mechanism subsampled separately, then composed)")
    noised: str = ""  # name of the config flag that turns the connection-point noise on

    @property
    def unit_kind(self) -> str:  # type: ignore[override]
        return self.config.clip_unit

    @property
    def with_noise(self) -> bool:
        return bool(getattr(self.config, self.noised))

    def gradient_mechanism(self, plan: SamplingPlan, share: float, source: str) -> Mechanism:
        cfg, b = self.config, plan.batch_size
        if not self.with_noise:
            sens = bounds.dpcl_gradient_plain(b, cfg.clip, cfg.clip_unit)
            return Mechanism("gradient", sens, share, source, paper_sensitivity=sens)
        paper = bounds.dpcl_gradient(cfg.clip, cfg.clip_unit)
        sound = bounds.dpcl_gradient_sound(b, cfg.clip, cfg.clip_unit)
        return Mechanism("gradient", sound if cfg.sensitivity == "sound" else paper, share, source,
                         paper_sensitivity=paper)

    def min_batch(self) -> int:
        return 2

    def owners(self, b: int, device) -> torch.Tensor:
        """Unit of each of the 2|B| rows [view 1; view 2]: the row itself, or its example."""
        rows = torch.arange(2 * b, device=device)
        return rows if self.config.clip_unit == "view" else rows % b

    def compute(self, ctx: StepContext, x: torch.Tensor, rnd: StepRandomness) -> StepOutput:
        """Both views' embeddings Z (2|B| rows); the per-unit clipped gradients of the loss computed through
        the noised connection point (:meth:`noisy_loss`); the true loss and the privatized statistics
        (:meth:`true_loss`)."""
        b = x.shape[0]
        sources, z = embed_views(ctx, x, rnd)
        _, (cot,) = loss_cotangents(lambda zz: self.noisy_loss(ctx, zz, b, rnd), (z,))
        units = partition_units(self.config.clip_unit, (cot,), (self.owners(b, cot.device),))
        clipped = clipped_sum(ctx.embedder, ctx.params, sources, units, self.config.clip, ctx.chunk)
        true_loss, quantities = self.true_loss(z, b)
        return StepOutput(clipped, float(true_loss.detach()), quantities)

    @abstractmethod
    def noisy_loss(self, ctx: StepContext, z: torch.Tensor, b: int, rnd: StepRandomness) -> torch.Tensor:
        """The loss of the 2|B| embeddings [view 1; view 2] through the noised statistics."""

    @abstractmethod
    def true_loss(self, z: torch.Tensor, b: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss without noise (the history's) and the statistics the noise privatizes, before noise."""

    def prepare(self, data, budget, seed, *, device="cpu", canaries=None):
        run = super().prepare(data, budget, seed, device=device, canaries=canaries)
        run.claim = self.with_paper_epsilon(run.claim, self.plan(len(data.train)))
        return run

    def with_paper_epsilon(self, claim, plan: SamplingPlan):
        """Add the epsilon the paper's own accounting (separately subsampled mechanisms) would report."""
        zs = claim.params["noise_multipliers"]
        if len(zs) < 2 or min(zs.values()) <= 0:
            return claim
        paper_claim = dataclasses.replace(claim, event=separately_sampled_event(plan, zs))
        eps = claim_epsilon(paper_claim)
        note = (f"each step releases {len(zs)} Gaussian mechanisms on the same batch, accounted as one Gaussian with "
                f"z_eff = {claim.params['effective_noise_multiplier']:.4g}; the paper composes them as separately "
                f"subsampled mechanisms (Sec. 4.2.2), which its analysis does not justify (they share one subsample); "
                f"that accounting gives epsilon = {eps:.4g}")
        return dataclasses.replace(claim, params={**claim.params, "paper_accounting_epsilon": eps},
                                   notes=claim.notes + (note,))

    def gradient_notes(self, plan: SamplingPlan, m: Mechanism, what: str) -> list[str]:
        cfg = self.config
        unit = ("per view (2|B| per-example gradients, one per augmented view, as the paper counts them)"
                if cfg.clip_unit == "view" else "per example (both views together)")
        notes = [f"fixed-size batches of |B| = {plan.batch_size} without replacement, replace-one relation "
                 f"(DPCL Secs. 4.1, 5.1); clip {unit}, C = {cfg.clip}"]
        if not self.with_noise:
            notes.append(f"no {what} noise: original DP-SGD with sensitivity 4|B|C-type bound {m.sensitivity:.4g} "
                         "(Sec. 3.2.1 / 3.3.1), valid")
            return notes
        sound = bounds.dpcl_gradient_sound(plan.batch_size, cfg.clip, cfg.clip_unit)
        if cfg.sensitivity == "paper":
            notes.append(f"gradient noise calibrated with the paper's sensitivity {m.sensitivity:.4g} (4C per view, 2C per "
                         f"example), which assumes that with the noised {what} the other examples' gradients do not "
                         "change. They do: every view's gradient contains the other views' embeddings (dL/dz_r = "
                         "sum_b (W + W^T)_rb z_b), so replacing one example changes all of them. The sound sensitivity "
                         f"is {sound:.4g}; the stated epsilon is NOT a valid DP guarantee for this mechanism")
        else:
            notes.append(f"gradient noise calibrated with the sound sensitivity {sound:.4g} (every clipped unit may "
                         f"change under replace-one); the paper claims {m.paper_sensitivity:.4g}, which does not hold")
        return notes


class DPCLSimCLR(_DPCL):
    """DPCL for SimCLR: noised similarity matrix + per-view clipped gradients (Sec. 3.2.2)."""

    name = "dpcl-simclr"
    Config = DPCLSimCLRConfig
    source = "DPCL Sec. 3.2.2 (DP-similarity, Thm. 1) and Sec. 4.2.2 (budget split)"
    noised = "similarity_noise"

    def mechanisms(self, plan: SamplingPlan) -> list[Mechanism]:
        if not self.with_noise:
            return [self.gradient_mechanism(plan, 1.0, "DPCL Sec. 3.2.1")]
        return [self.gradient_mechanism(plan, 0.5, "DPCL Sec. 3.2.2"),
                Mechanism("similarity", bounds.dpcl_similarity(2 * plan.batch_size), 0.5, "DPCL Thm. 1")]

    def probed_releases(self, plan: SamplingPlan, model: Any) -> dict[str, int]:
        """The noised similarity matrix: (2|B|)^2 entries (fixed-size batches)."""
        return {"similarity": (2 * plan.batch_size) ** 2} if self.with_noise else {}

    def similarity_noise_std(self, ctx: StepContext, b: int) -> float:
        """z_S Delta_S, Delta_S = 4 sqrt(2|B| - 1) (Thm. 1): the std of the noise on each similarity entry."""
        return ctx.multipliers["similarity"] * bounds.dpcl_similarity(2 * b)

    def noisy_loss(self, ctx: StepContext, z: torch.Tensor, b: int, rnd: StepRandomness) -> torch.Tensor:
        """NT-Xent (Eqs. 3-4) on S~ = Z Z^T + N(0, (z_S Delta_S)^2) entrywise (Thm. 1); rows L2-normalised. The
        step's release probes (a white-box audit's, :mod:`privaudit.defenses.dp.release.release_probes`) observe the
        noised
        matrix here and never reach the loss."""
        s = z @ z.T  # S(Z) = Z^T Z
        if self.with_noise:
            noisy = s + self.similarity_noise_std(ctx, b) * rnd.normal(s.shape, "similarity", device=s.device,
                                                                       dtype=s.dtype)
            observe_release(ctx, "similarity", s, noisy)
            s = noisy
        return nt_xent_from_similarity(s, self.config.temperature, reduction="mean")

    def true_loss(self, z: torch.Tensor, b: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        similarity = z @ z.T
        true_loss = nt_xent_from_similarity(similarity, self.config.temperature, reduction="mean")
        return true_loss, {"similarity": similarity}

    def notes(self, plan: SamplingPlan, mechanisms: list[Mechanism]) -> list[str]:
        notes = self.gradient_notes(plan, mechanisms[0], "similarity matrix")
        if self.with_noise:
            notes.append(f"similarity matrix Z^T Z of 2|B| normalised views noised entrywise with sensitivity "
                         f"4 sqrt(2|B| - 1) = {mechanisms[1].sensitivity:.4g} (Thm. 1, correct); budget split equally "
                         "(shares of 1/z_eff^2), the loss is NT-Xent on the noised matrix, the history's loss is the "
                         "true one (Sec. 5.2.2)")
        return notes

    def privatized_quantities(self, data, model=None, *, noise_multiplier: float = 1.0):
        plan = self.plan(len(data.train))
        p = {**self.base_params(plan), "views_per_unit": 1 if self.config.clip_unit == "view" else 2}
        noisy = self.variant(similarity_noise=True).quantity_function(data, model, noise_multiplier=noise_multiplier)
        plain = self.variant(similarity_noise=False).quantity_function(data, model, noise_multiplier=noise_multiplier)
        unit = self.config.clip_unit
        return [
            quantity("dpcl.similarity-matrix", "DPCL Thm. 1", "replace-one", noisy("similarity"),
                     lambda q: bounds.dpcl_similarity(2 * int(q["B"])), p,
                     "Z^T Z of the 2|B| L2-normalised views, before noise"),
            quantity("dpcl.simclr-gradient", "DPCL Sec. 3.2.2", "replace-one", noisy("gradient"),
                     lambda q: bounds.dpcl_gradient(q["C"], unit), p,
                     f"sum of per-{unit} clipped gradients of NT-Xent on the noised similarity matrix (noise drawn from "
                     "the shared randomness), before gradient noise; the paper's 4C does not hold",
                     corrected_bound=lambda q: bounds.dpcl_gradient_sound(int(q["B"]), q["C"], unit)),
            quantity("dpcl.simclr-gradient-plain", "DPCL Sec. 3.2.1", "replace-one", plain("gradient"),
                     lambda q: bounds.dpcl_gradient_plain(int(q["B"]), q["C"], unit), p,
                     f"sum of per-{unit} clipped NT-Xent gradients without similarity noise, before gradient noise"),
        ]


class DPCLBarlow(_DPCL):
    """DPCL for Barlow Twins: noised mean and SSE-based variance + per-view clipped gradients (Sec. 3.3.2)."""

    name = "dpcl-barlow"
    Config = DPCLBarlowConfig
    source = "DPCL Sec. 3.3.2 (DP-mean Thm. 2, DP-variance Thm. 3) and Sec. 5.3.2 (budget split)"
    noised = "stats_noise"

    def mechanisms(self, plan: SamplingPlan) -> list[Mechanism]:
        if not self.with_noise:
            return [self.gradient_mechanism(plan, 1.0, "DPCL Sec. 3.3.1")]
        b = plan.batch_size
        return [self.gradient_mechanism(plan, 1 / 3, "DPCL Sec. 3.3.2"),
                Mechanism("mean[view1]", bounds.dpcl_mean(b), 1 / 6, "DPCL Thm. 2"),
                Mechanism("mean[view2]", bounds.dpcl_mean(b), 1 / 6, "DPCL Thm. 2"),
                Mechanism("sse[view1]", bounds.dpcl_sse(), 1 / 6, "DPCL Thm. 3"),
                Mechanism("sse[view2]", bounds.dpcl_sse(), 1 / 6, "DPCL Thm. 3")]

    def noisy_stats(self, ctx: StepContext, zv: torch.Tensor, view: str, b: int, rnd: StepRandomness):
        """One view's per-feature mean + noise (Thm. 2) and variance max(0, SSE + noise) / (|B| - 1) (Thm. 3). The
        step's release probes observe the noised mean and SSE (before the clamp, which is post-processing) and never
        reach the loss (:mod:`privaudit.defenses.dp.release.release_probes`)."""
        mean, sse = feature_mean(zv), feature_sse(zv)
        if self.with_noise:
            d = zv.shape[1]
            noisy_mean = mean + self.stats_noise_std(ctx, f"mean[{view}]", b) * rnd.normal(
                (d,), f"mean[{view}]", device=zv.device, dtype=zv.dtype)
            noisy_sse = sse + self.stats_noise_std(ctx, f"sse[{view}]", b) * rnd.normal(
                (d,), f"sse[{view}]", device=zv.device, dtype=zv.dtype)
            observe_release(ctx, f"mean[{view}]", mean, noisy_mean)
            observe_release(ctx, f"sse[{view}]", sse, noisy_sse)
            mean, sse = noisy_mean, noisy_sse
        return mean, sse.clamp_min(0) / (b - 1)  # M_sigma = max(0, SSE + noise) / (N - 1)

    def stats_noise_std(self, ctx: StepContext, name: str, b: int) -> float:
        """z Delta of statistic ``name``: Delta = 2 / |B| for a mean (Thm. 2), 6 for an SSE (Thm. 3)."""
        return ctx.multipliers[name] * (bounds.dpcl_mean(b) if name.startswith("mean") else bounds.dpcl_sse())

    def probed_releases(self, plan: SamplingPlan, model: Any) -> dict[str, int]:
        """Each view's noised mean and SSE, d entries each (d the embedding's dimension)."""
        if not self.with_noise:
            return {}
        d = embedding_dim(model)
        return {f"{s}[{v}]": d for s in ("mean", "sse") for v in ("view1", "view2")}

    def noisy_loss(self, ctx: StepContext, z: torch.Tensor, b: int, rnd: StepRandomness) -> torch.Tensor:
        """Barlow Twins (Eq. 5) with each view's noised mean and variance."""
        za, zb = z[:b], z[b:]
        return barlow_twins(za, zb, self.config.barlow_lambda, self.noisy_stats(ctx, za, "view1", b, rnd),
                            self.noisy_stats(ctx, zb, "view2", b, rnd), reduction="sum")

    def true_loss(self, z: torch.Tensor, b: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        za, zb = z[:b], z[b:]
        true_loss = barlow_twins(za, zb, self.config.barlow_lambda, reduction="sum")
        return true_loss, {"mean": feature_mean(za), "sse": feature_sse(za), "mean[view2]": feature_mean(zb),
                           "sse[view2]": feature_sse(zb)}

    def notes(self, plan: SamplingPlan, mechanisms: list[Mechanism]) -> list[str]:
        notes = self.gradient_notes(plan, mechanisms[0], "mean and variance")
        if self.with_noise:
            notes.append(f"per view: mean noised with sensitivity 2/|B| = {mechanisms[1].sensitivity:.4g} (Thm. 2), SSE "
                         "with sensitivity 6 (Thm. 3), variance max(0, SSE~) / (|B| - 1); representations L2-normalised "
                         "as the theorems assume; budget 1/3 gradient, 1/6 per statistic (Sec. 5.3.2, as shares of "
                         "1/z_eff^2)")
        return notes

    def privatized_quantities(self, data, model=None, *, noise_multiplier: float = 1.0):
        plan = self.plan(len(data.train))
        p = dict(self.base_params(plan))
        unit = self.config.clip_unit
        noisy = self.variant(stats_noise=True).quantity_function(data, model, noise_multiplier=noise_multiplier)
        return [
            quantity("dpcl.mean", "DPCL Thm. 2", "replace-one", noisy("mean"), lambda q: bounds.dpcl_mean(int(q["B"])),
                     p, "per-feature mean of view 1's L2-normalised representations, before noise"),
            quantity("dpcl.sse", "DPCL Thm. 3", "replace-one", noisy("sse"), lambda q: bounds.dpcl_sse(), p,
                     "per-feature SSE of view 1's L2-normalised representations, before noise"),
            quantity("dpcl.barlow-gradient", "DPCL Sec. 3.3.2", "replace-one", noisy("gradient"),
                     lambda q: bounds.dpcl_gradient(q["C"], unit), p,
                     f"sum of per-{unit} clipped Barlow Twins gradients with noised mean and variance (noise from the "
                     "shared randomness), before gradient noise; the paper's 4C does not hold",
                     corrected_bound=lambda q: bounds.dpcl_gradient_sound(int(q["B"]), q["C"], unit)),
        ]
