"""The shared angle search: the angles of rows on a half circle that maximise a construction's limit ratio.

The split flip (:mod:`.split_flip`) and group clipping (:mod:`.group_clip`) constructions reduce their
quantity, in the limit of the line head (:func:`~.heads.split_flip_head`), to a function of the rows'
angles in (0, pi); :func:`evolve_angles` maximises such a function over batches of angle vectors.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

SPLIT_MARGIN = 0.05  # angles kept in [margin, pi - margin]: |cot| <= 20, the rows stay on the head's line


def evolve_angles(pop: torch.Tensor, ratio: Callable[[torch.Tensor], torch.Tensor], rounds: int, candidates: int,
                  lo: float, hi: float, gen: torch.Generator) -> tuple[torch.Tensor, float, torch.Tensor]:
    """Elitist evolution of angle vectors in [lo, hi] maximising ``ratio`` (one value per row).

    Each round keeps the best row so far and the 32 best of the round, draws ``candidates`` parents
    from them and perturbs each angle by a step relative to its distance from the ends of (0, pi) (the
    angles that matter are small), shrinking over the rounds. Returns (best row, its ratio, last elite).
    """
    best, best_r, elite = pop[:1], -1.0, pop
    for i in range(rounds):
        r = ratio(pop)
        j = int(torch.argmax(r))
        if float(r[j]) > best_r:
            best, best_r = pop[j:j + 1].clone(), float(r[j])
        elite = pop[torch.topk(r, min(32, len(r))).indices]
        parents = torch.cat([best, elite])[torch.randint(len(elite) + 1, (candidates,), generator=gen)]
        sigma = 0.5 * (1.0 - i / rounds) + 0.02
        room = torch.minimum(parents, math.pi - parents)
        noise = torch.randn(candidates, pop.shape[1], generator=gen, dtype=torch.float64)
        pop = (parents + sigma * room * noise).clamp(lo, hi)
    return best, best_r, elite
