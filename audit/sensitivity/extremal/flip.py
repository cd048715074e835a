"""The flip: replace-one pairs with constructed parameters that turn every clipped unit gradient around.

Derivation (SimCLR / NT-Xent on the 2|B| views, DPCL Sec. 3.2.2, clipped per view). Put every
view of the |B| - 1 unchanged examples at one point u of the sphere and the replaced example's
two views at angle +theta towards v in D, at -theta in D' (:func:`~.heads.label_head` on the rows'
last-layer inputs). View r's cotangent is c_r = dL/dz_r = (1/2|B|tau) [sum_b p_rb z_b +
sum_a p_ar z_a - (positive terms)]; every other view and the positives sit at u, so after the
normalisation's Jacobian (I - u u^T)/a only the replaced views' v-components survive:
c_r^tan = +-(sin theta / (2|B| tau)) (p_rk + p_rk' + p_kr + p_k'r) v / a -- the same in D and D'
up to the sign (the logits cos theta / tau are equal on both sides, so are the p's). Every unit
gradient g_r = J_r^T c_r is therefore exactly negated, and, clipped (||g_r|| ~ 1/a > C),
changes by 2C along J_r^T v; the J_r^T v of the unchanged views are close to parallel (their
last-layer inputs are ReLU features of copies of one image), so ||Delta|| approaches
2 (2|B| - 2) C, against the paper's 4C and the sound 4|B|C. The noise of the similarity matrix
(shared by D and D') keeps the symmetry as long as the p's do not underflow, hence the growth
table's small noise multiplier.
"""

from __future__ import annotations

import torch

from privaudit.audit.sensitivity.domains import ImageDomain, Pair, cat_rows
from privaudit.audit.sensitivity.extremal.heads import HEAD_SHAPES, label_head
from privaudit.audit.sensitivity.extremal.layer_inputs import (last_layer_inputs, projector_inputs, row_labels,
                                                               shared_seed)
from privaudit.audit.sensitivity.evaluator import Target


def flip_seeds(target: Target, gen: torch.Generator, images: int = 2) -> list[Pair]:
    """Replace-one pairs with constructed parameters that turn every clipped unit gradient around (module doc):
    the replaced example's views marked +1 in D and -1 in D', every other row at 0, at each of
    :data:`~.heads.HEAD_SHAPES` (and through the whole projection head where its width allows)."""
    dom = target.domain
    if target.module is None or not isinstance(dom, ImageDomain) or target.relation != "replace-one" \
            or target.fixed_base is not None or target.units < 2:
        return []
    n, out = target.units, []
    for i in range(images):
        x = {"x": dom.pool_x[i:i + 1].clone()} if i == 0 else dom.draw(1, gen, "data")
        base = cat_rows({"x": 1.0 - x["x"]}, *[x] * (n - 1))
        new = dom.draw(1, gen, "data")
        seed = shared_seed(gen)
        pair = Pair(base, new, 0, seed)
        a_rows, b_rows = pair.neighbours(target.relation, dom.unit_size)
        qa, qb = last_layer_inputs(target, a_rows, seed), last_layer_inputs(target, b_rows, seed)
        marked = torch.zeros(n)
        marked[0] = 1.0
        la, lb = row_labels(len(qa), n, marked), -row_labels(len(qb), n, marked)
        keep = lb != 0
        q, labels = torch.cat([qa, qb[keep]]), torch.cat([la, lb[keep]])
        for scale, tangent in HEAD_SHAPES:
            out.append(Pair(base, new, 0, seed, label_head(target, q, labels, scale, tangent)))
        ra, rb = projector_inputs(target, a_rows, seed), projector_inputs(target, b_rows, seed)
        if ra is not None and len(labels) <= ra.shape[1] + 1:
            reps = torch.cat([ra, rb[keep]])
            for scale, tangent in HEAD_SHAPES[:2]:
                out.append(Pair(base, new, 0, seed, label_head(target, q, labels, scale, tangent, aligned=reps)))
    return out
