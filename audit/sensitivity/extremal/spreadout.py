"""Constructed pairs for Logit-DP's spreadout pair sums (Lemma 4.6) at n = 1 -> 2, add-remove.

Derivation. Rows [x1, x2, y1, y2] of D' share one hidden feature of the projection head and sit on
one line of the output plane (:func:`~.heads.split_flip_head`): x1, x2 at angle delta_x, y1, y2 at
pi - delta_y. Then Z_12 = Z_21 = cos(pi - delta) = -cos(delta) (delta = delta_x + delta_y) and,
in the limit of the head (large feature, small scale: only the last layer's block counts, every
logit's gradient clipped), grad Z_ij is sin(delta) (t_xi / |y_xi| - t_yj / |y_yj|) (x) e_0 with
tangents t(delta_x) = -t(pi - delta_y) up to O(delta): the same direction for (1, 2) and (2, 1).
Both clipped terms 2 Z_ij C u are parallel, ||Delta|| = 4 cos(delta) C -> 4C (2/3 of Lemma 4.6's
6C; :func:`~.suprema.spreadout_supremum`). The first-order search alone reaches about 0.6 of the bound.
"""

from __future__ import annotations

import math

import torch

from privaudit.audit.sensitivity.domains import ImageDomain, Pair
from privaudit.audit.sensitivity.extremal.heads import line_head_pairs
from privaudit.audit.sensitivity.extremal.layer_inputs import projector, projector_inputs, shared_seed
from privaudit.audit.sensitivity.evaluator import Target

# (delta_x, delta_y): the spreadout pair's angles from the ends of (0, pi), see :func:`spreadout_seeds`
SPREADOUT_ANGLES = ((0.05, 0.05), (0.02, 0.02), (0.1, 0.1))


def spreadout_seeds(target: Target, gen: torch.Generator) -> list[Pair]:
    """Add-remove pairs n = 1 -> 2 with constructed parameters reaching 4C for the spreadout pair sums
    (module doc), at each angle pair of :data:`SPREADOUT_ANGLES` and head shape of :data:`~.heads.SPLIT_SHAPES`."""
    dom = target.domain
    found = projector(target) if target.module is not None else None
    if found is None or not isinstance(dom, ImageDomain) or target.relation != "add-remove" or target.units != 1 \
            or int(target.params.get("n", 0)) != 2 or found[1][2].out_features < 2:
        return []
    x = {"x": dom.pool_x[:1].clone()}
    new = dom.draw(1, gen, "data")
    seed = shared_seed(gen)
    pair = Pair(x, new, 0, seed)
    _, b_rows = pair.neighbours(target.relation, dom.unit_size)
    reps = projector_inputs(target, b_rows, seed)  # rows [x1, x2, y1, y2]
    if reps is None or len(reps) != 4:
        return []
    out = []
    for dx, dy in SPREADOUT_ANGLES:
        theta = torch.tensor([dx, dx, math.pi - dy, math.pi - dy], dtype=torch.float64)
        out += line_head_pairs(target, reps, theta, x, new, seed)
    return out
