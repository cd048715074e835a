"""Constructed pairs for DP-GCL's group clipping with full-batch negatives (Eq. 8, Thm. 1), add-remove.

Derivation. With the line head of :func:`~.heads.split_flip_head` every row sits on the half circle and
a group's clipped gradient tends to C times the direction of sum_r (dS_j/dtheta_r) kappa_r
sin(theta_r) t(theta_r) (:func:`_group_directions`), S_j its members' full-batch terms (Eq. 12 with
N_a = 1). Among the shared seeds tried, take one whose random grouping leaves no group of D empty
(the added example then joins an occupied group: each group may turn, 2C each); the angles of the
3(|B| + 1) rows of D' that maximise the limit (:func:`group_clip_limit`) turn every group, the added
example's included: the limit is 2K / (2K + 1) of Thm. 1's (2K + 1) C (0.8 at K = 2, 0.889 at K = 4),
the closed-form supremum 2KC (:func:`~.suprema.group_clip_supremum`).
"""

from __future__ import annotations

import functools
import math

import torch

from privaudit.audit.sensitivity.domains import ImageDomain, Pair
from privaudit.audit.sensitivity.extremal.angles import SPLIT_MARGIN, evolve_angles
from privaudit.audit.sensitivity.extremal.heads import split_flip_head
from privaudit.audit.sensitivity.extremal.layer_inputs import projector, projector_inputs, shared_seed
from privaudit.audit.sensitivity.evaluator import Target


def _group_directions(theta: torch.Tensor, groups: torch.Tensor, k: int, tau: float, big: float) -> torch.Tensor:
    """Directions (M, K, 2) of the K groups' clipped gradients in the limit of :func:`~.heads.split_flip_head`.

    Rows [u; v; a] (n each: anchors, positives, augmented positives; DP-GCL Eq. 12 with N_a = 1 and
    full-batch negatives, :func:`privaudit.defenses.losses.group_info_nce`) at angles ``theta`` (M, 3n). Group
    j's unit is the gradient of its members' terms through every row; at the constructed head row r
    contributes (dS_j/dtheta_r) kappa_r sin(theta_r) t(theta_r) (x) e_0 (kappa_r = cot theta_r +
    beta_0, |y_r| = scale / sin theta_r), and clipping keeps the direction. An empty group is 0.
    """
    from privaudit.defenses.losses import group_info_nce

    n = theta.shape[1] // 3
    graph = theta.requires_grad  # differentiable in theta (the ascent of :func:`group_clip_limit`)
    th = theta if graph else theta.detach().clone().requires_grad_(True)
    z = torch.stack([torch.cos(th), torch.sin(th)], -1)
    u, v, a = z[:, :n], z[:, n:2 * n], z[:, 2 * n:]
    terms = torch.vmap(lambda uu, vv, aa: group_info_nce(uu, vv, tau, None, aa[None]))(u, v, a)  # (M, n)
    member = (groups[None, :] == torch.arange(k)[:, None]).to(theta.dtype)  # (K, n)
    (g,) = torch.autograd.grad(terms, th, member[:, None, :].expand(k, *terms.shape), is_grads_batched=True,
                               create_graph=graph)
    cot = 1.0 / torch.tan(theta)
    kappa = cot + big + (-cot).amax(1, keepdim=True)
    t = torch.stack([-torch.sin(theta), torch.cos(theta)], -1)
    vec = ((g * kappa * torch.sin(theta))[..., None] * t).sum(2)  # (K, M, 2)
    return (vec / vec.norm(dim=-1, keepdim=True).clamp_min(1e-300)).transpose(0, 1)


def group_clip_ratio(theta: torch.Tensor, groups: torch.Tensor, new_group: int, k: int, tau: float,
                     big: float = 100.0) -> torch.Tensor:
    """The limit ||Delta|| / ((2K + 1) C) at D' rows' angles ``theta`` (M, 3(B + 1)), the added example last
    in each block; D is D' without its three rows (:func:`_group_directions`)."""
    n = theta.shape[1] // 3
    keep = [i for i in range(3 * n) if i % n != n - 1]
    g_new = torch.cat([groups, torch.tensor([new_group])])
    diff = _group_directions(theta, g_new, k, tau, big) - _group_directions(theta[:, keep], groups, k, tau, big)
    return diff.sum(1).norm(dim=-1) / (2 * k + 1)


def group_clip_limit(groups: tuple[int, ...], new_group: int, k: int, tau: float, big: float = 100.0,
                     candidates: int = 256, rounds: int = 100, starts: int = 8, steps: int = 60,
                     seed: int = 0) -> tuple[torch.Tensor, float]:
    """Angles of D''s rows maximising :func:`group_clip_ratio` and the limit ratio they reach.

    An elitist random search (``rounds``, as :func:`~.split_flip.split_flip_angles`), then its best ``starts``
    ascended together (Adam on logit coordinates of (margin, pi - margin); the limit is smooth where
    no group's vector vanishes). Deterministic (seeded by ``seed``).
    """
    gen = torch.Generator().manual_seed(seed)
    g = torch.tensor(groups)
    dim = 3 * (len(groups) + 1)
    lo, hi = SPLIT_MARGIN, math.pi - SPLIT_MARGIN
    pop = lo + (hi - lo) * torch.rand(candidates, dim, generator=gen, dtype=torch.float64)
    best, best_r, elite = evolve_angles(pop, lambda q: group_clip_ratio(q, g, new_group, k, tau, big), rounds,
                                        candidates, lo, hi, gen)
    start = torch.cat([best, elite[:starts - 1]])
    free = torch.logit(((start - lo) / (hi - lo)).clamp(1e-6, 1 - 1e-6)).requires_grad_(True)
    opt = torch.optim.Adam([free], lr=0.05)
    for _ in range(steps):
        theta = lo + (hi - lo) * torch.sigmoid(free)
        r = group_clip_ratio(theta, g, new_group, k, tau, big)
        j = int(torch.argmax(r.detach()))
        if float(r[j].detach()) > best_r:
            best, best_r = theta[j:j + 1].detach().clone(), float(r[j].detach())
        opt.zero_grad()
        (-r.sum()).backward()
        opt.step()
    return best[0], best_r


@functools.lru_cache(maxsize=32)
def _group_clip_angles(groups: tuple[int, ...], new_group: int, k: int, tau: float) -> tuple[tuple[float, ...], float]:
    theta, r = group_clip_limit(groups, new_group, k, tau)
    return tuple(float(t) for t in theta), r


def _covering_grouping(gen: torch.Generator, b: int, k: int, s_size: int,
                       tries: int) -> tuple[int, tuple[int, ...], int] | None:
    """The first of ``tries`` shared seeds whose random grouping of D's ``b`` examples into ``k`` groups
    leaves none empty: (seed, D's groups, the added example's group); None if no seed does."""
    from privaudit.defenses.dp.release.randomness import StepRandomness
    from privaudit.defenses.dp_gcl import assign_groups

    for _ in range(tries):
        seed = shared_seed(gen)
        keys = StepRandomness(seed).uniform(b + 1, "groups")
        groups = assign_groups(keys, "random", k, s_size)
        if len(torch.unique(groups[:b])) == k:
            return seed, tuple(int(g) for g in groups[:b]), int(groups[b])
    return None


def group_clip_seeds(target: Target, gen: torch.Generator, tries: int = 64) -> list[Pair]:
    """Add-remove pairs with constructed parameters turning every group of Eq. 8 around (-> 2KC; module doc)."""
    dom, b = target.domain, target.units
    s_size, tau = int(target.params.get("S", 0) or 0), target.params.get("tau")
    found = projector(target) if target.module is not None else None
    if found is None or tau is None or s_size < 1 or not isinstance(dom, ImageDomain) \
            or target.relation != "add-remove" or b < 1 or 3 * (b + 1) > found[1][0].in_features + 1:
        return []
    k = max(1, round(b / s_size))
    chosen = _covering_grouping(gen, b, k, s_size, tries)
    if chosen is None:
        return []
    seed, groups, new_group = chosen
    angles, _ = _group_clip_angles(groups, new_group, k, float(tau))
    base, new = dom.draw(b, gen, "data"), dom.draw(1, gen, "data")
    pair = Pair(base, new, 0, seed)
    _, b_rows = pair.neighbours(target.relation, dom.unit_size)
    reps = projector_inputs(target, b_rows, seed)
    if reps is None or len(reps) != 3 * (b + 1):
        return []
    params = split_flip_head(target, reps, torch.tensor(angles, dtype=torch.float64), 100.0, 1e-6)
    return [] if params is None else [Pair(base, new, 0, seed, params)]
