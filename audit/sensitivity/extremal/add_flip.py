"""The add flip: add-remove pairs with constructed parameters in which the added example reverses every unit.

Derivation (the add-remove analogue of :mod:`.flip`; DP-GCL's per-term clipping, Eq. 6, and group
clipping with full-batch negatives, Eq. 8). D holds a marked example m (its rows at angle +theta from
u) and |B| - 1 copies of one image (rows exactly at u); D' adds an example at angle -phi with
tan phi = ``pull`` tan theta. A term or group of the unchanged examples sees m and the added example
only as negatives, so its tangent cotangent is proportional to p_m sin theta - p_new sin phi: positive
in D, negative in D' once the pull wins, and every unchanged unit's clipped gradient turns around (2C
each), the added one's units add C each. That is how (2|B| + 1) t C (Eq. 6) and (2K + 1) C (Thm. 1)
could be approached; what remains are the marked example's own units, which change without turning fully.
"""

from __future__ import annotations

import torch

from privaudit.audit.sensitivity.domains import ImageDomain, Pair, cat_rows
from privaudit.audit.sensitivity.extremal.heads import HEAD_SHAPES, label_head
from privaudit.audit.sensitivity.extremal.layer_inputs import (last_layer_inputs, projector_inputs, row_labels,
                                                               shared_seed)
from privaudit.audit.sensitivity.evaluator import Target


def add_flip_seeds(target: Target, gen: torch.Generator, pulls: tuple[float, ...] = (3.0, 10.0)) -> list[Pair]:
    """Add-remove pairs with constructed parameters in which the added example reverses every unit (module
    doc): the marked example labelled 1, the added one -``pull``, at each pull of ``pulls``."""
    dom, n = target.domain, target.units
    if target.module is None or not isinstance(dom, ImageDomain) or target.relation != "add-remove" \
            or target.fixed_base is not None or n < 1 or "n" in target.params:
        return []
    x = {"x": dom.pool_x[:1].clone()}
    base = cat_rows({"x": 1.0 - x["x"]}, *[x] * (n - 1))
    new = dom.draw(1, gen, "data")
    seed = shared_seed(gen)
    _, b_rows = Pair(base, new, 0, seed).neighbours(target.relation, dom.unit_size)
    q = last_layer_inputs(target, b_rows, seed)
    out = []
    for pull in pulls:
        marks = torch.zeros(n + 1)
        marks[0], marks[n] = 1.0, -pull
        labels = row_labels(len(q), n + 1, marks)
        for scale, tangent in HEAD_SHAPES[:2]:
            out.append(Pair(base, new, 0, seed, label_head(target, q, labels, scale, tangent / pull)))
        reps = projector_inputs(target, b_rows, seed)
        if reps is not None and len(labels) <= reps.shape[1] + 1:
            out.append(Pair(base, new, 0, seed, label_head(target, q, labels, 1e-3, 1.0 / pull, aligned=reps)))
    return out
