"""The non-private baseline: contrastive training (SimCLR, Barlow Twins, ...) with no privacy mechanism.

:func:`train_contrastive` trains a fresh encoder on any tensor of images; the baseline defense calls it
on the members, and defenses that pretrain on public data (ALM, DP-FedEmb) call it on ``data.public``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

import torch

from privaudit.accountants.claim import PrivacyClaim
from privaudit.core.datasets import DatasetInfo, MembershipData
from privaudit.defenses.training.augment import augmentation_for, two_views, views_many
from privaudit.defenses.base import Budget, Defense, Trained
from privaudit.defenses.training.ensemble import StackedTrainer
from privaudit.defenses.losses import make_objective, nt_xent
from privaudit.defenses.nn.model import ContrastiveModel, ModelSpec, build_model
from privaudit.defenses.training.sampling import make_batches
from privaudit.defenses.training.seeding import torch_generator
from privaudit.defenses.training.training import ContrastiveConfig, make_optimizer, run_training


@dataclass(frozen=True)
class NonPrivateConfig(ContrastiveConfig):
    pass


def train_contrastive(x: torch.Tensor, info: DatasetInfo, cfg: ContrastiveConfig, seed: int, *,
                      device: str | torch.device = "cpu", progress: bool = True,
                      desc: str = "contrastive", init_state: dict[str, torch.Tensor] | None = None,
                      max_steps: int | None = None) -> tuple[ContrastiveModel, ModelSpec, dict[str, list[float]]]:
    """Train a freshly initialised encoder + projection head on the images ``x`` without privacy.

    Epochs of shuffled batches of two augmented views, objective ``cfg.loss``; every random stream
    (initialisation, batches, augmentations) derives from ``seed``. ``init_state`` starts from
    those weights instead of the seeded initialisation; ``max_steps`` stops after that many steps.
    Returns the model (in eval mode), its spec and the training history.
    """
    spec = cfg.model_spec(info)
    model = build_model(spec, seed=seed).to(device)
    if init_state is not None:
        model.load_state_dict({k: v.to(device) for k, v in init_state.items()})
    x = x.to(device)
    augment = augmentation_for(info, cfg.augmentation)
    objective = make_objective(cfg.loss, temperature=cfg.temperature, barlow_lambda=cfg.barlow_lambda)
    aug_gen = torch_generator(seed, "augment")
    batches, steps = make_batches("shuffle", len(x), cfg.batch_size, cfg.epochs, torch_generator(seed, "batches"))
    if max_steps is not None and max_steps < steps:
        batches, steps = itertools.islice(batches, max_steps), max_steps
    optimizer = make_optimizer(cfg.optimizer, model.parameters(), cfg.lr, cfg.momentum, cfg.weight_decay)

    def step(idx: torch.Tensor) -> dict[str, float]:
        v1, v2 = two_views(augment, x[idx.to(x.device)], aug_gen)
        loss = objective(model(v1), model(v2))
        loss.backward()
        return {"loss": loss.item()}

    model.train()
    history = run_training(batches, steps, step, optimizer, desc=desc, progress=progress)
    model.eval()
    return model, spec, history


class NonPrivate(Defense):
    """Ordinary self-supervised training on the members, epochs of shuffled batches."""

    name = "nonprivate"
    private = False
    Config = NonPrivateConfig

    def fit(self, data: MembershipData, budget: Budget, seed: int, *, device: str | torch.device = "cpu",
            progress: bool = True) -> Trained:
        cfg = self.config
        model, spec, history = train_contrastive(data.train.x, data.info, cfg, seed, device=device,
                                                 progress=progress, desc=f"{self.name} ({cfg.loss})")
        claim = PrivacyClaim.non_private(source="non-private baseline")
        return Trained(self.name, model, spec, claim, history, self.config_dict(), seed)

    def fit_many(self, datas: Sequence[MembershipData], budget: Budget, seeds: Sequence[int], *,
                 device: str | torch.device = "cpu", progress: bool = True) -> list[Trained]:
        """K runs of :meth:`fit` (one per data set and seed) trained together with stacked parameters.

        Each model gets exactly what :meth:`fit` would give it: its own initialisation, batch order and
        augmentation stream, drawn from its own seed (:mod:`privaudit.defenses.training.ensemble`).
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

        def batch(ks: list[int], idxs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
            return views_many(augment, [xs[k][i.to(device)] for k, i in zip(ks, idxs)], [aug_gens[k] for k in ks])

        def losses(call, v1: torch.Tensor, v2: torch.Tensor) -> torch.Tensor:
            b = v1.shape[1]
            z = call(torch.cat([v1, v2], dim=1))  # both views in one pass of the K models
            if cfg.loss == "simclr":  # NT-Xent takes the model axis as a batch dimension (no vmap)
                return nt_xent(z[:, :b], z[:, b:], cfg.temperature, reduction="none").mean(dim=-1)
            return torch.func.vmap(objective)(z[:, :b], z[:, b:])  # the objective of each model's batch

        histories = trainer.run(streams, max(totals), inputs, losses, make_batch=batch,
                                desc=f"{self.name} x{len(models)} ({cfg.loss})", progress=progress)
        claim = PrivacyClaim.non_private(source="non-private baseline")
        return [Trained(self.name, m.eval(), spec, claim, h, self.config_dict(), s)
                for m, h, s in zip(trainer.unstack(), histories, seeds)]
