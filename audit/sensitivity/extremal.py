"""Constructed extremal pairs and closed-form suprema of the checked quantities.

The search (:mod:`privaudit.audit.sensitivity.search`) starts from these pairs; the gradient ascent then moves
them to where the model actually realises the extreme embeddings. Derivations (z = the
L2-normalised representation of a view, C the clip norm):

* **Mean (DPCL Thm. 2).** mu = (1/N) sum_i z_i, so replacing z_k by z'_k moves it by
  ||z_k - z'_k|| / N <= 2 / N, with equality iff z'_k = -z_k (the antipode). Tight: the supremum is
  the bound 2/N. Constructed pair: replace one example by an input whose embedding is opposite
  (the inverted image; the ascent finishes the job).
* **Similarity matrix (DPCL Thm. 1).** S = Z Z^T over M = 2|B| rows; the replaced example owns two
  rows a, b (its views) -> a', b'. With u = a - a', v = b - b',
  ||Delta S||_F^2 = 2 sum_{c != a, b} (<u, z_c>^2 + <v, z_c>^2) + 2 (<a, b> - <a', b'>)^2.
  Each of the M - 2 terms of the sum is <= |u|^2 + |v|^2 <= 8, reached by a = b = e, a' = b' = -e,
  z_c = e for every other row (then the last term is 0); moving mass to the last term (<= 4 x 2)
  costs more in the sum than it gains as soon as M >= 4 (numerical maximisation over unit vectors
  agrees to 1e-9 for M = 4..32). Supremum 4 sqrt(M - 2) = 4 sqrt(2|B| - 2) against the bound
  4 sqrt(2|B| - 1): Thm. 1 is tight up to sqrt((2|B| - 2)/(2|B| - 1)) (0.82 at |B| = 2).
  Constructed pair: every example a copy of x, the replaced one's antipode.
* **SSE (DPCL Thm. 3).** SSE_j = sum_i z_ij^2 - N mu_j^2. With N - 1 copies of e_1 and the replaced
  row e_1 -> -e_1: SSE goes from 0 to N - (N - 2)^2 / N = 4 (N - 1) / N in feature 1 and stays 0
  elsewhere, so ||Delta SSE|| = 4 (N - 1)/N (the supremum of the L2 norm of the per-feature SSE
  change for unit rows: the largest change of the total sum of squares sum_j SSE_j = N - N||mu||^2
  is 4(N - 1)/N as well, and it is reached in one feature). Against the bound 6 the ratio is at
  most 2 (N - 1) / (3 N) < 2/3: Thm. 3 holds, loosely. Constructed pair: copies, one antipode.
* **Clipped gradient sums (DPCL Secs. 3.2.2 / 3.3.2; DP-GCL Eqs. 6, 8 and chunked grouping;
  Logit-DP Lemma 4.5).** Copies of one image and its antipode (:func:`image_seeds`) only shift
  the units a little. The worst cases need a parameter value (every claim is a bound at every
  value), built from the rows' last-layer inputs: :func:`flip_seeds` (replace-one: every unchanged
  unit's clipped gradient is exactly negated, ||Delta|| -> 2 (2|B| - 2) C), :func:`split_flip_seeds`
  (replace-one, plain SimCLR: every view turns, the replaced example's two included, ||Delta|| ->
  4|B|C: Sec. 3.2.1's bound is tight), :func:`add_flip_seeds`
  (add-remove: the added example out-pulls a marked one, every unit turns around),
  :func:`chunk_seeds` (chunked grouping: homogeneous groups in D, mixed in D', ||Delta|| ->
  (K - 1) C), :func:`group_clip_seeds` (Eq. 8: every fixed group turns, -> 2KC, the supremum) and
  :func:`logit_seeds` (Logit-DP at n = 1 -> 2: 2 sqrt(2) (1 - p) C > 2C). Each
  function's docstring derives its value. The pairs carry their parameters (``Pair.params``); the
  gradient ascent then moves inputs and parameters together, and a witness saves them.

Every pair is built from the target's domain (rows of the data pool, inverted, repeated), so it is
a valid input of the code the defense trains with.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Mapping

import torch

from privaudit.audit.sensitivity.domains import ImageDomain, Pair, cat_rows, slice_rows
from privaudit.audit.sensitivity.search import SEED_RANGE, Target

Params = Mapping[str, Any]


# -- closed-form suprema (see module doc) -----------------------------------------------------------
def mean_supremum(p: Params) -> float:
    """sup ||Delta mu|| = 2 / N (tight; DPCL Thm. 2)."""
    return 2.0 / int(p["B"])


def similarity_supremum(p: Params) -> float:
    """sup ||Delta S||_F = 4 sqrt(2|B| - 2) for S = Z Z^T of 2|B| unit rows (DPCL Thm. 1 states 4 sqrt(2|B| - 1))."""
    return 4.0 * math.sqrt(2 * int(p["B"]) - 2)


def sse_supremum(p: Params) -> float:
    """sup ||Delta SSE|| = 4 (N - 1) / N for N unit rows (DPCL Thm. 3 states 6)."""
    n = int(p["B"])
    return 4.0 * (n - 1) / n


# a supremum function returns None where no closed form is derived (at the claim's other settings)
SUPREMA: dict[str, tuple[Callable[[Params], float | None], str]] = {
    "dpcl.mean": (mean_supremum, "2 / B (tight)"),
    "dpcl.similarity-matrix": (similarity_supremum, "4 sqrt(2B - 2)"),
    "dpcl.sse": (sse_supremum, "4 (B - 1) / B"),
    "logitdp.spreadout": (lambda p: spreadout_supremum(p), "4C at n = 2 (none derived for n > 2)"),
    "dpgcl.group-clip": (lambda p: group_clip_supremum(p), "2KC, K = round(B / S) fixed groups"),
}


# -- constructed parameters ---------------------------------------------------------------------------
@torch.no_grad()
def antipodal_head(net: torch.nn.Module, x: torch.Tensor, x_anti: torch.Tensor, scale: float = 1e3) -> None:
    """Replace ``net``'s last linear layer (in place) so that x maps to u and ``x_anti`` to -u.

    With q(.) the input of the last layer and d = q(x) - q(x_anti), m = (q(x) + q(x_anti)) / 2, the
    layer W q + b with W = s u d^T, b = -s u <d, m> gives W q + b = s <d, q - m> u, so after the
    L2 normalisation z(x) = u, z(x_anti) = -u exactly (and any input on x's side of the hyperplane
    <d, q - m> = 0 -- its augmented views, its copies -- maps to u as well). The theorems bound the
    quantity at every parameter value, so this value is admissible; it realises the suprema of the
    module doc with the model's own code.
    """
    last = [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1]
    seen: list[torch.Tensor] = []
    hook = last.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].detach()))
    try:
        was = net.training
        net.eval()
        net(torch.cat([x, x_anti]))
        net.train(was)
    finally:
        hook.remove()
    q = seen[-1].double()
    d = q[0] - q[1]
    m = (q[0] + q[1]) / 2
    u = torch.zeros(last.out_features, dtype=torch.float64)
    u[0] = 1.0
    s = scale / float(d.norm().clamp_min(1e-12)) ** 2
    last.weight.copy_((s * torch.outer(u, d)).to(last.weight.dtype))
    last.bias.copy_((-s * float(d @ m) * u).to(last.bias.dtype))


# -- constructed pairs --------------------------------------------------------------------------------
def _seed(gen: torch.Generator) -> int:
    return int(torch.randint(SEED_RANGE, (1,), generator=gen))


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
        out.append(Pair(base, new, 0, _seed(gen)))
        if not replace:
            out.append(Pair(base, {k: v.clone() for k, v in x.items()}, 0, _seed(gen)))
    data = dom.draw(n, gen, "data")
    old = slice_rows(data, 0, dom.unit_size)
    out.append(Pair(data, dom.conform(dom.opposite(old, gen), old) if replace else dom.opposite(old, gen), 0,
                    _seed(gen)))
    black = dom.draw(1, gen, "extreme")
    black = {**black, "x": torch.zeros_like(black["x"])}
    white = {**black, "x": torch.ones_like(black["x"])}
    out.append(Pair(cat_rows(*[black] * n), white, 0, _seed(gen)))
    return out


# -- constructed parameters for clipped gradient sums ------------------------------------------------
def _last_linear(module: torch.nn.Module) -> tuple[str, torch.nn.Linear]:
    name, last = [(n, m) for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)][-1]
    return name, last


@torch.no_grad()
def last_layer_inputs(target: Target, rows: Any, randomness: int, params: Any = None) -> torch.Tensor:
    """The inputs q (R, H) of the model's last linear layer for every row the step embeds.

    Recorded by a forward hook while ``target`` evaluates ``rows``; only the step's plain embedding
    calls count (calls inside the per-unit engine's ``vmap`` carry functorch-wrapped tensors and are
    skipped), so the rows are those of the step's sources, in their order.
    """
    _, last = _last_linear(target.module)
    seen: list[torch.Tensor] = []

    def hook(mod: Any, inp: Any, out: Any) -> None:
        q = inp[0]
        if not torch._C._functorch.is_functorch_wrapped_tensor(q):
            seen.append(q.detach().double().clone())

    handle = last.register_forward_hook(hook)
    try:
        target.call(target.domain.batch(rows), randomness, params)
    finally:
        handle.remove()
    return torch.cat(seen) if seen else torch.zeros(0, last.in_features, dtype=torch.float64)


def label_head(target: Target, q: torch.Tensor, labels: torch.Tensor, scale: float, tangent: float,
               params: Any = None, aligned: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Parameters equal to the model's (or ``params``) except a last layer mapping row r to a u + l_r t v.

    With u, v the first two output axes, the layer's v-row is the least-squares (minimum-norm)
    solution of <w, q_r> + beta = l_r over the given rows (exact when the rows' q are independent,
    i.e. fewer rows than the layer's width), its u-row is the constant ``scale``. After the
    L2 normalisation a row labelled 0 sits exactly at u, a row labelled l at angle atan(l t / a)
    towards v. Norms of the unit gradients scale as 1 / ``scale`` (the Jacobian of the normalisation),
    so a small ``scale`` saturates the clipping. Any parameter value is admissible for the claims.
    """
    name, last = _last_linear(target.module)
    base = params if params is not None else target.parameters()
    if aligned is not None:
        return _aligned_head(target, aligned, labels, scale, tangent, base)
    a = torch.cat([q, torch.ones(len(q), 1, dtype=q.dtype)], dim=1)
    sol = torch.linalg.lstsq(a, labels.double()[:, None], driver="gelsd").solution[:, 0]
    weight = torch.zeros_like(last.weight, dtype=torch.float64)
    bias = torch.zeros_like(last.bias, dtype=torch.float64)
    weight[1] = sol[:-1] * scale * tangent
    bias[1] = sol[-1] * scale * tangent
    bias[0] = scale
    out = {k: v.detach().clone() for k, v in base.items()}
    out[f"{name}.weight"] = weight.to(last.weight.dtype)
    out[f"{name}.bias"] = bias.to(last.bias.dtype)
    return out


def _projector(target: Target) -> tuple[str, torch.nn.Sequential] | None:
    """The Linear-ReLU-Linear projection head of a :class:`ContrastiveModel` (name, module), if any."""
    for name, m in target.module.named_modules():
        if isinstance(m, torch.nn.Sequential) and len(m) == 3 and isinstance(m[0], torch.nn.Linear) \
                and isinstance(m[1], torch.nn.ReLU) and isinstance(m[2], torch.nn.Linear) and name.startswith("projector"):
            return name, m
    return None


def _aligned_head(target: Target, reps: torch.Tensor, labels: torch.Tensor, scale: float, tangent: float,
                  base: dict[str, torch.Tensor], height: float = 10.0) -> dict[str, torch.Tensor]:
    """:func:`label_head` through the whole projection head, with every unlabelled row's gradient parallel.

    The hidden layer gets a constant unit (``height`` on every row) and two ReLU units carrying the
    positive and the negative labels (least-squares hyperplanes through the rows' representations
    ``reps``: exact up to rep_dim + 1 rows), every other unit off. A row labelled 0 then has the
    same hidden features as every other such row and its ReLU units are inactive, so its unit
    gradient is (c_r / a) v (x) (height e_0) -- the same direction for every unchanged row, which
    the clipped sum adds at full length.
    """
    found = _projector(target)
    if found is None:
        return dict(base)
    prefix, head = found
    first, last = head[0], head[2]
    a = torch.cat([reps, torch.ones(len(reps), 1, dtype=reps.dtype)], dim=1)
    pos = torch.where(labels > 0, labels * height, -torch.ones_like(labels))
    neg = torch.where(labels < 0, -labels * height, -torch.ones_like(labels))
    sol = torch.linalg.lstsq(a, torch.stack([pos, neg], 1).double(), driver="gelsd").solution  # (rep + 1, 2)
    w1 = torch.zeros_like(first.weight, dtype=torch.float64)
    b1 = -torch.ones_like(first.bias, dtype=torch.float64)
    b1[0] = height
    w1[1:3] = sol[:-1].T
    b1[1:3] = sol[-1]
    w2 = torch.zeros_like(last.weight, dtype=torch.float64)
    b2 = torch.zeros_like(last.bias, dtype=torch.float64)
    b2[0] = scale
    w2[1, 1] = scale * tangent / height
    w2[1, 2] = -scale * tangent / height
    out = {k: v.detach().clone() for k, v in base.items()}
    for name, value, like in ((f"{prefix}.0.weight", w1, first.weight), (f"{prefix}.0.bias", b1, first.bias),
                              (f"{prefix}.2.weight", w2, last.weight), (f"{prefix}.2.bias", b2, last.bias)):
        out[name] = value.to(like.dtype)
    return out


def _projector_inputs(target: Target, rows: Any, randomness: int) -> torch.Tensor | None:
    found = _projector(target)
    if found is None:
        return None
    return _layer_inputs(target, found[1][0], rows, randomness)


def _row_labels(q_rows: int, n_units: int, per_unit: torch.Tensor) -> torch.Tensor:
    """Labels of the step's rows from one label per example (rows are blocks of the batch, in order)."""
    if n_units == 0 or q_rows % n_units:
        raise ValueError(f"{q_rows} embedded rows are not blocks of {n_units} examples")
    return per_unit.double().repeat(q_rows // n_units)


# (scale a, tan of the marked rows' angle): saturated clipping at a small scale, several angles
HEAD_SHAPES = ((1e-3, 1.0), (1e-4, 3.0), (1e-2, 0.3))


def flip_seeds(target: Target, gen: torch.Generator, images: int = 2) -> list[Pair]:
    """Replace-one pairs with constructed parameters that turn every clipped unit gradient around.

    Derivation (SimCLR / NT-Xent on the 2|B| views, DPCL Sec. 3.2.2, clipped per view). Put every
    view of the |B| - 1 unchanged examples at one point u of the sphere and the replaced example's
    two views at angle +theta towards v in D, at -theta in D' (:func:`label_head` on the rows'
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
    dom = target.domain
    if target.module is None or not isinstance(dom, ImageDomain) or target.relation != "replace-one" \
            or target.fixed_base is not None or target.units < 2:
        return []
    n, out = target.units, []
    for i in range(images):
        x = {"x": dom.pool_x[i:i + 1].clone()} if i == 0 else dom.draw(1, gen, "data")
        base = cat_rows({"x": 1.0 - x["x"]}, *[x] * (n - 1))
        new = dom.draw(1, gen, "data")
        seed = _seed(gen)
        pair = Pair(base, new, 0, seed)
        a_rows, b_rows = pair.neighbours(target.relation, dom.unit_size)
        qa, qb = last_layer_inputs(target, a_rows, seed), last_layer_inputs(target, b_rows, seed)
        marked = torch.zeros(n)
        marked[0] = 1.0
        la, lb = _row_labels(len(qa), n, marked), -_row_labels(len(qb), n, marked)
        keep = lb != 0
        q, labels = torch.cat([qa, qb[keep]]), torch.cat([la, lb[keep]])
        for scale, tangent in HEAD_SHAPES:
            out.append(Pair(base, new, 0, seed, label_head(target, q, labels, scale, tangent)))
        ra, rb = _projector_inputs(target, a_rows, seed), _projector_inputs(target, b_rows, seed)
        if ra is not None and len(labels) <= ra.shape[1] + 1:
            reps = torch.cat([ra, rb[keep]])
            for scale, tangent in HEAD_SHAPES[:2]:
                out.append(Pair(base, new, 0, seed, label_head(target, q, labels, scale, tangent, aligned=reps)))
    return out


# -- the split flip: every view of a plain SimCLR step, the replaced example's two included -------------
SPLIT_MARGIN = 0.05  # angles kept in [margin, pi - margin]: |cot| <= 20, the rows stay on the head's line
SPLIT_SHAPES = ((100.0, 1e-6), (300.0, 1e-4))  # (K, scale): K >> 1 hides the bias block, scale saturates C
# the smallest torque |dL/dtheta_r| (mean loss) the construction counts in full: with K = 100, sin theta >=
# sin(margin) and scale 1e-6, a row's gradient is >= 5e6 times its torque (>= 50 at the floor), so every
# such row is clipped at the clip norms the claims use (0.05 to 1)
SPLIT_TORQUE_FLOOR = 1e-5
SPLIT_TOLERANCE = 0.01  # radians: a constructed head placing a row further from its angle is dropped


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
    best, best_r, _ = _evolve_angles(pop, lambda q: split_flip_ratio(q, b, tau, **precision), rounds, candidates,
                                     lo, hi, gen)
    return tuple(float(v) for v in best[0]), best_r


def _evolve_angles(pop: torch.Tensor, ratio, rounds: int, candidates: int, lo: float, hi: float,
                   gen: torch.Generator) -> tuple[torch.Tensor, float, torch.Tensor]:
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


def split_flip_head(target: Target, reps: torch.Tensor, theta: torch.Tensor, big: float, scale: float,
                    beta: float = 1.0) -> dict[str, torch.Tensor] | None:
    """Parameters putting row r (projector input ``reps[r]``) at angle ``theta[r]`` of the (e_0, e_1) plane.

    The projection head's hidden unit 0 carries kappa_r = beta cot(theta_r) + beta_0 > 0 (a
    least-squares hyperplane through the rows' representations: exact up to rep_dim + 1 rows), every
    other unit is off; the last layer is y = scale (kappa - beta_0) e_0 + scale beta e_1 (column 0
    of W = scale e_0, bias scale (-beta_0, beta)), so y_r = scale (beta cot theta_r, beta) sits at
    angle theta_r. beta_0 = max_r(-beta cot theta_r) + ``big`` keeps every kappa_r >= ``big``.
    None when the model's precision cannot place the rows within :data:`SPLIT_TOLERANCE` of their angles.
    """
    found = _projector(target)
    if found is None:
        return dict(target.parameters())
    prefix, head = found
    first, last = head[0], head[2]
    t = beta / torch.tan(theta.double())
    beta0 = float((-t).max()) + big
    kappa = t + beta0
    a = torch.cat([reps, torch.ones(len(reps), 1, dtype=reps.dtype)], dim=1)
    sol = torch.linalg.lstsq(a, kappa[:, None], driver="gelsd").solution[:, 0]
    w1 = torch.zeros_like(first.weight, dtype=torch.float64)
    b1 = -torch.ones_like(first.bias, dtype=torch.float64)
    w1[0], b1[0] = sol[:-1], sol[-1]
    w2 = torch.zeros_like(last.weight, dtype=torch.float64)
    b2 = torch.zeros_like(last.bias, dtype=torch.float64)
    w2[0, 0] = scale
    b2[0], b2[1] = -scale * beta0, scale * beta
    out = {k: v.detach().clone() for k, v in target.parameters().items()}
    for name, value, like in ((f"{prefix}.0.weight", w1, first.weight), (f"{prefix}.0.bias", b1, first.bias),
                              (f"{prefix}.2.weight", w2, last.weight), (f"{prefix}.2.bias", b2, last.bias)):
        out[name] = value.to(like.dtype)
    # the fit in the model's precision: an ill-conditioned set of representations (many rows of a
    # briefly trained encoder) needs weights whose rounding moves the rows off their angles
    w, c = out[f"{prefix}.0.weight"][0], out[f"{prefix}.0.bias"][0]
    h = torch.relu(reps.to(w.dtype) @ w + c)
    y0 = out[f"{prefix}.2.weight"][0, 0] * h + out[f"{prefix}.2.bias"][0]
    realised = torch.atan2(out[f"{prefix}.2.bias"][1].expand_as(y0), y0).double()
    if not bool(torch.isfinite(realised).all()) or float((realised - theta.double()).abs().max()) > SPLIT_TOLERANCE:
        return None
    return out


def split_flip_seeds(target: Target, gen: torch.Generator, images: int = 2) -> list[Pair]:
    """Replace-one pairs for the plain per-view clipped SimCLR gradient (DPCL Sec. 3.2.1) in which every
    view's clipped gradient turns around -- the replaced example's two views included.

    Derivation. Put every row's embedding in one plane, z_r = (cos theta_r, sin theta_r), and make the
    last layer's input of every row a large multiple kappa_r e_0 of one hidden unit
    (:func:`split_flip_head`; y_r = scale (beta cot theta_r, beta), so theta_r in (0, pi): the rows lie
    on one line of the output space). NT-Xent depends on the angles only; its cotangent at row r is
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
    too strong for the split family (0.87 at |B| = 4). :func:`flip_seeds` stops at (|B| - 1) / |B|.
    """
    dom = target.domain
    b = target.units
    tau = target.params.get("tau")
    found = _projector(target) if target.module is not None else None
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
        seed = _seed(gen)
        pair = Pair(base, new, 0, seed)
        a_rows, b_rows = pair.neighbours(target.relation, dom.unit_size)
        ra, rb = _projector_inputs(target, a_rows, seed), _projector_inputs(target, b_rows, seed)
        if ra is None or len(ra) != 2 * b or len(rb) != 2 * b:
            return out
        reps = torch.cat([ra, rb[[0, b]]])
        for big, scale in SPLIT_SHAPES:
            params = split_flip_head(target, reps, theta, big, scale)
            if params is not None:
                out.append(Pair(base, new, 0, seed, params))
    return out


def add_flip_seeds(target: Target, gen: torch.Generator, pulls: tuple[float, ...] = (3.0, 10.0)) -> list[Pair]:
    """Add-remove pairs with constructed parameters in which the added example reverses every unit.

    Derivation (the add-remove analogue of :func:`flip_seeds`; DP-GCL's per-term clipping, Eq. 6,
    and group clipping with full-batch negatives, Eq. 8). D holds a marked example m (its rows at
    angle +theta from u) and |B| - 1 copies of one image (rows exactly at u); D' adds an example
    at angle -phi with tan phi = ``pull`` tan theta. A term or group of the unchanged examples sees
    m and the added example only as negatives, so its tangent cotangent is proportional to
    p_m sin theta - p_new sin phi: positive in D, negative in D' once the pull wins, and every
    unchanged unit's clipped gradient turns around (2C each), the added one's units add C each.
    That is how (2|B| + 1) t C (Eq. 6) and (2K + 1) C (Thm. 1) could be approached; what remains
    are the marked example's own units, which change without turning fully.
    """
    dom, n = target.domain, target.units
    if target.module is None or not isinstance(dom, ImageDomain) or target.relation != "add-remove" \
            or target.fixed_base is not None or n < 1 or "n" in target.params:
        return []
    x = {"x": dom.pool_x[:1].clone()}
    base = cat_rows({"x": 1.0 - x["x"]}, *[x] * (n - 1))
    new = dom.draw(1, gen, "data")
    seed = _seed(gen)
    _, b_rows = Pair(base, new, 0, seed).neighbours(target.relation, dom.unit_size)
    q = last_layer_inputs(target, b_rows, seed)
    out = []
    for pull in pulls:
        marks = torch.zeros(n + 1)
        marks[0], marks[n] = 1.0, -pull
        labels = _row_labels(len(q), n + 1, marks)
        for scale, tangent in HEAD_SHAPES[:2]:
            out.append(Pair(base, new, 0, seed, label_head(target, q, labels, scale, tangent / pull)))
        reps = _projector_inputs(target, b_rows, seed)
        if reps is not None and len(labels) <= reps.shape[1] + 1:
            out.append(Pair(base, new, 0, seed, label_head(target, q, labels, 1e-3, 1.0 / pull, aligned=reps)))
    return out


def chunk_seeds(target: Target, gen: torch.Generator, tries: int = 64) -> list[Pair]:
    """Add-remove pairs with constructed parameters for DP-GCL's chunked grouping (Algorithm 1 line 5).

    Derivation. Groups are consecutive chunks of S in the order of one uniform key per batch
    position (position-stable, :class:`privaudit.defenses.dp.randomness.StepRandomness`). Among the shared
    seeds tried, take the one whose added example gets the smallest key, so it enters D' first and
    shifts every example one place. Give the examples two types by their rank in D, alternating
    per chunk: ranks 0..S-1 type P, S..2S-1 type Q, ... -- every group of D is homogeneous, every
    group of D' after the first holds one example of the previous type and S - 1 of the next:
    mixed. With the constructed parameters (:func:`label_head`) P rows sit exactly at u and Q rows
    at angle theta: a homogeneous group's embeddings are all equal, so its loss gradient has no
    tangent component and its unit gradient is 0; every mixed group has the same embeddings, so its
    clipped gradient is C along nearly the same direction. ||Delta|| approaches (K - 1) C for
    K = ceil(|B| / S) groups, against the paper's 2C: a ratio of (K - 1) / 2, growing with |B|.
    """
    from privaudit.defenses.dp.randomness import StepRandomness

    dom, n = target.domain, target.units
    s = int(target.params.get("S", 0) or 0)
    if target.module is None or not isinstance(dom, ImageDomain) or target.relation != "add-remove" \
            or n < 2 or s < 1:
        return []
    best = None
    for _ in range(tries):
        seed = _seed(gen)
        keys = StepRandomness(seed).uniform(n + 1, "groups")
        rank_new = int((keys[:n] < keys[n]).sum())
        if best is None or rank_new < best[0]:
            best = (rank_new, seed, keys[:n])
        if rank_new == 0:
            break
    _, seed, keys = best
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
        labels = _row_labels(len(q), n + 1, torch.cat([types, types[:1] * 0 + (new is y)]))
        for scale, tangent in HEAD_SHAPES:
            out.append(Pair(base, new, 0, seed, label_head(target, q, labels, scale, tangent)))
    return out


@torch.no_grad()
def _layer_inputs(target: Target, layer: torch.nn.Module, rows: Any, randomness: int) -> torch.Tensor:
    """Inputs of ``layer`` for the step's plain embedding calls (see :func:`last_layer_inputs`)."""
    seen: list[torch.Tensor] = []

    def hook(mod: Any, inp: Any, out: Any) -> None:
        if not torch._C._functorch.is_functorch_wrapped_tensor(inp[0]):
            seen.append(inp[0].detach().double().clone())

    handle = layer.register_forward_hook(hook)
    try:
        target.call(target.domain.batch(rows), randomness)
    finally:
        handle.remove()
    return torch.cat(seen)


# (delta, epsilon, epsilon''): the small angles of :func:`logit_seeds`
LOGIT_ANGLES = ((0.1, 0.1, 0.1), (0.3, 0.3, 0.3), (0.03, 0.03, 0.03))


def logit_seeds(target: Target, gen: torch.Generator, scale: float = 1e-3, height: float = 10.0) -> list[Pair]:
    """Add-remove pairs n = 1 -> 2 with constructed parameters for Logit-DP's pair sums (Lemma 4.5).

    Derivation. With one pair (x1, y1), the InfoNCE loss is 0 and every tau_ij = dL/dZ_ij vanishes,
    so Delta = ||sum_ij tau_ij Clip_B(grad Z_ij)|| over the 2 x 2 logits of D'. Row i has
    tau_ii = p_ii - 1 and tau_ij = p_ij = 1 - p_ii. The projection head Linear-ReLU-Linear is set so
    that the four rows' hidden features are orthogonal (unit k active, at ``height``, only on row k:
    a least-squares hyperplane through the rows' representations) and the last layer puts row k at
    angle phi_k of the (u, v) plane at radius ``scale``: x1 at 0, y2 at delta, y1 at pi + epsilon,
    x2 at pi + delta - epsilon''. Then grad_W Z_ij = s_ij (t_xi (x) e_xi - t_yj (x) e_yj) / scale
    with s_ij = sin(phi_yj - phi_xi) (the other layers get nothing: the head's columns are
    parallel to the rows' embeddings, orthogonal to the tangents t). The signs make every c_ij =
    tau_ij sgn(s_ij) equal to 1 - p (p = p_ii, the same for both rows), so the clipped sum has norm
    C sqrt((1/2) [sum_i (sum_j c_ij)^2 + sum_j (sum_i c_ij)^2]) = 2 sqrt(2) (1 - p) C with
    p = 1 / (1 + e^{2 cos(delta) / tau}): 2.49 C at tau = 1 (ratio 1.25 against Lemma 4.5's 2C at
    n = 2), 2.78 C at tau = 0.5, 2.83 C at tau = 0.1.
    """
    import math as _m

    dom = target.domain
    module = target.module
    projector = getattr(getattr(module, "projector", None), "net", None)
    if module is None or not isinstance(dom, ImageDomain) or target.relation != "add-remove" or target.units != 1 \
            or "n" not in target.params or projector is None or len(projector) != 3:
        return []
    first, last = projector[0], projector[2]
    prefix = [n for n, m in module.named_modules() if m is projector][0]
    if first.out_features < 4 or last.out_features < 2:
        return []
    out = []
    x = {"x": dom.pool_x[:1].clone()}
    new = {"x": 1.0 - x["x"]}
    seed = _seed(gen)
    pair = Pair(x, new, 0, seed)
    _, b_rows = pair.neighbours(target.relation, dom.unit_size)
    reps = _layer_inputs(target, first, b_rows, seed)  # rows [x1, x2, y1, y2]
    if len(reps) != 4:
        return []
    a = torch.cat([reps, torch.ones(4, 1, dtype=reps.dtype)], dim=1)
    targets = height * (2 * torch.eye(4, dtype=reps.dtype) - 1)  # +height on row k, -height elsewhere
    sol = torch.linalg.lstsq(a, targets, driver="gelsd").solution  # (rep + 1, 4)
    base = target.parameters()
    for delta, eps, eps2 in LOGIT_ANGLES:
        phis = torch.tensor([0.0, _m.pi + delta - eps2, _m.pi + eps, delta], dtype=torch.float64)
        w1 = torch.zeros_like(first.weight, dtype=torch.float64)
        b1 = -torch.ones_like(first.bias, dtype=torch.float64)
        w1[:4] = sol[:-1].T
        b1[:4] = sol[-1]
        w2 = torch.zeros_like(last.weight, dtype=torch.float64)
        w2[0, :4] = scale * torch.cos(phis) / height
        w2[1, :4] = scale * torch.sin(phis) / height
        params = {k: v.detach().clone() for k, v in base.items()}
        for name, value, like in ((f"{prefix}.0.weight", w1, first.weight), (f"{prefix}.0.bias", b1, first.bias),
                                  (f"{prefix}.2.weight", w2, last.weight),
                                  (f"{prefix}.2.bias", torch.zeros_like(last.bias, dtype=torch.float64), last.bias)):
            params[name] = value.to(like.dtype)
        out.append(Pair(x, new, 0, seed, params))
    return out


def plain_simclr_seeds(target: Target, gen: torch.Generator) -> list[Pair]:
    """:func:`split_flip_seeds` first (they reach the bound), then :func:`gradient_seeds`."""
    return split_flip_seeds(target, gen) + gradient_seeds(target, gen)


# -- DP-GCL group clipping with full-batch negatives (Eq. 8, Thm. 1) ------------------------------------
def group_clip_supremum(p: Params) -> float:
    """sup ||Delta|| = 2KC for Eq. 8's group clipping with K fixed groups (random grouping; Thm. 1 states (2K + 1) C).

    Upper bound: the added example joins one of the K fixed groups, so no group appears and each
    group's clipped gradient moves by at most 2C. Reached in the limit: :func:`group_clip_limit`
    turns every group's clipped gradient around (the added example's group included) with the rows
    on a half circle, as :func:`split_flip_seeds` does for SimCLR's views.
    """
    return 2.0 * round(int(p["B"]) / int(p["S"])) * float(p["C"])


def _group_directions(theta: torch.Tensor, groups: torch.Tensor, k: int, tau: float, big: float) -> torch.Tensor:
    """Directions (M, K, 2) of the K groups' clipped gradients in the limit of :func:`split_flip_head`.

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

    An elitist random search (``rounds``, as :func:`split_flip_angles`), then its best ``starts``
    ascended together (Adam on logit coordinates of (margin, pi - margin); the limit is smooth where
    no group's vector vanishes). Deterministic (seeded by ``seed``).
    """
    gen = torch.Generator().manual_seed(seed)
    g = torch.tensor(groups)
    dim = 3 * (len(groups) + 1)
    lo, hi = SPLIT_MARGIN, math.pi - SPLIT_MARGIN
    pop = lo + (hi - lo) * torch.rand(candidates, dim, generator=gen, dtype=torch.float64)
    best, best_r, elite = _evolve_angles(pop, lambda q: group_clip_ratio(q, g, new_group, k, tau, big), rounds,
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


def group_clip_seeds(target: Target, gen: torch.Generator, tries: int = 64) -> list[Pair]:
    """Add-remove pairs with constructed parameters turning every group of Eq. 8 around (-> 2KC).

    Derivation. With the head of :func:`split_flip_head` every row sits on the half circle and a
    group's clipped gradient tends to C times the direction of sum_r (dS_j/dtheta_r) kappa_r
    sin(theta_r) t(theta_r) (:func:`_group_directions`), S_j its members' full-batch terms (Eq. 12
    with N_a = 1). Among the shared seeds tried, take one whose random grouping leaves no group of
    D empty (the added example then joins an occupied group: each group may turn, 2C each); the
    angles of the 3(|B| + 1) rows of D' that maximise the limit (:func:`group_clip_limit`) turn
    every group, the added example's included: the limit is 2K / (2K + 1) of Thm. 1's (2K + 1) C
    (0.8 at K = 2, 0.889 at K = 4), the closed-form supremum 2KC (:func:`group_clip_supremum`).
    """
    from privaudit.defenses.dp.randomness import StepRandomness
    from privaudit.defenses.dp_gcl import assign_groups

    dom, b = target.domain, target.units
    s_size, tau = int(target.params.get("S", 0) or 0), target.params.get("tau")
    found = _projector(target) if target.module is not None else None
    if found is None or tau is None or s_size < 1 or not isinstance(dom, ImageDomain) \
            or target.relation != "add-remove" or b < 1 or 3 * (b + 1) > found[1][0].in_features + 1:
        return []
    k = max(1, round(b / s_size))
    chosen = None
    for _ in range(tries):
        seed = _seed(gen)
        keys = StepRandomness(seed).uniform(b + 1, "groups")
        groups = assign_groups(keys, "random", k, s_size)
        if len(torch.unique(groups[:b])) == k:
            chosen = (seed, tuple(int(g) for g in groups[:b]), int(groups[b]))
            break
    if chosen is None:
        return []
    seed, groups, new_group = chosen
    angles, _ = _group_clip_angles(groups, new_group, k, float(tau))
    base, new = dom.draw(b, gen, "data"), dom.draw(1, gen, "data")
    pair = Pair(base, new, 0, seed)
    _, b_rows = pair.neighbours(target.relation, dom.unit_size)
    reps = _projector_inputs(target, b_rows, seed)
    if reps is None or len(reps) != 3 * (b + 1):
        return []
    params = split_flip_head(target, reps, torch.tensor(angles, dtype=torch.float64), 100.0, 1e-6)
    return [] if params is None else [Pair(base, new, 0, seed, params)]


def group_clip_pairs(target: Target, gen: torch.Generator) -> list[Pair]:
    """:func:`group_clip_seeds` first, then :func:`gradient_seeds` (DP-GCL Eq. 8's constructed pairs)."""
    return group_clip_seeds(target, gen) + gradient_seeds(target, gen)


# (delta_x, delta_y): the spreadout pair's angles from the ends of (0, pi), see :func:`spreadout_seeds`
SPREADOUT_ANGLES = ((0.05, 0.05), (0.02, 0.02), (0.1, 0.1))


def spreadout_supremum(p: Params) -> float | None:
    """sup ||Delta|| = 4C for Logit-DP's spreadout pair sums at n = 2 (one pair added to one); None for n > 2.

    Upper bound: D (one pair) is below the spreadout loss's two-row minimum and releases 0; D' has
    two off-diagonal logits Z_12 = <x1, y2>, Z_21 = <x2, y1> with dL/dZ_ij = 2 Z_ij / (n - 1) = 2 Z_ij
    (Logit-DP Def. 2.3), so ||Delta|| = ||2 Z_12 Clip(grad Z_12) + 2 Z_21 Clip(grad Z_21)|| <= 4C.
    Reached in the limit by :func:`spreadout_seeds`. For n > 2 no closed form is derived.
    """
    return 4.0 * float(p["C"]) if int(p["n"]) == 2 else None


def spreadout_seeds(target: Target, gen: torch.Generator) -> list[Pair]:
    """Add-remove pairs n = 1 -> 2 with constructed parameters reaching 4C for the spreadout pair sums.

    Derivation. Rows [x1, x2, y1, y2] of D' share one hidden feature of the projection head and sit on
    one line of the output plane (:func:`split_flip_head`): x1, x2 at angle delta_x, y1, y2 at
    pi - delta_y. Then Z_12 = Z_21 = cos(pi - delta) = -cos(delta) (delta = delta_x + delta_y) and,
    in the limit of the head (large feature, small scale: only the last layer's block counts, every
    logit's gradient clipped), grad Z_ij is sin(delta) (t_xi / |y_xi| - t_yj / |y_yj|) (x) e_0 with
    tangents t(delta_x) = -t(pi - delta_y) up to O(delta): the same direction for (1, 2) and (2, 1).
    Both clipped terms 2 Z_ij C u are parallel, ||Delta|| = 4 cos(delta) C -> 4C (2/3 of Lemma 4.6's
    6C; :func:`spreadout_supremum`). The first-order search alone reaches about 0.6 of the bound.
    """
    dom = target.domain
    found = _projector(target) if target.module is not None else None
    if found is None or not isinstance(dom, ImageDomain) or target.relation != "add-remove" or target.units != 1 \
            or int(target.params.get("n", 0)) != 2 or found[1][2].out_features < 2:
        return []
    x = {"x": dom.pool_x[:1].clone()}
    new = dom.draw(1, gen, "data")
    seed = _seed(gen)
    pair = Pair(x, new, 0, seed)
    _, b_rows = pair.neighbours(target.relation, dom.unit_size)
    reps = _projector_inputs(target, b_rows, seed)  # rows [x1, x2, y1, y2]
    if reps is None or len(reps) != 4:
        return []
    out = []
    for dx, dy in SPREADOUT_ANGLES:
        theta = torch.tensor([dx, dx, math.pi - dy, math.pi - dy], dtype=torch.float64)
        for big, scale in SPLIT_SHAPES:
            params = split_flip_head(target, reps, theta, big, scale)
            if params is not None:
                out.append(Pair(x, new, 0, seed, params))
    return out


def gradient_seeds(target: Target, gen: torch.Generator) -> list[Pair]:
    """:func:`image_seeds` plus the constructed-parameter pairs that apply to the target."""
    return (image_seeds(target, gen) + flip_seeds(target, gen) + add_flip_seeds(target, gen)
            + chunk_seeds(target, gen) + logit_seeds(target, gen))


def spreadout_pairs(target: Target, gen: torch.Generator) -> list[Pair]:
    """:func:`spreadout_seeds` first, then :func:`gradient_seeds` (Logit-DP Lemma 4.6's constructed pairs)."""
    return spreadout_seeds(target, gen) + gradient_seeds(target, gen)
