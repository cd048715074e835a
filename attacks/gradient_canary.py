"""White-box gradient canaries for DP-SGD-style defenses: the auditor's (scoring and bound) side.

A gradient canary (Nasr et al. 2021/2023; Steinke, Nasr & Jagielski 2023, Sec. 6 "white-box") is a
privacy unit whose clipped gradient is a fixed vector C u_i, u_i a unit direction, at every step it
is sampled. The auditor inserts m such canaries, each independently with probability 1/2, observes
the privatised gradient sums, and scores canary i by the inner product of the observed updates with
its direction, summed over steps:

    score_i = sum_t < g~_t, u_i >,   g~_t = sum_{units u in batch t} clip_C(g_u) + N(0, sigma^2 C^2 I).

Inserted canaries add about q T C to their score; the scores feed the one-run bound
(:func:`attacks.bounds.one_run_bound`). Directions are **Dirac** by default (distinct random
coordinates of the flattened parameter vector: orthogonal, and cheap to score for any model size) or
**Gaussian** (random unit vectors, dense; for small models).

The audit (:class:`GradientCanaryAudit`, attack ``gradient-canary``) runs the target's own DP defense
through the engine's canary hook (:mod:`defenses.dp.step`):

1. m Dirac canaries on distinct coordinates of the flat trainable-parameter vector, each inserted
   with probability 1/2 (the one-run audit's coins);
2. at every step, each inserted canary joins the step independently with the defense's own Poisson
   rate q -- it is sampled exactly like an example -- and contributes Delta e_i to the sum before the
   noise, Delta being the sensitivity the gradient noise is calibrated to (the most one example can
   move the clipped sum; a canary is a worst-case example under the claim);
3. the engine hands the privatised sum g~_t (before any normaliser, learning rate or optimizer state)
   to the auditor, which accumulates <g~_t, e_i>.

Because each canary is an example the claim covers, sampled as the accountant assumes, the one-run
bound on these scores is a sound lower bound on the claim's example-level add/remove epsilon; a bound
above the claim means the implementation leaks more than it claims (the noise, clipping or sampling
do not do what the claim says). Only Poisson-sampled (add/remove) defenses are audited this way: for a
fixed-size without-replacement sampler (replace-one) inserting a canary would change the batch
composition the accountant reasons about.

:func:`gradient_canary_scores` is the same scoring for updates recorded any other way (a ``(T, d)``
array of privatised sums, or parameter deltas of plain SGD, which are proportional to them).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import torch

import dataclasses
from dataclasses import dataclass

from attacks.base import Attack, AttackConfig, Target
from attacks.bounds import default_guesses, one_run_bound
from attacks.executor import Executor
from attacks.result import AttackResult
from core.errors import ConfigError, one_of
from defenses.seeding import numpy_rng, torch_generator

DIRECTIONS = ("dirac", "gaussian")
_DENSE_LIMIT = 50_000_000  # m * d entries for Gaussian directions


def canary_directions(dim: int, m: int, kind: str = "dirac", seed: int = 0) -> torch.Tensor | np.ndarray:
    """Unit directions: Dirac -> int64 coordinates (m,) (distinct); Gaussian -> float32 (m, dim)."""
    if kind not in DIRECTIONS:
        raise one_of("directions", kind, DIRECTIONS)
    if m < 1 or dim < 1:
        raise ConfigError(f"canaries: need m >= 1 and dim >= 1, got m={m}, dim={dim}")
    if kind == "dirac":
        if m > dim:
            raise ConfigError(f"canaries: {m} Dirac canaries need at least {m} parameters, got {dim}")
        return numpy_rng(seed, "dirac-canaries").choice(dim, size=m, replace=False).astype(np.int64)
    if m * dim > _DENSE_LIMIT:
        raise ConfigError(f"canaries: {m} Gaussian directions of dimension {dim} are too large; use dirac")
    u = torch.randn(m, dim, generator=torch_generator(seed, "gaussian-canaries"))
    return u / u.norm(dim=1, keepdim=True)


def gradient_canary_scores(updates: torch.Tensor | Iterable[torch.Tensor], directions: torch.Tensor | np.ndarray,
                           reduce: str = "sum") -> np.ndarray:
    """Scores sum_t <update_t, u_i> (``reduce="sum"``) or max_t (``"max"``) for each canary direction."""
    if reduce not in ("sum", "max"):
        raise one_of("reduce", reduce, ("sum", "max"))
    per_step = [_project(u, directions) for u in (updates if not isinstance(updates, torch.Tensor)
                                                   or updates.dim() == 2 else [updates])]
    if not per_step:
        raise ConfigError("updates: no update observed")
    stacked = np.stack(per_step)
    return stacked.sum(axis=0) if reduce == "sum" else stacked.max(axis=0)


def _project(update: torch.Tensor, directions: torch.Tensor | np.ndarray) -> np.ndarray:
    update = torch.as_tensor(update).detach().flatten().double().cpu()
    if isinstance(directions, np.ndarray) and directions.dtype.kind == "i":
        return update[torch.as_tensor(directions)].numpy()
    return (torch.as_tensor(directions).double() @ update).numpy()


class GradientCanaries:
    """m gradient canaries over a d-dimensional parameter vector, with their insertion bits and scores.

    ``inserted`` defaults to independent fair coins from ``seed``. The engine calls
    :meth:`unit_gradient` for inserted canaries and :meth:`observe` once per step (see the module
    docstring); :meth:`result` turns the accumulated scores into an :class:`AttackResult` with the
    one-run bound.
    """

    def __init__(self, dim: int, m: int, *, clip_norm: float, kind: str = "dirac", seed: int = 0,
                 inserted: np.ndarray | None = None):
        if clip_norm <= 0:
            raise ConfigError(f"clip_norm: must be > 0, got {clip_norm!r}")
        self.dim, self.m, self.clip_norm, self.kind, self.seed = dim, m, float(clip_norm), kind, seed
        self.directions = canary_directions(dim, m, kind, seed)
        self.inserted = (numpy_rng(seed, "canary-insertion").random(m) < 0.5) if inserted is None \
            else np.asarray(inserted, dtype=bool)
        if self.inserted.shape != (m,):
            raise ConfigError(f"inserted: expected shape ({m},), got {self.inserted.shape}")
        self.scores = np.zeros(m)
        self.steps = 0

    def unit_gradient(self, i: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Canary i's per-unit gradient C u_i (flat, length d)."""
        if isinstance(self.directions, np.ndarray):
            g = torch.zeros(self.dim, dtype=dtype)
            g[int(self.directions[i])] = self.clip_norm
            return g
        return (self.clip_norm * self.directions[i]).to(dtype)

    def inserted_indices(self) -> np.ndarray:
        return np.flatnonzero(self.inserted)

    def observe(self, step: int, noisy_sum: torch.Tensor) -> None:
        """Accumulate <g~_t, u_i> for every canary (O(m) memory whatever the number of steps)."""
        if torch.as_tensor(noisy_sum).numel() != self.dim:
            raise ConfigError(f"noisy_sum: expected {self.dim} entries, got {torch.as_tensor(noisy_sum).numel()}")
        self.scores += _project(noisy_sum, self.directions)
        self.steps += 1

    def result(self, *, beta: float = 0.05, delta: float = 0.0, k_pos: int | None = None,
               k_neg: int | None = None, k_fraction: float = 0.1) -> AttackResult:
        if self.steps == 0:
            raise ConfigError("gradient canaries: no step was observed")
        kp, kn = default_guesses(self.m, k_fraction)
        kp, kn = (kp if k_pos is None else k_pos), (kn if k_neg is None else k_neg)
        bound = one_run_bound(self.scores, self.inserted, k_pos=kp, k_neg=kn, beta=beta, delta=delta)
        return AttackResult(attack="gradient-canary", variant=self.kind, scores=self.scores.copy(),
                            membership=self.inserted.copy(), index=np.arange(self.m),
                            config={"kind": self.kind, "clip_norm": self.clip_norm, "seed": self.seed},
                            counts={"n_canaries": self.m, "n_steps": self.steps, "dim": self.dim}, bound=bound)


@dataclass(frozen=True)
class GradientCanaryConfig(AttackConfig):
    """``canaries``: how many Dirac canaries (at most the number of trainable parameters)."""

    canaries: int = 1000

    def validate(self) -> None:
        super().validate()
        if self.canaries < 2:
            raise ConfigError(f"canaries: must be >= 2, got {self.canaries!r}")


class GradientCanaryAudit(Attack):
    """White-box one-run audit of a DP-SGD-style defense with Dirac gradient canaries (module docstring)."""

    name = "gradient-canary"
    Config = GradientCanaryConfig
    needs_model = False

    def run(self, target: Target, *, executor: Executor | None = None, progress: bool = False) -> AttackResult:
        from defenses.dp import DPDefense, dirac_canaries

        cfg = self.config
        defense = target.defense_ref.make()
        if not isinstance(defense, DPDefense):
            raise ConfigError(f"attack 'gradient-canary': defense {target.defense!r} has no DP-SGD engine to insert "
                              "gradient canaries into; use it with dpsgd, dp-clip, dp-gcl or logit-dp")
        probe = defense.prepare(target.data, target.budget, target.seed, device=target.device)
        if probe.plan.sampler != "poisson":
            raise ConfigError(f"attack 'gradient-canary': defense {target.defense!r} samples batches "
                              f"{probe.plan.sampler!r}; gradient canaries are sampled like examples only under "
                              "Poisson sampling (add/remove)")
        dp = probe.extras["dp"]
        dim, bound, rate = int(dp["param_count"]), float(dp["canary_bound"]), probe.plan.sample_rate
        if cfg.canaries > dim:
            raise ConfigError(f"canaries: {cfg.canaries} Dirac canaries need at least as many trainable "
                              f"parameters; the model has {dim}")
        canaries = GradientCanaries(dim, cfg.canaries, clip_norm=bound, kind="dirac",
                                    seed=target.derive_seed("gradient-canary"))
        coords = torch.as_tensor(canaries.directions)
        inserted = torch.as_tensor(canaries.inserted)
        sampling = torch_generator(target.derive_seed("gradient-canary"), "poisson")

        def source(t: int):
            include = inserted & (torch.rand(cfg.canaries, generator=sampling) < rate)
            return dirac_canaries(coords, bound, include, observer=lambda noisy: canaries.observe(t, noisy))

        defense.fit(target.data, target.budget, target.seed, device=target.device, progress=progress,
                    canaries=source)
        result = canaries.result(beta=cfg.beta, delta=cfg.delta if cfg.delta is not None else probe.claim.delta,
                                 k_pos=cfg.k_pos, k_neg=cfg.k_neg, k_fraction=cfg.k_fraction)
        notes = (
            f"white-box: {cfg.canaries} Dirac canaries of norm Delta={bound:.4g} (the gradient sensitivity), "
            f"each sampled with the defense's rate q={rate:.4g} at each of {canaries.steps} steps",)
        bound_with_notes = dataclasses.replace(result.bound, notes=result.bound.notes + notes)
        counts = {**result.counts, "sample_rate": rate, "canary_norm": bound}
        return dataclasses.replace(result, bound=bound_with_notes, counts=counts,
                                   config={**result.config, **self.config_dict(), "defense": target.defense})
