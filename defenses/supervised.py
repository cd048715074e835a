"""The supervised baseline: encoder + linear head trained from scratch with cross-entropy, non-private.

It gives the attacks a classifier target (LiRA's logit statistic, Shokri's prediction vectors,
mislabelled canaries), and, with many epochs, no augmentation and no weight decay (the defaults),
a deliberately overfit model that membership inference should break. It trains through
:class:`privaudit.defenses.training.ensemble.StackedTrainer`, so ``fit`` and ``fit_many`` (K models at once, for
shadow and reference models) are the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from privaudit.accountants.claim import PrivacyClaim
from privaudit.core.datasets import DatasetInfo, MembershipData
from privaudit.core.errors import ConfigError
from privaudit.defenses.training.augment import AUGMENTATIONS, augmentation_for
from privaudit.defenses.base import Budget, Defense, Trained
from privaudit.defenses.training.ensemble import StackedTrainer
from privaudit.defenses.nn.classifier import ClassifierNet
from privaudit.defenses.nn.model import ENCODERS, ModelSpec, build_model
from privaudit.defenses.training.sampling import make_batches
from privaudit.defenses.training.seeding import derive_seed, torch_generator
from privaudit.defenses.training.training import OPTIMIZERS, EncoderFields, OptimisationFields, validate_fields

AUGMENT_CHOICES = ("none", "default", *AUGMENTATIONS)


@dataclass(frozen=True)
class SupervisedConfig(OptimisationFields, EncoderFields):
    """Hyper-parameters of the supervised baseline (defaults overfit a small training set)."""

    epochs: int = 60
    batch_size: int = 64
    lr: float = 2e-3
    augmentation: str = "none"  # none, default (the dataset's family), or a family name

    def validate(self) -> None:
        validate_fields(self, choices=[("encoder", ENCODERS), ("optimizer", OPTIMIZERS),
                                       ("augmentation", AUGMENT_CHOICES)],
                        positive=("width", "rep_dim", "epochs", "batch_size", "lr"), nonnegative=("weight_decay",))

    def model_spec(self, info: DatasetInfo) -> ModelSpec:
        return self.encoder_spec(info)


def build_head(in_features: int, num_classes: int, seed: int) -> nn.Linear:
    """A linear head initialised from its own seed stream (``(seed, "head")``)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "head"))
        return nn.Linear(in_features, num_classes)


class Supervised(Defense):
    """Cross-entropy training of encoder + linear head on the members, shuffled batches, no noise."""

    name = "supervised"
    private = False
    Config = SupervisedConfig

    def fit(self, data: MembershipData, budget: Budget, seed: int, *, device: str | torch.device = "cpu",
            progress: bool = True) -> Trained:
        return self.fit_many([data], budget, [seed], device=device, progress=progress)[0]

    def fit_many(self, datas: Sequence[MembershipData], budget: Budget, seeds: Sequence[int], *,
                 device: str | torch.device = "cpu", progress: bool = True) -> list[Trained]:
        """Train one model per (data, seed), all together (stacked parameters, one vmapped step)."""
        if budget.private:
            raise ConfigError(f"--target-epsilon/--noise-multiplier: defense {self.name!r} is not private")
        cfg = self.config
        sizes = [len(d.train) for d in datas]
        if min(sizes) < 1:
            raise ConfigError("supervised: the training set is empty")
        batch = min(cfg.batch_size, min(sizes))
        if len(datas) > 1 and (len({d.info for d in datas}) > 1 or batch != min(cfg.batch_size, max(sizes))):
            # Different effective batch sizes cannot share one stacked step.
            return [self.fit(d, budget, s, device=device, progress=progress) for d, s in zip(datas, seeds)]
        info = datas[0].info
        spec = cfg.model_spec(info)
        models = [build_model(spec, seed=s).to(device) for s in seeds]
        nets = [ClassifierNet(m.encoder, build_head(spec.rep_dim, info.num_classes, s).to(device))
                for m, s in zip(models, seeds)]
        xs = [d.train.x.to(device) for d in datas]
        ys = [d.train.y.to(device) for d in datas]
        augment = None if cfg.augmentation == "none" else augmentation_for(
            info, None if cfg.augmentation == "default" else cfg.augmentation)
        aug_gens = [torch_generator(s, "augment") for s in seeds]
        streams, totals = zip(*(make_batches("shuffle", n, batch, cfg.epochs, torch_generator(s, "batches"))
                                for n, s in zip(sizes, seeds)))
        trainer = StackedTrainer(nets, cfg.optimizer, cfg.lr, cfg.momentum, cfg.weight_decay)

        def inputs(k: int, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            idx = idx.to(device)
            x = xs[k][idx]
            return (x if augment is None else augment(x, aug_gens[k])), ys[k][idx]

        def losses(call, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            logits = call(x)  # (K, B, classes): mean cross-entropy per model
            return F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(dim=1)

        histories = trainer.run(streams, max(totals), inputs, losses,
                                desc=f"{self.name} x{len(nets)}", progress=progress)
        trainer.unstack()
        claim = PrivacyClaim.non_private(source="supervised non-private baseline")
        out = []
        for model, net, h, s, d in zip(models, nets, histories, seeds, datas):
            model.eval()
            net.eval()
            with torch.no_grad():
                train_acc = _accuracy(net, d.train.x, d.train.y, device)
                test_acc = _accuracy(net, d.test.x, d.test.y, device)
            out.append(Trained(self.name, model, spec, claim, h, self.config_dict(), s, classifier=net.head,
                               extras={"utility": {"train_accuracy": train_acc, "test_accuracy": test_acc}}))
        return out


def _accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor, device: str | torch.device) -> float:
    if len(x) == 0:
        return float("nan")
    preds = torch.cat([net(x[i:i + 1024].to(device)).argmax(1).cpu() for i in range(0, len(x), 1024)])
    return float((preds == y).float().mean())
