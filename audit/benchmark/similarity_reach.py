"""DPCL's similarity reach measured on the white-box run's own cells: what any canary can attain on this data.

For each DPCL-SimCLR cell of a suite: the cell's defense is trained as the cell trains it (same data, params, budget
and seed), then ``batches`` batches of |B| training examples are drawn (seeded), both views augmented as a step
augments them and embedded by the trained model and by the init of the same architecture; each batch's reach is
:func:`privaudit.attacks.bounds.similarity_reach.similarity_reach` of its rows but one example's, and the largest
ceiling over the batches gives the epsilon any canary can attain (:func:`attainable_epsilon`), beside the claim and
the bound of the white-box run.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from privaudit.attacks.bounds.similarity_reach import attainable_epsilon, similarity_reach
from privaudit.core.errors import ConfigError

DEFENSE = "dpcl-simclr"


def batch_reaches(embed: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, augment, batch_size: int,
                  batches: int, seed: int) -> list[dict[str, float]]:
    """Each drawn batch's reach: rows [view 1; view 2] embedded, the first example's two rows left out."""
    from privaudit.defenses.training.augment import two_views

    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(batches):
        idx = torch.randperm(len(x), generator=gen)[:batch_size]
        v1, v2 = two_views(augment, x[idx], gen)
        z = embed(torch.cat([v1, v2]))
        keep = torch.ones(len(z), dtype=torch.bool)
        keep[[0, batch_size]] = False
        r = similarity_reach(z[keep])
        out.append({"witness": r.witness, "ceiling": r.ceiling, "top_eigenvalue": r.top_eigenvalue})
    return out


def summary(rows: list[dict[str, float]]) -> dict[str, float]:
    """The largest and the mean witness and ceiling over the batches."""
    return {f"{k}_{how}": float(fn([r[k] for r in rows])) for k in ("witness", "ceiling")
            for how, fn in (("max", max), ("mean", lambda v: sum(v) / len(v)))}


def measure_cell(spec, batches: int, progress: bool = False) -> dict[str, Any]:
    """One DPCL-SimCLR cell's reach at its init and after training, and the epsilon each lets a canary attain."""
    from privaudit.attacks.membership.shadow_models import resolve_defense
    from privaudit.core.datasets import SplitConfig, load_dataset
    from privaudit.defenses.training.augment import augmentation_for
    from privaudit.defenses.base import Budget
    from privaudit.defenses.nn.model import build_model

    if spec.defense.name != DEFENSE:
        raise ConfigError(f"similarity reach: cell {spec.id} is {spec.defense.name!r}, not {DEFENSE!r}")
    data = load_dataset(spec.dataset, seed=spec.seed, data_dir=spec.data_dir,
                        splits=SplitConfig(**spec.splits) if spec.splits else None)
    defense = resolve_defense(spec.defense.name, spec.defense.params)
    budget = Budget(target_epsilon=spec.target_epsilon, delta=spec.delta,
                    noise_multiplier=spec.defense.noise_multiplier)
    trained = defense.fit(data, budget, spec.seed, progress=progress)
    augment = augmentation_for(data.info, defense.config.augmentation)
    x, b = data.train.x, defense.config.batch_size
    init = build_model(trained.spec, seed=spec.seed).eval()
    models = {"init": lambda v: init(v).detach(), "trained": trained.embeddings}
    row: dict[str, Any] = {"id": spec.id, "target_epsilon": spec.target_epsilon, "batch_size": b,
                           "batches": batches, "claim": attainable_epsilon(trained.claim, {})}
    for name, embed in models.items():
        with torch.no_grad():
            s = summary(batch_reaches(embed, x, augment, b, batches, spec.seed))
        row[name] = {**s, "attainable_epsilon": attainable_epsilon(trained.claim, {"similarity": s["ceiling_max"]})}
    row["gradient_share"] = attainable_epsilon(trained.claim, {"similarity": 0.0})
    return row
