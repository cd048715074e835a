"""Audit a training recipe by independent runs on a fixed neighbouring pair, with one canary chosen to stand out.

The pair (add/remove, one example): D = the user's members, D' = D plus one canary. ``runs`` runs of the
user's training function on each (fresh seeds for everything the recipe draws: batches, noise; one fixed
initialisation, since a DP guarantee holds for any initialisation chosen independently of the data), and
one score per run. A threshold chosen on a seeded half of each side's runs, the errors counted on the other
half: the Clopper-Pearson bound on (eps, delta) (:func:`privaudit.attacks.bounds.multi_run.multi_run_bound`; Jagielski
et al. 2020, Nasr et al. 2021) and, when the claim has a mechanism, the test against its own trade-off curve
(:func:`privaudit.attacks.bounds.mechanism.multi_run_mechanism_bound`). Any canary and any score fixed before the
runs give a sound bound; these are chosen for power:

* **the canary** is an input outside the data: zero everywhere except on the *quietest* input coordinate (the
  one whose largest absolute value over every example the auditor holds is smallest: a pixel always black),
  set to :data:`AMPLITUDE` times the data's largest absolute value, with the class the trained model finds
  least likely for it. Its gradient reaches weights the data barely touches, so what the model learns about
  it comes from the canary alone (an input-space version of the Dirac canaries of Nasr et al. 2023);
* **the score** is log p(canary class | canary) - log p(canary class | the canary with that coordinate at 0):
  the difference cancels what every run learns from the rest of the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from privaudit.core.datasets import MembershipData, Split

#: The canary coordinate's value, in units of the largest absolute input value in the data.
AMPLITUDE = 4.0


@dataclass(frozen=True)
class Canary:
    """The canary's input (1, ...), label and the flat index of its coordinate."""

    x: torch.Tensor
    y: int
    coordinate: int

    def to_dict(self) -> dict[str, Any]:
        return {"coordinate": self.coordinate, "value": float(self.x.reshape(-1)[self.coordinate]), "label": self.y}


def choose_canary(data: MembershipData, model: torch.nn.Module) -> Canary:
    """The canary of the module docstring: the quietest coordinate of every example the auditor holds."""
    held = torch.cat([s.x.reshape(len(s), -1) for s in (data.pool, data.shadow) if len(s)])
    peak = held.abs().amax(dim=0)
    coordinate = int(torch.argmin(peak))  # first of the quietest
    x = torch.zeros((1, *data.pool.x.shape[1:]), dtype=data.pool.x.dtype)
    x.view(1, -1)[0, coordinate] = AMPLITUDE * max(float(held.abs().max()), 1e-12)
    with torch.no_grad():
        y = int(torch.argmin(model.eval()(x)[0]))
    return Canary(x, y, coordinate)


@dataclass(frozen=True)
class CanaryContrast:
    """Score of the canary (the last row probed): log p_y(canary) - log p_y(canary with its coordinate at 0)."""

    coordinate: int

    def __call__(self, trained: Any, split: Split, info: Any) -> np.ndarray:
        base = split.x.clone()
        base.view(len(base), -1)[:, self.coordinate] = 0.0
        with torch.no_grad():
            lp = torch.log_softmax(trained.logits(torch.cat([split.x, base])), dim=1)
        picked = lp[torch.arange(2 * len(split)), torch.cat([split.y, split.y])]
        return (picked[:len(split)] - picked[len(split):]).numpy()


def canary_scores(data: MembershipData, canary: Canary, params: dict[str, Any], runs: int, seed: int,
                  executor: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """(scores of the runs with the canary, scores of the runs without): ``runs`` of the ``user-model`` recipe
    ``params`` on each side, alternating, each with its own seed."""
    from privaudit.attacks.membership.shadow_models import DefenseRef, TrainJob, train_models, with_pool
    from privaudit.defenses.base import Budget
    from privaudit.defenses.training.seeding import derive_seed

    members = data.train
    n = len(members)
    pool = Split.concat([members, Split(canary.x, torch.tensor([canary.y]), torch.tensor([-1]))])
    base = with_pool(data, pool, np.ones(n + 1, dtype=bool))
    recipe = DefenseRef.of("user-model", params)
    inside = np.arange(2 * runs) % 2 == 0
    jobs = [TrainJob(recipe, Budget(), base, derive_seed(seed, "canary-runs", i), np.r_[np.ones(n, bool), inside[i]],
                     probe=CanaryContrast(canary.coordinate), probe_rows=np.array([n])) for i in range(2 * runs)]
    scores = np.concatenate(train_models(jobs, executor, max_stack=1))
    return scores[inside], scores[~inside]
