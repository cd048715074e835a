"""A worked example of a new attack: representation stability under input noise.

    score(x) = mean_k cos( f(x), f(x + sigma * e_k) ),    e_k ~ N(0, I) fixed by the target's seed

A model fitted to its members tends to map a member's neighbourhood more stably than a non-member's (the
"stability" signal of Choquette-Choo et al. 2021's label-only attacks, here on the representation). The attack
reads only the released encoder (``Trained.features``), so it applies to every defense.

The contract (docs/extending.md): ``Attack(params).run(target) -> AttackResult`` with one score per audit-pool
candidate (higher = more likely a member), computed before the truth is read; the truth labels the result; the
epsilon lower bound comes from :meth:`~privaudit.attacks.base.Attack.one_run` with its guesses fixed by the
configuration, so it is sound for any scores.

Use it from a suite (with this folder on ``PYTHONPATH``)::

    allow_plugins = true
    [[attacks]]
    name = "my_attack:StabilityAttack"
    params = { perturbations = 4 }
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from privaudit.attacks.base import Attack, AttackConfig, Target, pool_membership
from privaudit.attacks.executor import Executor
from privaudit.attacks.result import AttackResult
from privaudit.core.errors import check_positive
from privaudit.defenses.training.seeding import torch_generator


@dataclass(frozen=True)
class StabilityConfig(AttackConfig):
    """``perturbations``: noisy copies per candidate; ``sigma``: their noise std (input units). The bound's
    settings (``beta``, ``k_fraction``, ...) come from :class:`AttackConfig`."""

    perturbations: int = 8
    sigma: float = 0.1

    def validate(self) -> None:
        super().validate()
        check_positive("perturbations", self.perturbations)
        check_positive("sigma", self.sigma)


class StabilityAttack(Attack):
    """Score each candidate by how little its representation moves under small input noise."""

    name = "my_attack:StabilityAttack"
    Config = StabilityConfig

    def run(self, target: Target, *, executor: Executor | None = None, progress: bool = False) -> AttackResult:
        self.check_target(target)
        scores = self.scores(target).numpy()
        membership, index = pool_membership(target)  # the truth, read only to label the scores
        return AttackResult(attack=self.name, variant="stability", scores=scores, membership=membership,
                            index=index, config=self.config_dict(), counts={"perturbations": self.config.perturbations},
                            bound=self.one_run(scores, membership, target))

    def scores(self, target: Target) -> torch.Tensor:
        """Mean cosine similarity between each candidate's features and those of its noisy copies."""
        cfg = self.config
        x = target.data.pool.x
        gen = torch_generator(target.derive_seed("stability"), "noise")
        clean = target.trained.features(x)
        total = torch.zeros(len(x), dtype=torch.float64)
        for _ in range(cfg.perturbations):
            noisy = target.trained.features(x + cfg.sigma * torch.randn(x.shape, generator=gen))
            total += torch.nn.functional.cosine_similarity(clean, noisy, dim=1).double()
        return total / cfg.perturbations
