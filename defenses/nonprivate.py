"""The non-private baseline: contrastive training (SimCLR, Barlow Twins, ...) with no privacy mechanism."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from accountants.claim import PrivacyClaim
from audit.datasets import MembershipData
from defenses.augment import augmentation_for, two_views
from defenses.base import Budget, Defense, Trained
from defenses.ensemble import StackedTrainer
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

    def fit_many(self, datas: Sequence[MembershipData], budget: Budget, seeds: Sequence[int], *,
                 device: str | torch.device = "cpu", progress: bool = True) -> list[Trained]:
        """K runs of :meth:`fit` (one per data set and seed) trained together with stacked parameters.

        Each model gets exactly what :meth:`fit` would give it: its own initialisation, batch order and
        augmentation stream, drawn from its own seed (:mod:`defenses.ensemble`).
        """
        cfg = self.config
        xs = [d.train.x.to(device) for d in datas]
        if len({d.info for d in datas}) > 1 or min(len(x) for x in xs) < cfg.batch_size:
            return [self.fit(d, budget, s, device=device, progress=progress) for d, s in zip(datas, seeds)]
        spec = cfg.model_spec(datas[0].info)
        models = [build_model(spec, seed=s).to(device) for s in seeds]
        augment = augmentation_for(datas[0].info, cfg.augmentation)
        objective = make_objective(cfg.loss, temperature=cfg.temperature, barlow_lambda=cfg.barlow_lambda)
        aug_gens = [torch_generator(s, "augment") for s in seeds]
        streams, totals = zip(*(make_batches("shuffle", len(x), cfg.batch_size, cfg.epochs,
                                             torch_generator(s, "batches")) for x, s in zip(xs, seeds)))
        trainer = StackedTrainer(models, cfg.optimizer, cfg.lr, cfg.momentum, cfg.weight_decay)

        def inputs(k: int, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return two_views(augment, xs[k][idx.to(device)], aug_gens[k])

        def losses(call, v1: torch.Tensor, v2: torch.Tensor) -> torch.Tensor:
            return torch.func.vmap(objective)(call(v1), call(v2))  # the objective of each model's batch

        histories = trainer.run(streams, max(totals), inputs, losses,
                                desc=f"{self.name} x{len(models)} ({cfg.loss})", progress=progress)
        claim = PrivacyClaim.non_private(source="non-private baseline")
        return [Trained(self.name, m.eval(), spec, claim, h, self.config_dict(), s)
                for m, h, s in zip(trainer.unstack(), histories, seeds)]
