"""The split flip: replace-one pairs for the plain per-view clipped SimCLR gradient (DPCL Sec. 3.2.1) in
which every view's clipped gradient turns around -- the replaced example's two views included.

Derivation. Put every row's embedding in one plane, z_r = (cos theta_r, sin theta_r), and make the
last layer's input of every row a large multiple kappa_r e_0 of one hidden unit
(:func:`~.heads.split_flip_head`; y_r = scale (beta cot theta_r, beta), so theta_r in (0, pi): the rows
lie on one line of the output space). NT-Xent depends on the angles only; its cotangent at row r is
tangent, c_r = (dL/dtheta_r) t(theta_r) with t = (-sin, cos), so row r's gradient is, in the last
layer, (dL/dtheta_r / |y_r|) t(theta_r) (x) (kappa_r e_0, 1): as kappa_r -> infinity (the bias
column) and scale -> 0 (the earlier layers get O(scale) of it, and every row is clipped), the
clipped gradient tends to C sign(dL/dtheta_r) t(theta_r) (x) e_0, and

    ||Delta|| / (4|B|C) -> || sum_{r in D} s_r t(theta_r) - sum_{r in D'} s'_r t(theta'_r) || / (4|B|),

a function of the angles alone (:func:`split_flip_ratio`). It is 1 exactly when every row's
direction s_r t(theta_r) is the same vector in D and its negative in D'. Torque balance (NT-Xent is
rotation invariant, so sum_r dL/dtheta_r = 0) forbids that on a short arc but not on a half circle:
rows near theta = 0 and rows near pi have opposite tangents, so a cluster at 0 turned one way and a
cluster at pi turned the other give parallel directions. The replaced example's two views are split
in D (one with the crowd, one across: its positive pulls it, the other views are pushed away from
it) and joined in D' (both across: the crowd is only repelled), which turns every torque's sign.
The line constraint (theta in (0, pi); kappa_r > 0 is a ReLU output) rules out configurations
that go round the circle, not this one. :func:`split_flip_angles` maximises the limit over the six
free angles (k, k' of the replaced example, u1, u2 of the unchanged views' two blocks, n, n' of the
new example): 0.997 at |B| = 2, 4, 8 and 0.99 at |B| = 32 (tau 0.5, angles 0.05 rad from the ends
of (0, pi)), tending to 1 as that margin shrinks (0.9999 at 0.005, exact arithmetic): the supremum
of the plain per-view clipped sum is Sec. 3.2.1's 4|B|C, approached and not attained. At tau = 0.1
the torques across the circle carry e^{-2/tau} and float32 rounds them away, so the weights
(:data:`SPLIT_TORQUE_FLOOR`) leave 0.74 at |B| = 3; at tau = 1 the repulsion across the circle is
too strong for the split family (0.87 at |B| = 4). The flip (:mod:`.flip`) stops at (|B| - 1) / |B|.
"""

from __future__ import annotations

import functools
import math

import torch

from privaudit.audit.sensitivity.domains import ImageDomain, Pair
from privaudit.audit.sensitivity.extremal.angles import SPLIT_MARGIN, evolve_angles
from privaudit.audit.sensitivity.extremal.heads import line_head_pairs
from privaudit.audit.sensitivity.extremal.layer_inputs import projector, projector_inputs, shared_seed
from privaudit.audit.sensitivity.evaluator import Target

# the smallest torque |dL/dtheta_r| (mean loss) the construction counts in full: with K = 100, sin theta >=
# sin(margin) and scale 1e-6, a row's gradient is >= 5e6 times its torque (>= 50 at the floor), so every
# such row is clipped at the clip norms the claims use (0.05 to 1)
SPLIT_TORQUE_FLOOR = 1e-5


def _angle_directions(theta: torch.Tensor, tau: float, dtype: torch.dtype = torch.float32,
                      floor: float | None = None) -> torch.Tensor:
    """Per row, the clipped gradient's direction sign(dL/dtheta_r) t(theta_r) of unit rows at angles theta.

    ``theta`` (M, R): M configurations of R rows [view 1; view 2] on a circle; L = NT-Xent (DPCL Eq. 4,
    :func:`privaudit.defenses.losses.nt_xent_from_similarity`) of each configuration; t(theta) = (-sin, cos) the
    tangent. The torques are computed in ``dtype``, the models' precision: at a small temperature the
    rows across the circle see each other through probabilities e^{-2/tau}, whose torques round away
    in float32; a configuration relying on them is not one the model realises. A torque below
    :data:`SPLIT_TORQUE_FLOOR` counts in proportion: the constructed heads clip every row whose torque
    is above it, not the others. Returns (M, R, 2).
    """
    from privaudit.defenses.losses import nt_xent_from_similarity

    th = theta.detach().to(dtype).requires_grad_(True)
    z = torch.stack([torch.cos(th), torch.sin(th)], -1)
    loss = nt_xent_from_similarity(z @ z.transpose(-1, -2), tau, reduction="sum")
    (g,) = torch.autograd.grad(loss, th)
    tangent = torch.stack([-torch.sin(theta), torch.cos(theta)], -1)
    mean_torque = g.to(theta.dtype) / theta.shape[-1]  # the step's loss is the mean over the 2|B| rows
    weight = (mean_torque.abs() / (SPLIT_TORQUE_FLOOR if floor is None else floor)).clamp(max=1.0)
    return (torch.sign(mean_torque) * weight)[..., None] * tangent


def split_flip_rows(free: torch.Tensor, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Angles of D's and D''s 2|B| rows from the free angles (k, k', u1, u2, n, n') of :func:`split_flip_angles`.

    D: the replaced example's views at k (row 0) and k' (row |B|), every unchanged view 1 at u1, view 2
    at u2; D': the same with the new example's views at n, n'.
    """
    m = free.shape[0]
    d = torch.empty(m, 2 * b, dtype=free.dtype)
    d[:, :b], d[:, b:] = free[:, 2:3], free[:, 3:4]
    d[:, 0], d[:, b] = free[:, 0], free[:, 1]
    e = d.clone()
    e[:, 0], e[:, b] = free[:, 4], free[:, 5]
    return d, e


def split_flip_ratio(free: torch.Tensor, b: int, tau: float, dtype: torch.dtype = torch.float32,
                     floor: float | None = None) -> torch.Tensor:
    """The limit ratio ||sum_r (u_r(D) - u_r(D'))|| / (4|B|) of the split-flip parameters (see
    :func:`split_flip_seeds`) at free angles ``free`` (M, 6): every view's clipped gradient is C times
    sign(dL/dtheta_r) t(theta_r) (x) e_0 in the limit. ``dtype``, ``floor``: the precision of the
    torques and the torque counted in full (:func:`_angle_directions`; float64 and a tiny floor give the
    exact-arithmetic limit)."""
    d, e = split_flip_rows(free, b)
    diff = _angle_directions(d, tau, dtype, floor).sum(1) - _angle_directions(e, tau, dtype, floor).sum(1)
    return diff.norm(dim=-1) / (4 * b)


@functools.lru_cache(maxsize=64)
def split_flip_angles(b: int, tau: float, candidates: int = 1024, rounds: int = 30, margin: float = SPLIT_MARGIN,
                      exact: bool = False) -> tuple[tuple[float, ...], float]:
    """The free angles (k, k', u1, u2, n, n') in [margin, pi - margin] maximising :func:`split_flip_ratio`.

    An elitist random search on the 6 angles (deterministic: seeded by |B|), vectorised over the
    candidates; a few milliseconds per round. ``exact``: the limit in exact arithmetic (float64
    torques, none too small to count) instead of what the float32 model realises. Returns the angles
    and their limit ratio.
    """
    gen = torch.Generator().manual_seed(1000 + b)
    lo, hi = margin, math.pi - margin
    precision = {"dtype": torch.float64, "floor": 1e-300} if exact else {}
    # the split family of :func:`split_flip_seeds` (k alone near 0, k' and the crowd near pi, the new
    # example's views together near 0) on a log-spaced grid of the small angles, and random angles
    near = torch.logspace(math.log10(lo), math.log10(1.5), 16, dtype=torch.float64)
    grid = torch.cartesian_prod(near, near, near[::2])  # (pi - k', pi - u, k)
    family = torch.stack([grid[:, 2], math.pi - grid[:, 0], math.pi - grid[:, 1], math.pi - grid[:, 1],
                          torch.full_like(grid[:, 0], lo), torch.full_like(grid[:, 0], lo)], 1)
    pop = torch.cat([family, lo + (hi - lo) * torch.rand(candidates, 6, generator=gen, dtype=torch.float64)])
    best, best_r, _ = evolve_angles(pop, lambda q: split_flip_ratio(q, b, tau, **precision), rounds, candidates,
                                    lo, hi, gen)
    return tuple(float(v) for v in best[0]), best_r


def split_flip_seeds(target: Target, gen: torch.Generator, images: int = 2) -> list[Pair]:
    """Replace-one pairs in which every view's clipped gradient turns around (module doc): data batches at
    the angles of :func:`split_flip_angles`, through the line head at each of :data:`~.heads.SPLIT_SHAPES`."""
    dom = target.domain
    b = target.units
    tau = target.params.get("tau")
    found = projector(target) if target.module is not None else None
    if found is None or tau is None or not isinstance(dom, ImageDomain) or target.relation != "replace-one" \
            or target.fixed_base is not None or b < 2 or 2 * b + 2 > found[1][0].in_features + 1 \
            or found[1][0].out_features < 1 or found[1][2].out_features < 2:
        return []
    free, _ = split_flip_angles(b, float(tau))
    d_rows, e_rows = split_flip_rows(torch.tensor([free], dtype=torch.float64), b)
    theta = torch.cat([d_rows[0], e_rows[0, [0, b]]])
    out = []
    for _ in range(images):
        base, new = dom.draw(b, gen, "data"), dom.draw(1, gen, "data")
        seed = shared_seed(gen)
        pair = Pair(base, new, 0, seed)
        a_rows, b_rows = pair.neighbours(target.relation, dom.unit_size)
        ra, rb = projector_inputs(target, a_rows, seed), projector_inputs(target, b_rows, seed)
        if ra is None or len(ra) != 2 * b or len(rb) != 2 * b:
            return out
        out += line_head_pairs(target, torch.cat([ra, rb[[0, b]]]), theta, base, new, seed)
    return out
