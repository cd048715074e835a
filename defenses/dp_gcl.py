"""``dp-gcl``: DP-GCL (bounding group-level contribution + intra-group sample augmentation).

Algorithm 1: Poisson-sample a batch, split it into disjoint groups of about S pairs, compute the
group-level InfoNCE with N_a augmented negatives per positive (Eq. 12), clip each group's gradient
to C (Eq. 13) and add N(0, (2C sigma)^2) (Thms. 2-3); the update is divided by the (expected) number
of groups (line 12).

Groupings (``grouping``):

* ``random`` (default) -- each example draws its own group uniformly among K = round(E[B] / S),
  independently of the other examples (group sizes vary around S). Adding an example changes only
  its own group, which is the coupling App. A's proof of Thm. 2 assumes ("all data pairs except
  (x*, x+*) are assigned to identical groups in both D and D'"): sensitivity 2C holds.
* ``chunk`` -- consecutive chunks of S of a random permutation of the batch, K = ceil(B / S) groups of
  at most S (Algorithm 1 line 5 as written). Inserting one example shifts every later one by a
  position, so all later groups can change: App. A's argument does not cover it. The paper's 2C is
  used with ``sensitivity='paper'``; ``'sound'`` uses (2K + 1) C for batches of at most ``max_batch``.

``multiplicity`` M > 1 (an extension, not in the paper: augmentation multiplicity of De et al. 2022)
averages each group's loss over M independent draws of the views, each draw contrasted within the
group on its own; the unit is still one group, so the sensitivity is unchanged, while the group
gradients' augmentation noise shrinks.

``negatives='batch'`` is Eq. 8 (group clipping with full-batch denominators, Thm. 1:
(2K + 1) C); ``modality='dual'`` trains two towers on the paired views with the symmetric loss of
Eq. 15 (tower 0 is the released encoder).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn

from privaudit.core.errors import check_positive, one_of
from privaudit.defenses.dp import bounds
from privaudit.defenses.dp.accounting import Mechanism, SamplingPlan
from privaudit.defenses.dp.base import DPConfig, DPDefense, StepContext, StepOutput, quantity
from privaudit.defenses.dp.engine.contrastive import embed, loss_cotangents, term_cotangents
from privaudit.defenses.dp.engine.embedder import Source, TwoTower
from privaudit.defenses.dp.engine.gradients import clipped_sum
from privaudit.defenses.dp.release.randomness import StepRandomness
from privaudit.defenses.dp.engine.units import dense_units, partition_units
from privaudit.defenses.losses import group_info_nce, group_info_nce_dual
from privaudit.defenses.nn.model import ContrastiveModel, ModelSpec, build_model
from privaudit.defenses.training.seeding import derive_seed

GROUPINGS = ("random", "chunk")
NEGATIVES = ("group", "batch")
MODALITIES = ("uni", "dual")


@dataclass(frozen=True)
class DPGCLConfig(DPConfig):
    loss: str = "infonce"
    temperature: float = 1 / math.sqrt(2)  # DP-GCL Table 9, uni-modal
    # digits defaults (372 members): full-batch steps (Poisson, q = 1) give the most signal per unit of
    # privacy on so little data; small groups give the most clipped units; Adam as in DP-GCL Table 9.
    group_size: int = 4
    augmentations: int = 1  # N_a
    multiplicity: int = 1  # M draws of the views per step (extension; 1 = the paper)
    grouping: str = "random"
    negatives: str = "group"
    modality: str = "uni"
    batch_size: int = 512
    epochs: int = 25
    lr: float = 3e-4  # fine-tuning the public init (defenses.dp.base.DEFAULTS_NOTE); 8e-3 suited random init
    clip: float = 1.0

    def validate(self) -> None:
        super().validate()
        if self.loss != "infonce":
            raise one_of("loss", self.loss, ("infonce",))
        check_positive("group_size", self.group_size)
        check_positive("augmentations", self.augmentations, allow_zero=True)
        check_positive("multiplicity", self.multiplicity)
        if self.grouping not in GROUPINGS:
            raise one_of("grouping", self.grouping, GROUPINGS)
        if self.negatives not in NEGATIVES:
            raise one_of("negatives", self.negatives, NEGATIVES)
        if self.modality not in MODALITIES:
            raise one_of("modality", self.modality, MODALITIES)


def assign_groups(keys: torch.Tensor, grouping: str, groups: int, group_size: int) -> torch.Tensor:
    """Group ids from one uniform key per example.

    ``random``: bucket floor(key * K) of K fixed groups (each example by itself); ``chunk``: rank the
    keys (a uniform random permutation) and cut it into consecutive chunks of ``group_size``.
    """
    if grouping == "random":
        return (keys * groups).floor().long().clamp(max=groups - 1)
    order = torch.argsort(keys)
    out = torch.empty_like(order)
    out[order] = torch.arange(keys.numel(), device=keys.device) // group_size
    return out


class DPGCL(DPDefense):
    """Group-level InfoNCE with per-group clipping (DP-GCL Algorithm 1)."""

    name = "dp-gcl"
    Config = DPGCLConfig
    unit_kind = "group"
    source = "DP-GCL Algorithm 1, Eqs. 9-13 (Thms. 2-3); Eq. 8 (Thm. 1); Eq. 15 (dual modality)"
    paper_accountant = "rdp (DP-GCL Sec. 3.5: RDP accountant via Opacus, Poisson sampling)"

    # -- groups ------------------------------------------------------------------------------------
    def fixed_groups(self, plan: SamplingPlan) -> int:
        """K for the random grouping: round(E[B] / S), fixed in advance (never data-dependent)."""
        return max(1, round(plan.batch_size / self.config.group_size))

    def max_groups(self, plan: SamplingPlan) -> int:
        if self.config.grouping == "random":
            return self.fixed_groups(plan)
        return math.ceil((plan.max_batch or plan.batch_size) / self.config.group_size)

    def batch_bounded(self) -> bool:
        return self.config.sensitivity == "sound" and self.config.grouping == "chunk"

    def groups_of(self, plan: SamplingPlan, keys: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        return assign_groups(keys, cfg.grouping, self.fixed_groups(plan), cfg.group_size)

    # -- mechanisms ----------------------------------------------------------------------------------
    def mechanisms(self, plan: SamplingPlan) -> list[Mechanism]:
        cfg = self.config
        expected_k = max(1, math.ceil(plan.batch_size / cfg.group_size)) if cfg.grouping == "chunk" \
            else self.fixed_groups(plan)
        if cfg.negatives == "batch":
            paper = bounds.dpgcl_group_clip(expected_k, cfg.clip)
            sound = bounds.dpgcl_group_clip(self.max_groups(plan), cfg.clip)
            source = "DP-GCL Thm. 1 (Eq. 8)"
        else:
            paper = bounds.dpgcl_group(cfg.clip)
            sound = paper if cfg.grouping == "random" else bounds.dpgcl_group_chunk_sound(self.max_groups(plan), cfg.clip)
            source = "DP-GCL Thm. 3 (Eq. 13)" if cfg.augmentations else "DP-GCL Thm. 2 (Eq. 10)"
        sens = sound if cfg.sensitivity == "sound" else paper
        return [Mechanism("gradient", sens, 1.0, source, paper_sensitivity=paper)]

    def normalizer(self, plan: SamplingPlan) -> float:
        return float(max(1, round(plan.batch_size / self.config.group_size)))

    # -- model -----------------------------------------------------------------------------------------
    def make_model(self, spec: ModelSpec, seed: int):
        first = build_model(spec, seed=seed)
        if self.config.modality == "uni":
            return first
        return TwoTower(first, build_model(spec, seed=derive_seed(seed, "second-tower")))

    def released(self, model) -> ContrastiveModel:
        return model.towers[0] if isinstance(model, TwoTower) else model

    # -- one step --------------------------------------------------------------------------------------
    def step_inputs(self, plan: SamplingPlan, augment, x: torch.Tensor, rnd: StepRandomness
                    ) -> tuple[torch.Tensor, tuple[Source, ...], Callable[..., torch.Tensor]]:
        """Algorithm 1 lines 5-8 for one batch: (group ids, the sources of every view, the loss terms).

        ``terms_fn(*zs, use_groups=True)`` maps the sources' embeddings to the B per-anchor terms of
        Eq. 12 (Eq. 15 for two towers), averaged over the M draws; ``use_groups=False`` contrasts every
        anchor with the whole batch (Eq. 8's terms).
        """
        cfg = self.config
        b, na, mult, uni = x.shape[0], cfg.augmentations, cfg.multiplicity, cfg.modality == "uni"
        groups = self.groups_of(plan, rnd.uniform(b, "groups", device=x.device))
        # Rows per draw, in blocks of b: uni [x, x+, U(x+)_1..N_a] for the one encoder; dual
        # [x, U(x)_1..N_a] for tower 0 and [x+, U(x+)_1..N_a] for tower 1 (Eq. 11: x+,aug = U(x+)).
        tower0, tower1 = [], []
        for d in range(mult):
            tag = "" if d == 0 else f"-draw{d}"
            u, v = rnd.views(augment, x, "view1" + tag), rnd.views(augment, x, "view2" + tag)
            aug_v = [rnd.views(augment, v, f"negatives-{m}{tag}") for m in range(na)]
            if uni:
                tower0 += [u, v, *aug_v]
            else:
                tower0 += [u, *(rnd.views(augment, u, f"negatives-u-{m}{tag}") for m in range(na))]
                tower1 += [v, *aug_v]
        if uni:
            sources = (Source(torch.cat(tower0)),)
        else:
            sources = (Source(torch.cat(tower0), tower=0), Source(torch.cat(tower1), tower=1))
        blocks = [len(s) // (b * mult) for s in sources]  # blocks of b rows per draw, per source

        def terms_fn(*z: torch.Tensor, use_groups: bool = True) -> torch.Tensor:
            g = groups if use_groups else None
            draws = [zi.reshape(mult, k, b, -1) for zi, k in zip(z, blocks)]
            total = 0.0
            for d in range(mult):
                if uni:
                    blk = draws[0][d]
                    total = total + group_info_nce(blk[0], blk[1], cfg.temperature, g, blk[2:] if na else None)
                else:
                    a, c = draws[0][d], draws[1][d]
                    total = total + group_info_nce_dual(a[0], c[0], cfg.temperature, g, a[1:] if na else None,
                                                        c[1:] if na else None)
            return total / mult

        return groups, sources, terms_fn

    def compute(self, ctx: StepContext, x: torch.Tensor, rnd: StepRandomness) -> StepOutput:
        cfg = self.config
        b = x.shape[0]
        groups, sources, terms_fn = self.step_inputs(ctx.plan, ctx.augment, x, rnd)
        owners = tuple(groups.repeat(len(s) // b) for s in sources)
        zs = embed(ctx, sources)
        if cfg.negatives == "group":
            loss, cots = loss_cotangents(lambda *z: terms_fn(*z).sum(), zs)
            units = partition_units("group", cots, owners)
        else:  # Eq. 8: a group's unit is the gradient of its members' full-batch terms through all rows
            ids = torch.unique(groups)
            member = (groups[None, :] == ids[:, None]).to(zs[0].dtype)  # (K, B)
            sums, cots = term_cotangents(lambda *z: member @ terms_fn(*z, use_groups=False), zs)
            loss = sums.sum()
            units = dense_units("group", cots, ids=ids)
        clipped = clipped_sum(ctx.embedder, ctx.params, sources, units, cfg.clip, ctx.chunk)
        return StepOutput(clipped, float(loss), {"groups": groups})

    def objective(self, model: nn.Module, plan: SamplingPlan, augment, x: torch.Tensor, rnd: StepRandomness
                  ) -> torch.Tensor:
        """The step's summed loss with the encoder in the autograd graph: the same views, groups, negatives
        and terms as :meth:`compute`, but no per-group clipping and no noise (the non-private step on the
        same objective, which the throughput benchmark compares a DP step with).

        With Eq. 8's negatives every example is in one group, so the sum of the group sums is the sum of
        the full-batch terms.
        """
        _, sources, terms_fn = self.step_inputs(plan, augment, x, rnd)
        zs = [model(s.x) if s.tower is None else model(s.x, tower=s.tower) for s in sources]
        return terms_fn(*zs, use_groups=self.config.negatives == "group").sum()

    # -- claim -----------------------------------------------------------------------------------------
    def params_summary(self, plan: SamplingPlan) -> dict:
        cfg = self.config
        return {**super().params_summary(plan), "group_size": cfg.group_size, "augmentations": cfg.augmentations,
                "grouping": cfg.grouping, "negatives": cfg.negatives, "modality": cfg.modality,
                "groups": self.fixed_groups(plan) if cfg.grouping == "random" else None}

    def notes(self, plan: SamplingPlan, mechanisms: list[Mechanism]) -> list[str]:
        cfg, m = self.config, mechanisms[0]
        notes = [f"unit: one group's summed loss gradient (group size S = {cfg.group_size}, N_a = "
                 f"{cfg.augmentations} augmented negatives per positive), clip C = {cfg.clip}; sensitivity "
                 f"{m.sensitivity:.4g} ({m.source})"]
        if cfg.grouping == "random":
            notes.append(f"grouping 'random': each example draws its own group among K = {self.fixed_groups(plan)} "
                         "fixed groups, so adding an example leaves every other example's group unchanged -- the "
                         "coupling DP-GCL App. A's proof of Thm. 2 needs (group sizes vary around S)")
        else:
            notes.append("grouping 'chunk' (Algorithm 1: consecutive chunks of a random permutation): inserting one "
                         "example shifts later examples into other groups, so App. A's argument does NOT cover it; "
                         + (f"calibrated with the sound (2K + 1) C = {m.sensitivity:.4g} for K <= "
                            f"{self.max_groups(plan)} groups" if cfg.sensitivity == "sound"
                            else f"calibrated with the paper's 2C: the stated epsilon is NOT proven (worst case "
                                 f"(2K + 1) C = {bounds.dpgcl_group_chunk_sound(self.max_groups(plan), cfg.clip):.4g})"))
        if cfg.negatives == "batch":
            notes.append("negatives 'batch' (Eq. 8): every loss term uses the whole batch, so adding an example can "
                         "change every group's gradient: (2K + 1) C (Thm. 1)")
        notes.append(f"the noisy sum is divided by the expected number of groups {self.normalizer(plan):g} (a constant)"
                     ", not by the realised one, which would depend on the private batch size")
        if cfg.modality == "dual":
            notes.append("modality 'dual' (Eq. 15): two towers, one per view; only tower 0 is released")
        return notes

    # -- privatized quantities --------------------------------------------------------------------------
    def privatized_quantities(self, data, model=None, *, noise_multiplier: float = 1.0):
        plan = self.plan(len(data.train))
        params = {**self.base_params(plan), "S": self.config.group_size, "K": self.fixed_groups(plan)}
        out = []
        eq8 = self.variant(negatives="batch", grouping="random")
        out.append(quantity(
            "dpgcl.group-clip", "DP-GCL Thm. 1 (Eq. 8)", "add-remove",
            eq8.quantity_function(data, model, noise_multiplier=noise_multiplier)("gradient"),
            lambda p: bounds.dpgcl_group_clip(int(p["K"]), p["C"]), params,
            "sum of clipped group gradients with full-batch denominators (random grouping, K fixed), before noise"))
        for grouping in GROUPINGS:
            var = self.variant(negatives="group", grouping=grouping)
            corrected = None if grouping == "random" else (
                lambda p: bounds.dpgcl_group_chunk_sound(math.ceil((p["B"] + 1) / p["S"]), p["C"]))
            out.append(quantity(
                "dpgcl.group", "DP-GCL Thms. 2-3 (Eqs. 10, 13)", "add-remove",
                var.quantity_function(data, model, noise_multiplier=noise_multiplier)("gradient"),
                lambda p: bounds.dpgcl_group(p["C"]), params,
                f"sum of clipped group gradients, group-level negatives with N_a augmented views, grouping "
                f"{grouping!r}, before noise" + (" (covered by App. A)" if grouping == "random" else
                                                 " (NOT covered by App. A: corrected_bound is (2K + 1) C)"),
                corrected_bound=corrected, variant=grouping))
        return out
