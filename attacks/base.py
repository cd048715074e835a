"""The attack contract: ``Attack(params).run(target, executor=...) -> AttackResult``.

A :class:`Target` is everything an attacker-auditor is given: the trained model, the membership
split it was trained from (the audit pool's candidates were each included with probability 1/2),
and the training recipe — defense name, hyper-parameters, budget, seed — so that shadow and
reference models are trained with the target's own defense (any defense in the registry, or a
``module:Class`` plugin). Attacks never look at ``target.data.membership`` except to label the
result: scores are computed before the truth is read.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import torch

from privaudit.attacks.bounds.lower_bound import EpsilonLowerBound, check_relation_unit
from privaudit.attacks.bounds.one_run import default_guesses, one_run_bound, paired_one_run_bound, pool_pairs
from privaudit.attacks.executor import Executor
from privaudit.attacks.result import AttackResult
from privaudit.attacks.membership.shadow_models import DataRef, DefenseRef, resolve_defense
from privaudit.core.config import build_config
from privaudit.core.datasets import MembershipData
from privaudit.core.errors import ConfigError, check_probability
from privaudit.defenses.base import Budget, Trained
from privaudit.defenses.training.seeding import derive_seed


@dataclass
class Target:
    """A trained target and the recipe that produced it.

    ``params`` are the defense's hyper-parameters (defaults to ``trained.config``); ``data_ref``, when
    given, lets remote workers reload the data instead of receiving it.
    """

    trained: Trained | None
    data: MembershipData
    defense: str
    params: dict[str, Any] = field(default_factory=dict)
    budget: Budget = field(default_factory=Budget)
    seed: int = 0
    device: str = "cpu"
    data_ref: DataRef | None = None
    #: Work attacks share on this target (reference models and their statistics), keyed by what produced it.
    cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def train(cls, defense: str, data: MembershipData, *, params: Mapping[str, Any] | None = None,
              budget: Budget | None = None, seed: int = 0, device: str = "cpu", progress: bool = False,
              data_ref: DataRef | None = None) -> "Target":
        """Fit ``defense`` on ``data.train`` and wrap the result as a target."""
        budget = budget or Budget()
        trained = resolve_defense(defense, params).fit(data, budget, seed, device=device, progress=progress)
        return cls(trained, data, defense, dict(params or {}), budget, seed, str(device), data_ref)

    @property
    def defense_ref(self) -> DefenseRef:
        params = self.params if self.params or self.trained is None else self.trained.config
        return DefenseRef.of(self.defense, params)

    @property
    def data_source(self) -> DataRef | MembershipData:
        return self.data_ref if self.data_ref is not None else self.data

    @property
    def claim_delta(self) -> float:
        return 0.0 if self.trained is None else float(self.trained.claim.delta)

    def derive_seed(self, *purpose: object) -> int:
        return derive_seed(self.seed, "attack", *purpose)


@dataclass(frozen=True)
class AttackConfig:
    """Settings shared by every attack: the one-run bound's confidence, delta and guesses.

    ``beta``: 1 - confidence of the epsilon lower bound. ``delta``: the delta it is stated at (None:
    the target claim's delta). ``k_fraction``: k+ = k- = this fraction of the scored candidates,
    fixed before any score is seen (or give ``k_pos`` / ``k_neg`` explicitly).
    """

    beta: float = 0.05
    delta: float | None = None
    k_fraction: float = 0.1
    k_pos: int | None = None
    k_neg: int | None = None

    def validate(self) -> None:
        check_probability("beta", self.beta)
        if self.delta is not None and not 0 <= self.delta < 1:
            raise ConfigError(f"delta: must lie in [0, 1), got {self.delta!r}")
        check_probability("k_fraction", self.k_fraction)
        for name in ("k_pos", "k_neg"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"{name}: must be >= 0, got {value!r}")


class Attack(ABC):
    """Base class of every attack: ``name``, a ``Config`` dataclass (extends :class:`AttackConfig`), ``run``.

    ``needs_model``: False for audits that train their own runs (canaries) and need only the recipe.
    ``needs_nonmembers``: False for audits whose units are their own (inserted by the auditor's coins), which run
    on a suite that trains on every pool example (``splits.inclusion_probability = 1``).
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type] = AttackConfig
    needs_model: ClassVar[bool] = True
    needs_nonmembers: ClassVar[bool] = True

    def __init__(self, params: Mapping[str, Any] | None = None, **overrides: Any):
        self.config = build_config(self.Config, {**(params or {}), **overrides}, owner=f"attack {self.name!r}",
                                   prefix=self.name)

    def config_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self.config)

    @abstractmethod
    def run(self, target: Target, *, executor: Executor | None = None, progress: bool = False) -> AttackResult:
        """Attack ``target`` and return per-example scores with the true membership."""

    # -- shared helpers ----------------------------------------------------------------------------
    def check_target(self, target: Target) -> None:
        if self.needs_model and target.trained is None:
            raise ConfigError(f"attack {self.name!r} needs a trained target model")

    def one_run(self, scores: np.ndarray, membership: np.ndarray, target: Target) -> EpsilonLowerBound:
        """The one-run bound of these scores with k+ / k- fixed by the configuration (not by the scores).

        Inclusion of one candidate is an add/remove neighbour at the example level. When the target's
        claim is **replace-one** at the example level, the candidates are paired in advance and the
        mixed pairs are replace-one slots (:func:`privaudit.attacks.bounds.one_run.pool_pairs`), scored by the
        difference of the two candidates' scores and bounded by
        :func:`privaudit.attacks.bounds.one_run.paired_one_run_bound` (k+ = k- = ``k_fraction`` of the slots). Any other
        claim relation or unit gets the add/remove example bound with a note saying it is not comparable with the claim.
        """
        cfg = self.config
        claim = None if target.trained is None else target.trained.claim
        if claim is not None and claim.relation == "replace-one" and claim.unit == "example":
            pairs, first_in = pool_pairs(membership, seed=target.derive_seed("replace-one-pairs"))
            s = np.asarray(scores, dtype=np.float64).ravel()
            diff = s[pairs[:, 0]] - s[pairs[:, 1]]
            k_pos, k_neg = default_guesses(max(diff.size, 1), cfg.k_fraction)
            k_pos = min(k_pos if cfg.k_pos is None else cfg.k_pos, diff.size // 2)
            k_neg = min(k_neg if cfg.k_neg is None else cfg.k_neg, diff.size - k_pos)
            bound = paired_one_run_bound(diff, first_in, k_pos=k_pos, k_neg=k_neg, beta=cfg.beta,
                                         delta=self.delta_for(target))
            note = (f"replace-one slots: the {np.asarray(scores).size} audit candidates paired by a seeded "
                    f"permutation fixed before membership is read; the {diff.size} pairs with exactly one member "
                    "are the slots (which one is a fair coin)")
            return dataclasses.replace(bound, notes=bound.notes + (note,))
        m = int(np.asarray(scores).size)
        k_pos, k_neg = default_guesses(m, cfg.k_fraction)
        k_pos = k_pos if cfg.k_pos is None else cfg.k_pos
        k_neg = k_neg if cfg.k_neg is None else cfg.k_neg
        bound = one_run_bound(scores, membership, k_pos=k_pos, k_neg=k_neg, beta=cfg.beta,
                              delta=self.delta_for(target))
        return dataclasses.replace(bound, notes=bound.notes + relation_notes(target))

    def delta_for(self, target: Target) -> float:
        return self.config.delta if self.config.delta is not None else target.claim_delta

    # -- canary audits: the defense and relation they audit -----------------------------------------
    def audited_defense(self, target: Target, kind: type, lacks: str) -> Any:
        """The target's defense, made from its recipe; a ConfigError naming what it ``lacks`` unless it is a
        ``kind`` (the audits that insert canaries into a defense's own mechanism)."""
        defense = target.defense_ref.make()
        if not isinstance(defense, kind):
            raise ConfigError(f"attack {self.name!r}: defense {target.defense!r} has no {lacks}")
        return defense

    def audited_relation(self, target: Target, claim_relation: str, claim_unit: str,
                         supported: Sequence[tuple[str, str]], *, batches: str | None = None,
                         name_the_defense: bool = False) -> str:
        """The relation the bound is stated at: the configured one, else the claim's. It must be one this audit
        supports for the defense (``batches``: the sampler, named in the error) and the claim's own, since a bound
        at another relation is not comparable with the claim (``name_the_defense``: the error says whose claim)."""
        relation = self.config.relation or claim_relation
        where = f"attack {self.name!r} on {target.defense!r}" + (f" ({batches} batches)" if batches else "")
        check_relation_unit(relation, claim_unit, supported, what=where)
        if relation != claim_relation:
            bound_at, claim = ((f"relation={relation!r}, unit={claim_unit!r}", f"{target.defense!r}'s claim at")
                               if name_the_defense else (f"relation={relation!r}", "the claim's"))
            raise ConfigError(f"relation/unit: attack {self.name!r} bound at {bound_at} cannot be compared with "
                              f"{claim} relation={claim_relation!r}, unit={claim_unit!r}")
        return relation


def relation_notes(target: Target) -> tuple[str, ...]:
    """Caveats when the claim's neighbouring relation or unit is not example-level add/remove."""
    if target.trained is None:
        return ()
    claim = target.trained.claim
    notes = []
    if claim.relation != "add-remove":
        notes.append(f"the bound is on example-level add/remove epsilon; the claim is {claim.relation}, "
                     "which does not bound add/remove epsilon, so the two are not directly comparable")
    if claim.unit != "example":
        notes.append(f"the claim protects a {claim.unit}; one inclusion bit here is one example")
    return tuple(notes)


def pool_membership(target: Target) -> tuple[np.ndarray, np.ndarray]:
    """The audit pool's truth and raw-dataset indices (read only to label the result)."""
    return target.data.membership.numpy().astype(bool), target.data.pool.index.numpy()


def as_tensor(x: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x))
