"""The non-private baseline: contrastive training (SimCLR, Barlow Twins, ...) with no privacy mechanism."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from accountants.claim import PrivacyClaim
from audit.datasets import MembershipData
from defenses.augment import augmentation_for, two_views
from defenses.base import Budget, Defense, Trained
from defenses.losses import make_objective
from defenses.nn.model import build_model
from defenses.sampling import make_batches
from defenses.seeding import torch_generator
from defenses.training import ContrastiveConfig, make_optimizer, run_training


@dataclass(frozen=True)
class NonPrivateConfig(ContrastiveConfig):
    pass


class NonPrivate(Defense):
    """Ordinary self-supervised training on the members, epochs of shuffled batches."""

    name = "nonprivate"
    private = False
    Config = NonPrivateConfig

    def fit(self, data: MembershipData, budget: Budget, seed: int, *, device: str | torch.device = "cpu",
            progress: bool = True) -> Trained:
        cfg = self.config
        spec = cfg.model_spec(data.info)
        model = build_model(spec, seed=seed).to(device)
        x = data.train.x.to(device)
        augment = augmentation_for(data.info, cfg.augmentation)
        objective = make_objective(cfg.loss, temperature=cfg.temperature, barlow_lambda=cfg.barlow_lambda)
        aug_gen = torch_generator(seed, "augment")
        batches, steps = make_batches("shuffle", len(x), cfg.batch_size, cfg.epochs, torch_generator(seed, "batches"))
        optimizer = make_optimizer(cfg.optimizer, model.parameters(), cfg.lr, cfg.momentum, cfg.weight_decay)

        def step(idx: torch.Tensor) -> dict[str, float]:
            v1, v2 = two_views(augment, x[idx.to(x.device)], aug_gen)
            loss = objective(model(v1), model(v2))
            loss.backward()
            return {"loss": loss.item()}

        model.train()
        history = run_training(batches, steps, step, optimizer, desc=f"{self.name} ({cfg.loss})", progress=progress)
        model.eval()
        claim = PrivacyClaim.non_private(source="non-private baseline")
        return Trained(self.name, model, spec, claim, history, self.config_dict(), seed)
