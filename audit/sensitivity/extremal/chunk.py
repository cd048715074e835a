"""Constructed pairs for DP-GCL's chunked grouping (Algorithm 1 line 5), add-remove.

Derivation. Groups are consecutive chunks of S in the order of one uniform key per batch position
(position-stable, :class:`privaudit.defenses.dp.release.randomness.StepRandomness`). Among the shared seeds
tried, take the one whose added example gets the smallest key, so it enters D' first and shifts every
example one place. Give the examples two types by their rank in D, alternating per chunk: ranks
0..S-1 type P, S..2S-1 type Q, ... -- every group of D is homogeneous, every group of D' after the
first holds one example of the previous type and S - 1 of the next: mixed. With the constructed
parameters (:func:`~.heads.label_head`) P rows sit exactly at u and Q rows at angle theta: a
homogeneous group's embeddings are all equal, so its loss gradient has no tangent component and its
unit gradient is 0; every mixed group has the same embeddings, so its clipped gradient is C along
nearly the same direction. ||Delta|| approaches (K - 1) C for K = ceil(|B| / S) groups, against the
paper's 2C: a ratio of (K - 1) / 2, growing with |B|.
"""

from __future__ import annotations

import torch

from privaudit.audit.sensitivity.domains import ImageDomain, Pair, cat_rows
from privaudit.audit.sensitivity.extremal.heads import HEAD_SHAPES, label_head
from privaudit.audit.sensitivity.extremal.layer_inputs import last_layer_inputs, row_labels, shared_seed
from privaudit.audit.sensitivity.evaluator import Target


def _first_key_seed(gen: torch.Generator, n: int, tries: int) -> tuple[int, torch.Tensor]:
    """Among ``tries`` shared seeds (stopping at the first where it ranks first), the one whose added
    example (position n) gets the smallest grouping key; returns it and the keys of positions 0..n-1."""
    from privaudit.defenses.dp.release.randomness import StepRandomness

    best = None
    for _ in range(tries):
        seed = shared_seed(gen)
        keys = StepRandomness(seed).uniform(n + 1, "groups")
        rank_new = int((keys[:n] < keys[n]).sum())
        if best is None or rank_new < best[0]:
            best = (rank_new, seed, keys[:n])
        if rank_new == 0:
            break
    _, seed, keys = best
    return seed, keys


def chunk_seeds(target: Target, gen: torch.Generator, tries: int = 64) -> list[Pair]:
    """Add-remove pairs with constructed parameters for chunked grouping (module doc): types P, Q
    alternating per chunk of D, the added example of either type, at each of :data:`~.heads.HEAD_SHAPES`."""
    dom, n = target.domain, target.units
    s = int(target.params.get("S", 0) or 0)
    if target.module is None or not isinstance(dom, ImageDomain) or target.relation != "add-remove" \
            or n < 2 or s < 1:
        return []
    seed, keys = _first_key_seed(gen, n, tries)
    rank = torch.empty(n, dtype=torch.long)
    rank[torch.argsort(keys)] = torch.arange(n)
    types = ((rank // s) % 2).double()  # 0: P, 1: Q
    x = {"x": dom.pool_x[:1].clone()}
    y = {"x": 1.0 - x["x"]}
    base = cat_rows(*[y if t else x for t in types.tolist()])
    out = []
    for new in (x, y):
        pair = Pair(base, new, 0, seed)
        _, b_rows = pair.neighbours(target.relation, dom.unit_size)
        q = last_layer_inputs(target, b_rows, seed)
        labels = row_labels(len(q), n + 1, torch.cat([types, types[:1] * 0 + (new is y)]))
        for scale, tangent in HEAD_SHAPES:
            out.append(Pair(base, new, 0, seed, label_head(target, q, labels, scale, tangent)))
    return out
