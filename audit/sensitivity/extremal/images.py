"""Copies-and-antipode pairs on an image domain: the constructed pairs of the normalised-representation
claims (DPCL Thms. 1-3), whose suprema (:mod:`.suprema`) are reached by copies of one image with the
changed example mapped to its antipode (the inverted image at the constructed antipodal parameter value,
:func:`~.heads.antipodal_head`). For the clipped gradient sums they only shift the units a little; the
worst cases there need constructed parameters (:mod:`.flip` and the modules beside it).
"""

from __future__ import annotations

import torch

from privaudit.audit.sensitivity.domains import ImageDomain, Pair, cat_rows, slice_rows
from privaudit.audit.sensitivity.extremal.layer_inputs import shared_seed
from privaudit.audit.sensitivity.evaluator import Target


def image_seeds(target: Target, gen: torch.Generator, images: int = 3) -> list[Pair]:
    """Copies-and-antipode pairs on an image domain (see module doc), plus data pairs with an antipode.

    For ``images`` pool images x: D = |B| copies of x, the changed unit 1 - x (replace-one: at
    position 0; add-remove: appended); D = copies of x and a copy of x added (add-remove); D = data
    rows with the replaced row inverted; and black copies against a white unit.
    """
    dom = target.domain
    if not isinstance(dom, ImageDomain) or target.fixed_base is not None or target.units < 1:
        return []
    n, replace = target.units, target.relation == "replace-one"
    out: list[Pair] = []
    for i in range(images):
        # the first: training image 0, the one the antipodal parameter value is built for
        x = {"x": dom.pool_x[:dom.unit_size].clone()} if i == 0 else dom.draw(1, gen, "data")
        if dom.labels:
            x = dom.draw(1, gen, "data") if i == 0 else x
        base = cat_rows(*[x] * n)
        new = dom.opposite(x, gen)
        if replace:
            new = dom.conform(new, slice_rows(base, 0, dom.unit_size))
        out.append(Pair(base, new, 0, shared_seed(gen)))
        if not replace:
            out.append(Pair(base, {k: v.clone() for k, v in x.items()}, 0, shared_seed(gen)))
    data = dom.draw(n, gen, "data")
    old = slice_rows(data, 0, dom.unit_size)
    out.append(Pair(data, dom.conform(dom.opposite(old, gen), old) if replace else dom.opposite(old, gen), 0,
                    shared_seed(gen)))
    black = dom.draw(1, gen, "extreme")
    black = {**black, "x": torch.zeros_like(black["x"])}
    white = {**black, "x": torch.ones_like(black["x"])}
    out.append(Pair(cat_rows(*[black] * n), white, 0, shared_seed(gen)))
    return out
