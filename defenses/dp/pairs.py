"""Per-similarity-pair clipping (Logit-DP, Kong et al.): two implementations of one quantity.

For logits Z_ij = s(f(x_i), f(y_j)) and a loss L(Z), Lemma 4.1 writes the gradient as
sum_ij tau_ij grad Z_ij with tau_ij = dL/dZ_ij, and Corollary 4.3 / Algorithm 1 release

    g_bar = sum_ij tau_ij Clip_B(grad_theta Z_ij).

* :func:`direct_pair_sum` -- the reference: materialise every pair gradient
  grad Z_ij = J_{x_i}^T a_ij + J_{y_j}^T b_ij (two per-sample VJPs per pair, as the public code does),
  clip, weight, sum; n^2 gradients of size p, in chunks of ``chunk`` pairs.
* :func:`efficient_pair_sum` -- Sec. 5.3: compute lambda_ij = tau_ij min(1, B / ||grad Z_ij||) and then
  grad F of F = sum_ij lambda_ij Z_ij (lambda detached): grad F = g_bar. The Jacobians the norms need
  already give it, grad F = sum_i J_{x_i}^T (sum_j lambda_ij a_ij) + sum_j J_{y_j}^T (sum_i lambda_ij b_ij),
  so no further backward pass is run. The Jacobians come from ``vmap`` (:func:`per_sample_jacobians`), or
  with ``engine='layerwise'`` from :func:`defenses.dp.layerwise.row_jacobians` (one forward/backward of
  the rows replicated D times).
  The pair norms come without any pair gradient: with the per-sample Jacobians J_r (D x p) of the
  2n rows (D vmapped VJPs per row), the D x D Grams G_i = J_{x_i} J_{x_i}^T, H_j = J_{y_j} J_{y_j}^T and
  the cross Grams K_ij = J_{x_i} J_{y_j}^T give
      ||grad Z_ij||^2 = a_ij^T G_i a_ij + b_ij^T H_j b_ij + 2 a_ij^T K_ij b_ij
  exactly (``norms='exact'``). ``norms='upper-bound'`` drops K and clips with
  sqrt(a^T G a) + sqrt(b^T H b) >= ||grad Z_ij|| (triangle inequality): each clipped pair still has
  norm <= B, so the sensitivity bound holds, at the price of some over-clipping.

Cost: direct needs 2 n^2 per-sample backward passes and n^2 p memory traffic; efficient needs 2 n D
per-sample backward passes, (nD)^2 p flops for the cross Grams (a single matrix product) and
2 n D p memory for the Jacobians -- the better the smaller D (Logit-DP's embedding net uses D = 8).
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch
from torch.func import grad, vjp, vmap

from defenses.dp.clipping import clip_factors
from defenses.dp.contrastive import tracking
from defenses.dp.embedder import Embedder, Source
from defenses.dp.gradients import ClippedSum, clipped_sum
from defenses.dp.units import pair_units

PAIR_NORMS = ("exact", "upper-bound")

PairSimilarity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def pair_derivatives(similarity: PairSimilarity, zx: torch.Tensor, zy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """a_ij = dZ_ij/dz(x_i) and b_ij = dZ_ij/dz(y_j), each (n, m, D), for Z_ij = similarity(zx_i, zy_j)."""
    d = grad(similarity, argnums=(0, 1))
    a, b = vmap(vmap(d, in_dims=(None, 0)), in_dims=(0, None))(zx, zy)
    return a, b


def per_sample_jacobians(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor,
                         chunk: int | None = None) -> torch.Tensor:
    """J (n, D, p): the Jacobian of each row's embedding with respect to the flat parameters.

    One forward per row and D vmapped VJPs of it (the rows vmapped too); on CPU this is several
    times faster than ``vmap(jacrev(...))``, which re-enters the transform stack per output.
    """
    def one(p, xi):
        z, pullback = vjp(lambda q: embedder.embed(q, xi[None])[0], p)
        return vmap(pullback)(torch.eye(z.shape[-1], dtype=z.dtype, device=z.device))[0]

    jac = vmap(one, in_dims=(None, 0), chunk_size=chunk)(dict(params), x)
    return embedder.space.flatten(jac, lead=2)


def row_jacobians(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor,
                  chunk: int | None = None) -> torch.Tensor:
    """J (n, D, p): ``vmap`` of D VJPs per row, or the layerwise engine when it is asked for explicitly.

    Under ``engine='auto'`` the Jacobians come from ``vmap``: on CPU with Logit-DP's D = 8 it measured
    faster (about 15 ms against 22 ms for 32 rows of the benchmark's CNN), because the layerwise path
    replicates every row D times; both give the same numbers (tests).
    """
    from defenses.dp.gradients import engine_reason

    if embedder.engine == "layerwise" and engine_reason(embedder) is None:
        from defenses.dp.layerwise import row_jacobians as layerwise_jacobians

        return layerwise_jacobians(embedder, params, Source(x))
    return per_sample_jacobians(embedder, params, x, chunk)


def pair_norms(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
               a: torch.Tensor, b: torch.Tensor, mode: str = "exact", chunk: int | None = None,
               jacobians: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """||grad_theta Z_ij|| for every pair (n, m) from Jacobian Grams (exact), or its triangle upper bound."""
    if mode not in PAIR_NORMS:
        raise ValueError(f"pair norms: {mode!r} not in {PAIR_NORMS}")
    if jacobians is None:
        jacobians = (row_jacobians(embedder, params, x, chunk), row_jacobians(embedder, params, y, chunk))
    jx, jy = jacobians  # (n, D, p), (m, D, p)
    dtype = jx.dtype
    # Grams in float64 (exact products of float32 entries, accumulation error ~p 2^-53): the identity
    # below cancels where a pair's gradient is small against its parts, and float32 there can put the
    # computed norm below the true one, letting a clipped pair exceed C (see _rounding_slack).
    jx, jy, a, b = jx.double(), jy.double(), a.double(), b.double()
    gx = torch.einsum("idp,iep->ide", jx, jx)
    gy = torch.einsum("jdp,jep->jde", jy, jy)
    own_x = torch.einsum("ijd,ide,ije->ij", a, gx, a).clamp_min(0)
    own_y = torch.einsum("ijd,jde,ije->ij", b, gy, b).clamp_min(0)
    n, d, p = jx.shape
    slack = _rounding_slack(jx, jy, a, b)
    if mode == "upper-bound":
        return _round_up((own_x + slack).sqrt() + (own_y + slack).sqrt(), dtype)
    m = jy.shape[0]
    cross = (jx.reshape(n * d, p) @ jy.reshape(m * d, p).T).view(n, d, m, d)  # K_ij blocks
    sq = own_x + own_y + 2 * torch.einsum("ijd,idje,ije->ij", a, cross, b)
    return _round_up((sq.clamp_min(0) + slack).sqrt(), dtype)


def _round_up(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` in ``dtype``, nudged up by one rounding so the cast never lowers a norm."""
    return (x * (1 + torch.finfo(dtype).eps)).to(dtype)


def _rounding_slack(jx: torch.Tensor, jy: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An upper bound on the rounding error of the Gram-identity squared norm, so a clip never under-clips.

    ||a^T J_x + b^T J_y||^2 = a^T G_x a + b^T G_y b + 2 a^T K b is evaluated from floating-point dot
    products of length p; where the two parts cancel (a pair whose gradient is nearly 0) the computed
    value can fall below the true one, and min(1, C / norm) then lets a clipped term exceed C (in float32
    the sensitivity search measured 4.0014 C against the supremum 4 C of Logit-DP's spreadout at n = 2).
    Each product of Jacobian rows carries an error at most gamma |J_d| |J_e| with gamma = k u / (1 - k u),
    k = p + 2 D + 2, u the unit roundoff of the Grams' dtype (Higham, "Accuracy and Stability of Numerical
    Algorithms", Sec. 3.1), so the whole expression errs by at most gamma (s_x + s_y)^2 with
    s = sum_d |a_d| |J_d|; adding that keeps the computed norm above the true one. In float64 (as
    :func:`pair_norms` computes) gamma is about 3e-12 at p = 2.6e4: no measurable change where nothing cancels.
    """
    k = jx.shape[-1] + 2 * jx.shape[1] + 2
    u = torch.finfo(jx.dtype).eps / 2
    gamma = k * u / (1 - k * u)
    s = torch.einsum("ijd,id->ij", a.abs(), jx.norm(dim=-1)) + torch.einsum("ijd,jd->ij", b.abs(), jy.norm(dim=-1))
    return gamma * s.square()


def _logits(embedder: Embedder, params, x, y, similarity: PairSimilarity) -> torch.Tensor:
    zx, zy = embedder.embed(params, x), embedder.embed(params, y)
    return vmap(vmap(similarity, in_dims=(None, 0)), in_dims=(0, None))(zx, zy)


def efficient_pair_sum(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                       similarity: PairSimilarity, tau: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                       pair_clip: float, norms: str = "exact", chunk: int | None = None) -> ClippedSum:
    """sum_ij tau_ij Clip_B(grad Z_ij) as grad of sum_ij lambda_ij Z_ij (Logit-DP Sec. 5.3)."""
    if tracking():  # the sensitivity checks: lambda keeps its graph (first-order search), through the logits
        nrm = pair_norms(embedder, params, x, y, a, b, norms, chunk)
        lam = tau * clip_factors(nrm, pair_clip)
        g = grad(lambda p: (lam * _logits(embedder, p, x, y, similarity)).sum())(dict(params))
        return ClippedSum(embedder.space.flatten(g), nrm.reshape(-1), pair_clip, "pair")
    jx, jy = row_jacobians(embedder, params, x, chunk), row_jacobians(embedder, params, y, chunk)
    nrm = pair_norms(embedder, params, x, y, a, b, norms, chunk, jacobians=(jx, jy))
    lam = (tau * clip_factors(nrm, pair_clip)).detach()
    # grad of F = sum_ij lambda_ij Z_ij from the Jacobians already at hand (no further backward pass):
    # sum_i J_{x_i}^T (sum_j lambda_ij a_ij) + sum_j J_{y_j}^T (sum_i lambda_ij b_ij)
    ca = torch.einsum("ij,ijd->id", lam, a)
    cb = torch.einsum("ij,ijd->jd", lam, b)
    total = ca.reshape(-1) @ jx.reshape(-1, jx.shape[-1]) + cb.reshape(-1) @ jy.reshape(-1, jy.shape[-1])
    from defenses.dp.gradients import engine_reason

    layerwise = embedder.engine == "layerwise" and engine_reason(embedder) is None
    return ClippedSum(total, nrm.reshape(-1), pair_clip, "pair",
                      "layerwise (row Jacobians)" if layerwise else "vmap (row Jacobians)")


def direct_pair_sum(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                    tau: torch.Tensor, a: torch.Tensor, b: torch.Tensor, pair_clip: float,
                    chunk: int = 1024) -> ClippedSum:
    """The same sum with every pair gradient materialised (the reference; Algorithm 1 lines 5-9)."""
    units = pair_units(a, b, tau)
    return clipped_sum(embedder, params, (Source(torch.cat([x, y])),), units, pair_clip, chunk)
