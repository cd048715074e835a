"""How long to train a model that is audited: the usable point of a validation curve on public data.

An audit of a model that stopped short of its usable point understates what users' models leak. The
attacks' default targets are therefore trained for the number of epochs chosen here, from data the
audit never scores: the public split is halved by a seeded permutation; the defense (with its own
hyper-parameters and budget) is fitted on the first half for each epoch count of ``grid``, and the
frozen encoder is evaluated by k-NN accuracy on the second half (features of the first half as the
neighbours). The usable point is the end of the plateau: the largest epoch count whose accuracy is within
``tolerance`` of the best on the grid. That is where users of long self-supervised schedules stop (SimCLR
runs for hundreds of epochs; training on costs no utility until held-out accuracy falls), and it is the
model an auditor must measure: stopping at the start of the plateau would audit a model that has seen each
example fewer times than users' models do. The curve and the rule are returned for the report.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import torch

from privaudit.core.datasets import MembershipData
from privaudit.core.errors import ConfigError
from privaudit.defenses.base import Budget
from privaudit.defenses.evaluation.evaluation import encoder_utility
from privaudit.defenses.registry import make_defense
from privaudit.defenses.training.seeding import torch_generator

DEFAULT_GRID = (50, 100, 200, 400)


@dataclass(frozen=True)
class TrainingLength:
    """The chosen epochs, the validation curve (epochs -> k-NN accuracy on held-out public data) and the rule."""

    epochs: int
    curve: dict[int, float]
    rule: str

    def to_dict(self) -> dict[str, Any]:
        return {"epochs": self.epochs, "curve": {str(k): v for k, v in self.curve.items()}, "rule": self.rule}


def public_halves(data: MembershipData, seed: int) -> MembershipData:
    """``data`` with the public split as its pool and a seeded half of it as the members."""
    n = len(data.public)
    if n < 20:
        raise ConfigError(f"dataset {data.info.name!r}: the public split has {n} examples; choosing a training "
                          "length needs at least 20")
    order = torch.randperm(n, generator=torch_generator(seed, "training-length"))
    membership = torch.zeros(n, dtype=torch.bool)
    membership[order[: n // 2]] = True
    return replace(data, pool=data.public, membership=membership)


def usable_epochs(defense: str, params: Mapping[str, Any] | None, data: MembershipData, budget: Budget, seed: int, *,
                  grid: Sequence[int] = DEFAULT_GRID, tolerance: float = 0.02,
                  device: str | torch.device = "cpu") -> TrainingLength:
    """The largest epochs in ``grid`` whose held-out public k-NN accuracy is within ``tolerance`` of the best."""
    grid = sorted({int(e) for e in grid})
    if not grid or grid[0] < 1:
        raise ConfigError(f"grid: epoch counts must be >= 1, got {list(grid)!r}")
    if not 0 <= tolerance < 1:
        raise ConfigError(f"tolerance: must lie in [0, 1), got {tolerance!r}")
    params = dict(params or {})
    if "epochs" not in make_defense(defense, params).config_dict():
        raise ConfigError(f"defense {defense!r} has no 'epochs' hyper-parameter to choose")
    halves = public_halves(data, seed)
    train, held_out = halves.pool.subset(halves.membership), halves.pool.subset(~halves.membership)
    curve: dict[int, float] = {}
    for epochs in grid:
        trained = make_defense(defense, {**params, "epochs": epochs}).fit(halves, budget, seed, device=device,
                                                                           progress=False)
        trained.model.eval()
        u = encoder_utility(trained.model.represent, train.x, train.y, held_out.x, held_out.y, device=device)
        curve[epochs] = float(u["knn_accuracy"])
    best = max(curve.values())
    chosen = max(e for e, acc in curve.items() if acc >= best - tolerance)
    rule = (f"largest epochs in {grid} whose k-NN accuracy on a held-out half of the public split is within "
            f"{tolerance:g} of the best ({best:.3f})")
    return TrainingLength(chosen, curve, rule)
