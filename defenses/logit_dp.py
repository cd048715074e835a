"""``logit-dp``: Logit-DP (Kong et al., "DP optimization for non-decomposable objective functions").

Algorithm 1 for a batch of n positive pairs (x_i, x'_i) (two augmented views of each example):
logits Z_ij = s(f(x_i), f(x'_j)) / tau, loss L = sum_i l^(i,n)(Z_i) -- the canonical contrastive loss
(Def. 2.2, ``loss='infonce'``) or the spreadout regulariser (Def. 2.3, ``loss='spreadout'``, on the
cosine similarities without temperature) -- and the released gradient

    g~ = sum_ij (dL/dZ_ij) Clip_B(grad_theta Z_ij) + N(0, (sigma Delta)^2 I).

``pair_grads='efficient'`` (default) computes the pair norms from Jacobian Grams and then one backward
pass of sum lambda_ij Z_ij (Sec. 5.3); ``'direct'`` materialises every pair gradient (the reference);
both give the same vector (:mod:`privaudit.defenses.dp.engine.pairs`).

Sensitivity (``clip`` is the pair clip norm B):

* spreadout: Lemma 4.6, 6B for every batch size (correct).
* InfoNCE: Lemma 4.5 gives 2 (1 + (n-2) e^2 / (e^2 + n - 1)) B for cosine logits in [-1, 1]. Three
  problems: (1) it assumes tau = 1; with logits s/tau the range is [-1/tau, 1/tau] and e^2 becomes
  e^{2/tau}; (2) its proof bounds G1 (the new row's diagonal probability) and G2, L (the new column's
  probability in the other rows) with one and the same p_n, but they are different entries and are
  extreme together, so the bound is too small by up to 2 p_max B; (3) n is the realised batch size,
  random under Poisson sampling, so calibrating to it makes the noise data-dependent. The sound bound
  used by default is the supremum over n of the corrected expression, 2 (1 + e^{2/tau}) B
  (:func:`privaudit.defenses.dp.bounds.logitdp_infonce_sup`); ``sensitivity='paper'`` uses Lemma 4.5 (with
  e^{2/tau}) at the expected batch size.

Corollary 4.4's per-step epsilon = sqrt(log(1.25/delta)) / sigma is the classical Gaussian-mechanism
bound missing its factor sqrt(2) (and valid only for epsilon < 1); the claim here is accounted like any
DP-SGD run (Poisson-subsampled Gaussian, RDP), which the paper says applies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from privaudit.core.errors import one_of
from privaudit.defenses.dp import bounds
from privaudit.defenses.dp.accounting import Mechanism, SamplingPlan
from privaudit.defenses.dp.base import DPConfig, DPDefense, StepContext, StepOutput, quantity
from privaudit.defenses.dp.engine.contrastive import embed, tracking, two_views
from privaudit.defenses.dp.engine.embedder import Source
from privaudit.defenses.dp.engine.pairs import (PAIR_NORMS, direct_pair_sum, efficient_pair_sum, grams_engine,
    pair_derivatives, pair_grams)
from privaudit.defenses.dp.release.randomness import StepRandomness
from privaudit.defenses.losses import info_nce_from_logits, spreadout_from_similarity

LOSSES = ("infonce", "spreadout")
PAIR_GRADS = ("efficient", "direct")


@dataclass(frozen=True)
class LogitDPConfig(DPConfig):
    loss: str = "infonce"
    temperature: float = 1.0  # Lemma 4.5's setting: logits are cosine similarities
    proj_dim: int = 8  # Logit-DP App. B.1: the embedding net's output dimension is 8
    batch_size: int = 64
    epochs: int = 10
    lr: float = 3e-4  # fine-tuning the public init (defenses.dp.base.DEFAULTS_NOTE); App. B.1: 1e-2 from scratch
    clip: float = 1.0
    pair_grads: str = "efficient"
    pair_norms: str = "exact"

    def validate(self) -> None:
        super().validate()
        if self.loss not in LOSSES:
            raise one_of("loss", self.loss, LOSSES)
        if self.pair_grads not in PAIR_GRADS:
            raise one_of("pair_grads", self.pair_grads, PAIR_GRADS)
        if self.pair_norms not in PAIR_NORMS:
            raise one_of("pair_norms", self.pair_norms, PAIR_NORMS)


def cosine_pair(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """s(u, v) for two vectors, the same cosine as :func:`cosine_similarity_matrix`."""
    return (F.normalize(u, dim=-1, eps=1e-8) * F.normalize(v, dim=-1, eps=1e-8)).sum(-1)


class LogitDP(DPDefense):
    """Per-similarity-pair clipping recombined with dL/dZ (Logit-DP Algorithm 1)."""

    name = "logit-dp"
    Config = LogitDPConfig
    unit_kind = "pair"
    source = "Logit-DP Algorithm 1, Lemma 4.1, Thm. 4.2, Cor. 4.3, Lemmas 4.5-4.6, Sec. 5.3"
    paper_accountant = ("gaussian per step (Cor. 4.4) / DP-SGD accounting; public code: RDP with Poisson sampling "
                        "while batching by shuffling")

    @property
    def logit_scale(self) -> float:
        """1/tau for InfoNCE logits; the spreadout loss acts on the similarities themselves."""
        return 1.0 / self.config.temperature if self.config.loss == "infonce" else 1.0

    def similarity(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return cosine_pair(u, v) * self.logit_scale

    def mechanisms(self, plan: SamplingPlan) -> list[Mechanism]:
        cfg = self.config
        if cfg.loss == "spreadout":
            sens = bounds.logitdp_spreadout(cfg.clip)
            return [Mechanism("gradient", sens, 1.0, "Logit-DP Lemma 4.6", paper_sensitivity=sens)]
        paper = bounds.logitdp_infonce_paper(plan.batch_size, cfg.clip, cfg.temperature)
        sound = bounds.logitdp_infonce_sup(cfg.clip, cfg.temperature)
        return [Mechanism("gradient", sound if cfg.sensitivity == "sound" else paper, 1.0, "Logit-DP Lemma 4.5",
                          paper_sensitivity=paper)]

    def normalizer(self, plan: SamplingPlan) -> float:
        return float(plan.batch_size)

    def min_batch(self) -> int:
        return 2 if self.config.loss == "spreadout" else 1

    def loss_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        if self.config.loss == "infonce":
            return info_nce_from_logits(logits, reduction="sum")
        return spreadout_from_similarity(logits, reduction="sum")

    def compute(self, ctx: StepContext, x: torch.Tensor, rnd: StepRandomness) -> StepOutput:
        cfg = self.config
        v1, v2 = two_views(ctx, x, rnd)
        grams = None
        if cfg.pair_grads == "efficient" and not tracking() and grams_engine(ctx.embedder) == "layerwise":
            # the Grams' replicated forward pass gives the embeddings too (no separate forward)
            # (cosine logits: the pair cotangents are tangent to their rows' embeddings, D - 1 directions per row)
            grams = pair_grams(ctx.embedder, ctx.params, v1, v2, cfg.pair_norms == "exact", tangent=True)
            zx, zy = grams.embeddings
        else:
            zx, zy = embed(ctx, (Source(v1), Source(v2)), record=False)
        logits = (F.normalize(zx, dim=-1, eps=1e-8) @ F.normalize(zy, dim=-1, eps=1e-8).T * self.logit_scale)
        if tracking() and logits.requires_grad:
            # the sensitivity checks' first-order search: tau_ij = dL/dZ_ij keeps its graph (double backward)
            loss = self.loss_from_logits(logits)
            (tau,) = torch.autograd.grad(loss, logits, create_graph=True)
        else:
            logits = logits.detach().requires_grad_(True)
            with torch.enable_grad():
                loss = self.loss_from_logits(logits)
                (tau,) = torch.autograd.grad(loss, logits)
        a, b = pair_derivatives(self.similarity, zx, zy)
        if cfg.pair_grads == "efficient":
            clipped = efficient_pair_sum(ctx.embedder, ctx.params, v1, v2, self.similarity, tau, a, b, cfg.clip,
                                         cfg.pair_norms, chunk=ctx.chunk, grams=grams)
        else:
            clipped = direct_pair_sum(ctx.embedder, ctx.params, v1, v2, tau, a, b, cfg.clip, chunk=ctx.chunk * 16)
        return StepOutput(clipped, float(loss.detach()), {"tau": tau.detach()})

    def engine_note(self, embedder) -> str:
        cfg = self.config
        if cfg.pair_grads == "direct":
            return "vmap (pair units share rows)"
        return "layerwise (ghost Grams)" if grams_engine(embedder) == "layerwise" else "vmap (row Jacobians)"

    def params_summary(self, plan: SamplingPlan) -> dict:
        cfg = self.config
        return {**super().params_summary(plan), "temperature": cfg.temperature, "pair_grads": cfg.pair_grads,
                "pair_norms": cfg.pair_norms, "loss": cfg.loss}

    def notes(self, plan: SamplingPlan, mechanisms: list[Mechanism]) -> list[str]:
        cfg, m = self.config, mechanisms[0]
        notes = [f"unit: the gradient of one similarity logit Z_ij, clipped to B = {cfg.clip} and weighted by "
                 f"dL/dZ_ij ({cfg.pair_grads} implementation, {cfg.pair_norms} pair norms)",
                 "positives are two augmentations of one example (the public code pairs two images of one class)"]
        if cfg.loss == "spreadout":
            notes.append(f"sensitivity 6B = {m.sensitivity:.4g} (Lemma 4.6, any batch size)")
        elif cfg.sensitivity == "sound":
            notes.append(f"sensitivity 2 (1 + e^(2/tau)) B = {m.sensitivity:.4g} (tau = {cfg.temperature}): the "
                         "corrected Lemma 4.5 bound, valid for every batch size; Lemma 4.5 at the expected batch "
                         f"size gives {m.paper_sensitivity:.4g}")
        else:
            notes.append(f"sensitivity from Lemma 4.5 at the expected batch size n = {plan.batch_size} (e^2 -> "
                         f"e^(2/tau)): {m.sensitivity:.4g}. NOT valid: the lemma's proof uses one p_n for two "
                         "different softmax entries, and Poisson batches larger than n exceed it; the sound bound is "
                         f"{bounds.logitdp_infonce_sup(cfg.clip, cfg.temperature):.4g}")
        if cfg.pair_norms == "upper-bound":
            notes.append("pairs are clipped by an upper bound of their norm (triangle inequality): every clipped pair "
                         "still has norm <= B, so the sensitivity bound holds")
        return notes

    def privatized_quantities(self, data, model=None, *, noise_multiplier: float = 1.0):
        plan = self.plan(len(data.train))
        out = []
        for loss in LOSSES:
            var = self.variant(loss=loss)
            fn = var.quantity_function(data, model, noise_multiplier=noise_multiplier)("gradient")
            p = {**var.base_params(plan), "tau": var.config.temperature if loss == "infonce" else 1.0}
            if loss == "infonce":
                out.append(quantity(
                    "logitdp.infonce", "Logit-DP Lemma 4.5 (Thm. 4.2, Cor. 4.3)", "add-remove", fn,
                    lambda q: bounds.logitdp_infonce_paper(int(q["B"]) + 1, q["C"], q["tau"]), p,
                    "sum_ij dL/dZ_ij Clip_B(grad Z_ij) of the contrastive loss, before noise; the bound takes the "
                    "larger neighbour's batch size n = B + 1", corrected_bound=lambda q: bounds.logitdp_infonce_sound(
                        int(q["B"]) + 1, q["C"], q["tau"])))
            else:
                out.append(quantity(
                    "logitdp.spreadout", "Logit-DP Lemma 4.6", "add-remove", fn,
                    lambda q: bounds.logitdp_spreadout(q["C"]), p,
                    "sum_ij dL/dZ_ij Clip_B(grad Z_ij) of the spreadout loss, before noise"))
        return out
