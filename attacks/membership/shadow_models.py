"""Shadow and reference models, trained with the target's own defense, through an executor.

Every attack that needs models other than the target (LiRA's reference models, Shokri's shadow
models, EncoderMI's shadow encoder, multi-run canary audits) describes each one as a
:class:`TrainJob`: the defense by name and parameters, the budget, the data (a :class:`DataRef` a
worker can reload, or the data itself), a seed, the inclusion mask over the candidate pool and a
probe (:mod:`privaudit.attacks.membership.statistics`) saying which numbers to send back. Jobs are picklable.

:func:`train_models` groups consecutive jobs that share defense, budget, data and device into
batches of at most ``max_stack`` and hands the batches to the executor; a batch is trained by the
defense's vectorised ``fit_many`` when it has one (:mod:`privaudit.defenses.training.ensemble`), else one ``fit`` per
job. A defense added later runs here unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from privaudit.attacks.executor import Executor, LocalExecutor
from privaudit.core.datasets import MembershipData, SplitConfig, Split, load_dataset
from privaudit.core.errors import ConfigError
from privaudit.core.registry import load_reference
from privaudit.defenses.base import Budget, Defense
from privaudit.defenses.training.ensemble import fit_many
from privaudit.defenses.registry import DEFENSES, make_defense


@dataclass(frozen=True)
class DataRef:
    """A recipe for a dataset split that any worker can rebuild (``load_dataset`` is deterministic)."""

    name: str
    seed: int = 0
    data_dir: str | None = None
    splits: SplitConfig | None = None

    def load(self) -> MembershipData:
        return _load(self)


@functools.lru_cache(maxsize=4)
def _load(ref: DataRef) -> MembershipData:
    return load_dataset(ref.name, seed=ref.seed, data_dir=ref.data_dir, splits=ref.splits)


def resolve_defense(name: str, params: Mapping[str, Any] | None = None) -> Defense:
    """A defense from the registry by name, or from ``module:Class`` (plugins, test doubles)."""
    if ":" in name and name not in DEFENSES:
        return load_reference(name, field="plugin defense")(dict(params or {}))
    return make_defense(name, dict(params or {}))


@dataclass(frozen=True)
class DefenseRef:
    """A defense by name (registry key or ``module:Class``) and hyper-parameters."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, name: str, params: Mapping[str, Any] | None = None) -> "DefenseRef":
        return cls(name, tuple(sorted((params or {}).items())))

    def make(self) -> Defense:
        return resolve_defense(self.name, dict(self.params))


@dataclass(frozen=True, eq=False)
class TrainJob:
    """One shadow/reference model: train ``defense`` on the members of a pool, then run ``probe``.

    The pool is ``data.pool`` (``pool_rows`` None) or the rows ``pool_rows`` of ``data.shadow``
    (Shokri / EncoderMI shadow models on the attacker's own data); ``membership`` marks which of its
    rows are trained on. The probe is applied to the pool (or its rows ``probe_rows``); without a
    probe the job returns the :class:`Trained` model itself (in-process use only).
    """

    defense: DefenseRef
    budget: Budget
    data: DataRef | MembershipData
    seed: int
    membership: np.ndarray
    pool_rows: np.ndarray | None = None
    probe: Callable[..., np.ndarray] | None = None
    probe_rows: np.ndarray | None = None
    device: str = "cpu"

    def materialize(self) -> MembershipData:
        data = self.data.load() if isinstance(self.data, DataRef) else self.data
        if self.pool_rows is not None:
            pool = data.shadow.subset(torch.as_tensor(np.asarray(self.pool_rows, dtype=np.int64)))
            return with_pool(data, pool, self.membership)
        return data.with_membership(torch.as_tensor(np.asarray(self.membership, dtype=bool)))

    def group_key(self) -> tuple:
        data_key = self.data if isinstance(self.data, DataRef) else id(self.data)
        return (self.defense, self.budget, data_key, self.device)


def with_pool(data: MembershipData, pool: Split, membership: np.ndarray | torch.Tensor) -> MembershipData:
    """``data`` with another candidate pool (and inclusion mask over it); other splits unchanged."""
    membership = torch.as_tensor(np.asarray(membership, dtype=bool))
    if membership.shape != (len(pool),):
        raise ConfigError(f"membership: expected shape ({len(pool)},), got {tuple(membership.shape)}")
    return dataclasses.replace(data, pool=pool, membership=membership)


def run_group(jobs: Sequence[TrainJob]) -> list[Any]:
    """Train a batch of jobs that share defense, budget, data and device; return each job's probe output."""
    first = jobs[0]
    defense = first.defense.make()
    datas = [j.materialize() for j in jobs]
    trained = fit_many(defense, datas, first.budget, [j.seed for j in jobs], device=first.device, progress=False)
    out: list[Any] = []
    for job, model, data in zip(jobs, trained, datas):
        if job.probe is None:
            out.append(model)
            continue
        split = data.pool if job.probe_rows is None else data.pool.subset(
            torch.as_tensor(np.asarray(job.probe_rows, dtype=np.int64)))
        out.append(job.probe(model, split, data.info))
    return out


def train_models(jobs: Sequence[TrainJob], executor: Executor | None = None, *, max_stack: int = 16) -> list[Any]:
    """Run every job (grouped for vectorised training) through ``executor``; results in job order."""
    if max_stack < 1:
        raise ConfigError(f"max_stack: must be >= 1, got {max_stack!r}")
    groups: list[list[TrainJob]] = []
    for job in jobs:
        if groups and len(groups[-1]) < max_stack and groups[-1][0].group_key() == job.group_key():
            groups[-1].append(job)
        else:
            groups.append([job])
    executor = executor or LocalExecutor()
    results = executor.map(run_group, groups)
    return [r for group in results for r in group]


def balanced_masks(k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """(k, n) inclusion masks with every example included in exactly k/2 models (LiRA's design).

    Each column is a uniformly random subset of size k/2, independent across examples; each row (a
    model's training set) then holds about n/2 examples, like the target's.
    """
    if k < 2 or k % 2:
        raise ConfigError(f"shadow_models: must be an even number >= 2, got {k!r}")
    order = rng.random((k, n)).argsort(axis=0)
    return order < k // 2


def paired_masks(k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """(k, n) inclusion masks in complementary pairs: models 2j and 2j + 1 split every example between them.

    Each example is in exactly one model of each pair (a fair coin per pair and example), so every even prefix
    of the models is itself balanced (each example IN for exactly half of the first 2r) and its r OUT models
    are r independent references trained without it: one set of K references serves the attacks at 2, 4, ...,
    K models (ML Privacy Meter pairs its reference models the same way). Each model holds about n / 2 examples.
    """
    if k < 2 or k % 2:
        raise ConfigError(f"shadow_models: must be an even number >= 2, got {k!r}")
    first = rng.random((k // 2, n)) < 0.5
    return np.stack([first, ~first], axis=1).reshape(k, n)


def stack_results(results: Sequence[np.ndarray]) -> np.ndarray:
    return np.stack([np.asarray(r) for r in results])
