"""A user's own PyTorch classifier as a defense, so that privaudit's attacks can audit it.

The model comes from an importable factory ``package.module:function`` (called with no arguments,
returning an ``nn.Module`` that maps a batch of the dataset's inputs (N, C, H, W) to class logits), and is
trained on the members by the user's training function ``package.module:function`` or, without one, by a
plain SGD loop (cross-entropy, shuffled mini-batches). LiRA's reference models (Carlini et al. 2022) are
built by the same factory and trained by the same function, so they follow the user's recipe.

The training function is called as ``train_fn(model, x, y, seed=seed)`` with the members' inputs and
labels (CPU tensors) and must train ``model`` in place (its return value is ignored). Factories and
training functions are code: importing one runs it, with the user's permissions, like any plugin.

No privacy is claimed (epsilon = infinity): privaudit does not know what the user's code does; the audit
measures leakage and a sound lower bound, and a DP user sets it beside their own claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from privaudit.accountants.claim import PrivacyClaim
from privaudit.core.datasets import MembershipData
from privaudit.core.errors import ConfigError, check_positive
from privaudit.core.registry import load_reference
from privaudit.defenses.base import Budget, Defense, Trained
from privaudit.defenses.nn.model import ModelSpec
from privaudit.defenses.training.seeding import derive_seed, torch_generator


@dataclass(frozen=True)
class UserModelConfig:
    """``factory``: ``module:function`` building the model; ``train_fn``: ``module:function`` training it in
    place (empty: the default SGD loop with ``epochs``, ``batch_size``, ``lr``, ``momentum``); ``init_seed``: the
    seed of every run's initialisation (-1: derived from the run's seed; a multi-run audit fixes it, as a DP
    guarantee holds for any initialisation chosen independently of the data)."""

    factory: str = ""
    train_fn: str = ""
    epochs: int = 20
    batch_size: int = 64
    lr: float = 0.05
    momentum: float = 0.9
    init_seed: int = -1  # -1: each run's initialisation from its own seed; >= 0: every run starts from this one

    def validate(self) -> None:
        if not self.factory:
            raise ConfigError("factory: required, as package.module:function returning an nn.Module")
        for name in ("epochs", "batch_size", "lr"):
            check_positive(name, getattr(self, name))
        check_positive("momentum", self.momentum, allow_zero=True)
        if not -1 <= self.init_seed < 2 ** 32:
            raise ConfigError(f"init_seed: must be -1 or lie in [0, 2^32), got {self.init_seed!r}")


class LogitsAsRepresentation(nn.Module):
    """Wraps a classifier so that :class:`Trained` reads its logits: ``represent(x)`` = the model's logits
    (the released classifier is then the identity)."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def load_callable(reference: str, field: str) -> Callable[..., Any]:
    """The function ``module:function`` names (a plugin: importing it runs its code), checked to be callable."""
    value = load_reference(reference, field=field)
    if not callable(value):
        raise ConfigError(f"{field} {reference!r}: is a {type(value).__name__}, not a function (give "
                          "module:function)")
    return value


def _check_no_arguments(make: Callable[..., Any], factory: object) -> None:
    """Refuse a factory that cannot be called with no arguments (e.g. ``os:system``), before calling it."""
    import inspect

    try:
        inspect.signature(make).bind()
    except TypeError as exc:
        raise ConfigError(f"factory {factory!r}: must build the model when called with no arguments ({exc})") from None
    except ValueError:
        return  # no signature to read (some builtins): the call itself decides


def build(factory: str | Callable[[], nn.Module], seed: int | None = None) -> nn.Module:
    """Call the factory (under ``torch.manual_seed(seed)`` when given, so initialisation is reproducible)."""
    make = load_callable(factory, "factory") if isinstance(factory, str) else factory
    _check_no_arguments(make, factory)
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        net = make()
    if not isinstance(net, nn.Module):
        raise ConfigError(f"factory {factory!r}: returned {type(net).__name__}, not a torch.nn.Module")
    return net


def sgd_train(net: nn.Module, x: torch.Tensor, y: torch.Tensor, *, seed: int, epochs: int, batch_size: int,
              lr: float, momentum: float) -> None:
    """The default loop: SGD with momentum on mean cross-entropy, shuffled batches from ``(seed, "batches")``."""
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    gen = torch_generator(seed, "batches")
    net.train()
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), batch_size):
            idx = order[i:i + batch_size]
            opt.zero_grad()
            F.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
    net.eval()


def wrap(net: nn.Module, data: MembershipData, config: dict[str, Any], seed: int, name: str = "user-model",
         claim: PrivacyClaim | None = None) -> Trained:
    """A :class:`Trained` around a classifier ``net`` (the user's own, or one this module trained)."""
    net.eval()
    spec = ModelSpec(encoder="mlp", in_shape=tuple(data.info.shape), extra={"factory": config.get("factory", "")})
    claim = claim or PrivacyClaim.non_private(source="user model: privaudit does not know its privacy mechanism")
    return Trained(name, LogitsAsRepresentation(net), spec, claim, {}, dict(config), seed, classifier=nn.Identity())


class UserModel(Defense):
    """Train the user's factory-built classifier on the members (their training function or SGD)."""

    name = "user-model"
    private = False
    Config = UserModelConfig
    #: Parameters that name code to import (``module:function``): a suite needs ``allow_plugins`` to give them.
    code_params = ("factory", "train_fn")

    def fit(self, data: MembershipData, budget: Budget, seed: int, *, device: str | torch.device = "cpu",
            progress: bool = False) -> Trained:
        if budget.private:
            raise ConfigError("--target-epsilon/--noise-multiplier: the user-model defense adds no noise")
        cfg = self.config
        net = build(cfg.factory, derive_seed(seed, "init") if cfg.init_seed < 0 else cfg.init_seed)
        x, y = data.train.x, data.train.y
        if cfg.train_fn:
            load_callable(cfg.train_fn, "train_fn")(net, x, y, seed=seed)
        else:
            sgd_train(net, x, y, seed=seed, epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                      momentum=cfg.momentum)
        return wrap(net, data, self.config_dict(), seed, self.name)
