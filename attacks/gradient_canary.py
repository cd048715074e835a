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

What the DP-SGD engine must provide (to be wired when it lands; nothing here trains a model):

1. a hook accepting a :class:`GradientCanaries` object before training;
2. at every step t, for each canary with ``inserted[i]`` that the engine's own sampler selects (the
   same rate and sampler as any example: the canary is a unit like the others), one extra per-unit
   gradient ``canaries.unit_gradient(i)`` (a flat vector over the trainable parameters, in the
   engine's parameter order, of norm C), clipped and summed with the batch's units *before* noise;
3. after noise is added and before any division by the batch size, learning-rate scaling, momentum or
   Adam state, a call ``canaries.observe(t, noisy_sum)`` with the flat privatised sum g~_t;
4. the parameter order used for flattening (``[p for p in model.parameters() if p.requires_grad]``,
   ``torch.cat([g.flatten() ...])``) and the clip norm C, so ``unit_gradient`` matches it.

:func:`gradient_canary_scores` is the same scoring for updates recorded any other way (a ``(T, d)``
array of privatised sums, or parameter deltas of plain SGD, which are proportional to them).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import torch

from attacks.bounds import default_guesses, one_run_bound
from attacks.result import AttackResult
from audit.errors import ConfigError, one_of
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
