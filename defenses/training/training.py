"""The training loop every defense shares, and the hyper-parameters of contrastive training.

A defense supplies a *step function* that, given a batch of indices, leaves the (possibly clipped
and noised) gradient in each parameter's ``.grad`` and returns metrics; :func:`run_training` owns
the rest: progress bar, optimizer step, history, timing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch

from privaudit.core.datasets import DatasetInfo
from privaudit.core.errors import check_positive, one_of
from privaudit.defenses.training.augment import AUGMENTATIONS
from privaudit.defenses.losses import BARLOW_LAMBDA, OBJECTIVES
from privaudit.defenses.nn.model import ENCODERS, ModelSpec

OPTIMIZERS = ("sgd", "adam")

StepFn = Callable[[torch.Tensor], dict[str, float]]


def validate_fields(cfg: object, *, choices: Sequence[tuple[str, Sequence[str]]] = (), positive: Sequence[str] = (),
                    nonnegative: Sequence[str] = ()) -> None:
    """Check, in this order, that each named field is one of its choices, then positive, then non-negative
    (the first failure is the ConfigError raised)."""
    for name, allowed in choices:
        value = getattr(cfg, name)
        if value not in allowed:
            raise one_of(name, value, allowed)
    for name in positive:
        check_positive(name, getattr(cfg, name))
    for name in nonnegative:
        check_positive(name, getattr(cfg, name), allow_zero=True)


@dataclass(frozen=True)
class EncoderFields:
    """The encoder's shape (:class:`~privaudit.defenses.nn.model.ModelSpec`'s encoder fields)."""

    encoder: str = "cnn"
    width: int = 16
    rep_dim: int = 64
    pool: int = 1  # the CNN's final average pooling side (ModelSpec.pool)

    def encoder_spec(self, info: DatasetInfo, **projector) -> ModelSpec:
        """The model spec of this encoder on ``info``'s inputs (``projector``: the projection head's fields)."""
        return ModelSpec(encoder=self.encoder, in_shape=info.shape, width=self.width, rep_dim=self.rep_dim,
                         pool=self.pool, **projector)


@dataclass(frozen=True)
class ObjectiveFields:
    """The projection head and the contrastive objective (:data:`privaudit.defenses.losses.OBJECTIVES`)."""

    proj_hidden: int = 128  # 0: no projection head (the loss acts on the representation)
    proj_dim: int = 32
    loss: str = "simclr"
    temperature: float = 0.5
    barlow_lambda: float = BARLOW_LAMBDA


@dataclass(frozen=True)
class OptimisationFields:
    """Minibatch training: length, optimizer and augmentation (defaults: contrastive training's)."""

    epochs: int = 30
    batch_size: int = 128
    lr: float = 1e-3
    optimizer: str = "adam"
    momentum: float = 0.9
    weight_decay: float = 0.0
    augmentation: str | None = None  # None: the dataset's default family


# Dataclass fields follow the bases from the last one: encoder, objective, then optimisation fields.
@dataclass(frozen=True)
class ContrastiveConfig(OptimisationFields, ObjectiveFields, EncoderFields):
    """Hyper-parameters shared by every contrastive defense (defense configs extend this)."""

    def validate(self) -> None:
        choices = [("encoder", ENCODERS), ("loss", OBJECTIVES), ("optimizer", OPTIMIZERS)]
        if self.augmentation is not None:
            choices.append(("augmentation", AUGMENTATIONS))
        validate_fields(self, choices=choices, nonnegative=("weight_decay", "barlow_lambda", "proj_hidden"),
                        positive=("width", "rep_dim", "proj_dim", "epochs", "batch_size", "lr",
                                  "temperature"))

    def model_spec(self, info: DatasetInfo) -> ModelSpec:
        # Barlow Twins' loss standardises features itself (DPCL Eq. 6); SimCLR-style losses use cosine.
        return self.encoder_spec(info, proj_hidden=self.proj_hidden, proj_dim=self.proj_dim,
                                 normalize=self.loss != "barlow")


def make_optimizer(name: str, params: Iterable[torch.nn.Parameter], lr: float, momentum: float = 0.9,
                   weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """SGD with momentum or Adam."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    raise one_of("optimizer", name, OPTIMIZERS)


def run_training(batches: Iterable[torch.Tensor], total: int, step: StepFn, optimizer: torch.optim.Optimizer, *,
                 desc: str = "train", progress: bool = True) -> dict[str, list[float]]:
    """Run ``step`` on every batch and step ``optimizer``; return the history of metrics.

    The history has one entry per step for every metric the step function returns, plus ``step``
    and ``seconds`` (wall time since the start). Empty batches (possible under Poisson sampling)
    still call ``step`` so that noise is added as the accountant assumes.
    """
    from tqdm.auto import tqdm

    history: dict[str, list[float]] = {"step": [], "seconds": []}
    start = time.perf_counter()
    bar = tqdm(total=total, desc=desc, disable=None if progress else True, leave=False, dynamic_ncols=True)
    try:
        for i, idx in enumerate(batches):
            optimizer.zero_grad(set_to_none=True)
            metrics = step(idx)
            optimizer.step()
            history["step"].append(i)
            history["seconds"].append(time.perf_counter() - start)
            for key, value in metrics.items():
                history.setdefault(key, []).append(float(value))
            if "loss" in metrics and i % 10 == 0:
                bar.set_postfix(loss=f"{metrics['loss']:.4f}")
            bar.update(1)
    finally:
        bar.close()
    return history
