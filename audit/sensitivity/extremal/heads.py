"""Constructed parameter values: last layers and projection heads that place chosen rows where a
construction needs them.

Every claim bounds its quantity at *every* parameter value, so any value built here is admissible; the
constructions fit it to the rows' layer inputs (:mod:`.layer_inputs`) by least squares, then the gradient
ascent moves inputs and parameters together.

- :func:`antipodal_head`: input x to a unit vector u, its inversion to -u (the suprema of DPCL Thms. 1-3).
- :func:`label_head`: row r to a u + l_r t v, a label per row (saturated clipping at a small scale a);
  through the whole projection head with every unlabelled row's gradient parallel (:func:`aligned_head`).
- :func:`split_flip_head`: row r at a chosen angle theta_r of one plane, every row on one line of the
  output space (the split flip, group clipping and spreadout constructions).
"""

from __future__ import annotations

from typing import Any

import torch

from privaudit.audit.sensitivity.domains import Pair, Rows
from privaudit.audit.sensitivity.extremal.layer_inputs import last_linear, projector
from privaudit.audit.sensitivity.evaluator import Target

# (scale a, tan of the marked rows' angle): saturated clipping at a small scale, several angles
HEAD_SHAPES = ((1e-3, 1.0), (1e-4, 3.0), (1e-2, 0.3))
SPLIT_SHAPES = ((100.0, 1e-6), (300.0, 1e-4))  # (K, scale): K >> 1 hides the bias block, scale saturates C
SPLIT_TOLERANCE = 0.01  # radians: a constructed head placing a row further from its angle is dropped


@torch.no_grad()
def antipodal_head(net: torch.nn.Module, x: torch.Tensor, x_anti: torch.Tensor, scale: float = 1e3) -> None:
    """Replace ``net``'s last linear layer (in place) so that x maps to u and ``x_anti`` to -u.

    With q(.) the input of the last layer and d = q(x) - q(x_anti), m = (q(x) + q(x_anti)) / 2, the
    layer W q + b with W = s u d^T, b = -s u <d, m> gives W q + b = s <d, q - m> u, so after the
    L2 normalisation z(x) = u, z(x_anti) = -u exactly (and any input on x's side of the hyperplane
    <d, q - m> = 0 -- its augmented views, its copies -- maps to u as well). The theorems bound the
    quantity at every parameter value, so this value is admissible; it realises the suprema of
    :mod:`.suprema` with the model's own code.
    """
    _, last = last_linear(net)
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


def affine_fit(rows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The least-squares (minimum-norm) (w, beta) with <w, rows_r> + beta = targets_r, stacked (H + 1, ...)."""
    a = torch.cat([rows, torch.ones(len(rows), 1, dtype=rows.dtype)], dim=1)
    return torch.linalg.lstsq(a, targets, driver="gelsd").solution


def blank_head(head: torch.nn.Sequential) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 (w1, b1, w2, b2) of a Linear-ReLU-Linear head with every hidden unit off (bias -1) and a
    zero output layer, for a construction to fill in."""
    first, last = head[0], head[2]
    return (torch.zeros_like(first.weight, dtype=torch.float64), -torch.ones_like(first.bias, dtype=torch.float64),
            torch.zeros_like(last.weight, dtype=torch.float64), torch.zeros_like(last.bias, dtype=torch.float64))


def with_head(base: dict[str, torch.Tensor], prefix: str, head: torch.nn.Sequential, w1: torch.Tensor,
              b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> dict[str, torch.Tensor]:
    """A copy of the parameters ``base`` with the head ``prefix`` set to (w1, b1, w2, b2) in the model's dtype."""
    first, last = head[0], head[2]
    out = {k: v.detach().clone() for k, v in base.items()}
    for name, value, like in ((f"{prefix}.0.weight", w1, first.weight), (f"{prefix}.0.bias", b1, first.bias),
                              (f"{prefix}.2.weight", w2, last.weight), (f"{prefix}.2.bias", b2, last.bias)):
        out[name] = value.to(like.dtype)
    return out


def label_head(target: Target, q: torch.Tensor, labels: torch.Tensor, scale: float, tangent: float,
               params: Any = None, aligned: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Parameters equal to the model's (or ``params``) except a last layer mapping row r to a u + l_r t v.

    With u, v the first two output axes, the layer's v-row is the least-squares (minimum-norm)
    solution of <w, q_r> + beta = l_r over the given rows (exact when the rows' q are independent,
    i.e. fewer rows than the layer's width), its u-row is the constant ``scale``. After the
    L2 normalisation a row labelled 0 sits exactly at u, a row labelled l at angle atan(l t / a)
    towards v. Norms of the unit gradients scale as 1 / ``scale`` (the Jacobian of the normalisation),
    so a small ``scale`` saturates the clipping. Any parameter value is admissible for the claims.
    ``aligned``: the rows' representations, for :func:`aligned_head` instead.
    """
    name, last = last_linear(target.module)
    base = params if params is not None else target.parameters()
    if aligned is not None:
        return aligned_head(target, aligned, labels, scale, tangent, base)
    sol = affine_fit(q, labels.double()[:, None])[:, 0]
    weight = torch.zeros_like(last.weight, dtype=torch.float64)
    bias = torch.zeros_like(last.bias, dtype=torch.float64)
    weight[1] = sol[:-1] * scale * tangent
    bias[1] = sol[-1] * scale * tangent
    bias[0] = scale
    out = {k: v.detach().clone() for k, v in base.items()}
    out[f"{name}.weight"] = weight.to(last.weight.dtype)
    out[f"{name}.bias"] = bias.to(last.bias.dtype)
    return out


def aligned_head(target: Target, reps: torch.Tensor, labels: torch.Tensor, scale: float, tangent: float,
                 base: dict[str, torch.Tensor], height: float = 10.0) -> dict[str, torch.Tensor]:
    """:func:`label_head` through the whole projection head, with every unlabelled row's gradient parallel.

    The hidden layer gets a constant unit (``height`` on every row) and two ReLU units carrying the
    positive and the negative labels (least-squares hyperplanes through the rows' representations
    ``reps``: exact up to rep_dim + 1 rows), every other unit off. A row labelled 0 then has the
    same hidden features as every other such row and its ReLU units are inactive, so its unit
    gradient is (c_r / a) v (x) (height e_0) -- the same direction for every unchanged row, which
    the clipped sum adds at full length.
    """
    found = projector(target)
    if found is None:
        return dict(base)
    prefix, head = found
    pos = torch.where(labels > 0, labels * height, -torch.ones_like(labels))
    neg = torch.where(labels < 0, -labels * height, -torch.ones_like(labels))
    sol = affine_fit(reps, torch.stack([pos, neg], 1).double())  # (rep + 1, 2)
    w1, b1, w2, b2 = blank_head(head)
    b1[0] = height
    w1[1:3] = sol[:-1].T
    b1[1:3] = sol[-1]
    b2[0] = scale
    w2[1, 1] = scale * tangent / height
    w2[1, 2] = -scale * tangent / height
    return with_head(base, prefix, head, w1, b1, w2, b2)


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
    found = projector(target)
    if found is None:
        return dict(target.parameters())
    prefix, head = found
    t = beta / torch.tan(theta.double())
    beta0 = float((-t).max()) + big
    sol = affine_fit(reps, (t + beta0)[:, None])[:, 0]
    w1, b1, w2, b2 = blank_head(head)
    w1[0], b1[0] = sol[:-1], sol[-1]
    w2[0, 0] = scale
    b2[0], b2[1] = -scale * beta0, scale * beta
    out = with_head(target.parameters(), prefix, head, w1, b1, w2, b2)
    return out if _places_rows(out, prefix, reps, theta) else None


def line_head_pairs(target: Target, reps: torch.Tensor, theta: torch.Tensor, base: Rows, new: Rows,
                    seed: int) -> list[Pair]:
    """The pair (``base``, ``new``) at each head shape of :data:`SPLIT_SHAPES` whose :func:`split_flip_head`
    places the rows at ``theta``."""
    out = []
    for big, scale in SPLIT_SHAPES:
        params = split_flip_head(target, reps, theta, big, scale)
        if params is not None:
            out.append(Pair(base, new, 0, seed, params))
    return out


def _places_rows(params: dict[str, torch.Tensor], prefix: str, reps: torch.Tensor, theta: torch.Tensor) -> bool:
    """Whether the head of :func:`split_flip_head`, in the model's precision, puts every row within
    :data:`SPLIT_TOLERANCE` of its angle: an ill-conditioned set of representations (many rows of a briefly
    trained encoder) needs weights whose rounding moves the rows off their angles."""
    w, c = params[f"{prefix}.0.weight"][0], params[f"{prefix}.0.bias"][0]
    h = torch.relu(reps.to(w.dtype) @ w + c)
    y0 = params[f"{prefix}.2.weight"][0, 0] * h + params[f"{prefix}.2.bias"][0]
    realised = torch.atan2(params[f"{prefix}.2.bias"][1].expand_as(y0), y0).double()
    return bool(torch.isfinite(realised).all()) and float((realised - theta.double()).abs().max()) <= SPLIT_TOLERANCE
