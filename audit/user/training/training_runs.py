"""Run the user's unmodified training function under :class:`~privaudit.defenses.watch.opacus_watch.OpacusWatch`.

``train(model, x, y, *, seed)`` (audit-model's contract) trains ``factory()`` in place and returns Opacus'
accountant or nothing. Every run here builds the model with the same initialisation seed and calls ``train`` with
the same ``seed``, so runs on neighbouring datasets differ only by the data. A function that raises, or that never
releases through an Opacus ``DPOptimizer``, is bad input: one line (:class:`~privaudit.core.errors.ConfigError`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from privaudit.core.errors import ConfigError
from privaudit.defenses.dp.release.step import CanarySource
from privaudit.defenses.watch.opacus_watch import OpacusWatch, ReplayScript

NO_RELEASE = ("never released through an Opacus DPOptimizer (no optimizer.step() of one added noise) nor a declared "
              "release: audit-training watches Opacus' DPOptimizer (make_private, or DPOptimizer around your "
              "optimizer); a loop that adds its own noise wraps it in privaudit.declare_release")


@dataclass
class Recipe:
    """The user's factory and training function (loaded), their references and the seeds."""

    factory: Callable[[], torch.nn.Module]
    train: Callable[..., Any]
    factory_ref: str
    train_ref: str
    seed: int
    init_seed: int


@dataclass
class WatchedRun:
    """One run: the watch's records, what ``train`` returned and how long it took."""

    watch: OpacusWatch
    returned: Any
    seconds: float
    model: torch.nn.Module


def run_watched(recipe: Recipe, x: torch.Tensor, y: torch.Tensor, *, canaries: CanarySource | None = None,
                stop_after: int | None = None, script: ReplayScript | None = None, keep: bool = False) -> WatchedRun:
    """``train(factory(), x, y, seed=...)`` under the watch; refuses a function that raises or never releases.
    ``script`` and ``keep``: a replay (:class:`~privaudit.defenses.watch.opacus_watch.ReplayScript`)."""
    from privaudit.defenses.user_model import build

    net = build(recipe.factory, recipe.init_seed)
    watch = OpacusWatch(len(x), canaries=canaries, stop_after=stop_after,
                        names={id(p): n for n, p in net.named_parameters()}, script=script, keep=keep)
    start = time.perf_counter()
    returned = None
    try:
        with watch:
            returned = recipe.train(net, x, y, seed=recipe.seed)
    except ConfigError:
        raise
    except Exception as exc:  # the user's code failed: bad input, one line
        text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise ConfigError(f"--train-fn {recipe.train_ref!r}: raised {type(exc).__name__}"
                          f"{': ' + text if text else ''}") from None
    if not watch.steps:
        raise ConfigError(f"--train-fn {recipe.train_ref!r}: {NO_RELEASE}")
    return WatchedRun(watch, returned, time.perf_counter() - start, net)


def time_plain(recipe: Recipe, x: torch.Tensor, y: torch.Tensor) -> float:
    """Seconds of one run of ``train`` alone (no watch): the cost the audit is compared with."""
    from privaudit.defenses.user_model import build

    net = build(recipe.factory, recipe.init_seed)
    start = time.perf_counter()
    recipe.train(net, x, y, seed=recipe.seed)
    return time.perf_counter() - start


class Stages:
    """The audit's stages on a progress line on a terminal (stderr; none without ``progress`` or off a terminal):
    ``stages("the audited run")`` starts the next one and names it, with the time elapsed."""

    def __init__(self, progress: bool, total: int):
        from tqdm import tqdm

        self.bar = tqdm(total=total, file=sys.stderr, leave=False, disable=None if progress else True,
                        bar_format="{desc} [{elapsed}]")
        self.done, self.total = -1, total

    def __call__(self, name: str) -> None:
        self.done += 1
        self.bar.set_description_str(f"audit-training {self.done + 1}/{self.total}: {name}")

    def close(self) -> None:
        self.bar.close()
