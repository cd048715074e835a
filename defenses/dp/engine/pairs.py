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
  so no further backward pass is run. The pair norms come without any pair gradient: with the D x D Grams G_i = J_{x_i}
  J_{x_i}^T, H_j = J_{y_j} J_{y_j}^T and the cross Grams K_ij = J_{x_i} J_{y_j}^T of the rows' Jacobians J_r (D x p),
      ||grad Z_ij||^2 = a_ij^T G_i a_ij + b_ij^T H_j b_ij + 2 a_ij^T K_ij b_ij
  exactly (``norms='exact'``). ``norms='upper-bound'`` drops K and clips with
  sqrt(a^T G a) + sqrt(b^T H b) >= ||grad Z_ij|| (triangle inequality): each clipped pair still has
  norm <= B, so the sensitivity bound holds, at the price of some over-clipping.
  The Grams (:mod:`privaudit.defenses.dp.engine.row_grams`) come per layer from one forward of the 2n rows and
  D - 1 backward passes (tangent directions), with ghost products for Linear layers and small convolution outputs
  (:func:`~privaudit.defenses.dp.engine.row_grams.layer_grams`, the default wherever the layerwise engine supports the
  model), or from ``vmap`` Jacobians (:func:`per_sample_jacobians`, ``engine='vmap'`` and the sensitivity
  checks' differentiable evaluation); in float64 either way, with a rounding slack (:func:`rounding_slack`).

Cost: direct needs 2 n^2 per-sample backward passes and n^2 p memory traffic; efficient needs D - 1
backward passes of the 2 n rows and, per layer, (nD)(mD) x (the layer's factor width) multiply-adds for
the cross Gram: d_out for a Linear layer, d_out L (L + D) / D + L^2 in k^2 / D^2 for a convolution with L
output positions computed as ghost products, its weight count otherwise -- the better the smaller D
(Logit-DP's embedding net uses D = 8). The float64 cross Grams of the convolutions with many output
positions (materialised rows, one wide product each) are the floor.
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch
from torch.func import grad, vjp, vmap

from privaudit.defenses.dp.engine.clipping import clip_factors
from privaudit.defenses.dp.engine.contrastive import tracking
from privaudit.defenses.dp.engine.embedder import Embedder, Source
from privaudit.defenses.dp.engine.gradients import ClippedSum, clipped_sum
from privaudit.defenses.dp.engine.row_grams import (  # noqa: F401
    PairGrams, jacobian_grams, layer_grams, rounding_gamma, scratch_view, tangent_basis)
from privaudit.defenses.dp.engine.units import pair_units

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

    Both give the same numbers (tests). The step itself uses :func:`pair_grams`, which needs no J
    for the Linear layers.
    """
    from privaudit.defenses.dp.engine.gradients import engine_reason

    if embedder.engine == "layerwise" and engine_reason(embedder) is None:
        from privaudit.defenses.dp.engine.layerwise import row_jacobians as layerwise_jacobians

        return layerwise_jacobians(embedder, params, Source(x))
    return per_sample_jacobians(embedder, params, x, chunk)


def grams_engine(embedder: Embedder) -> str:
    """'layerwise' where :func:`privaudit.defenses.dp.engine.row_grams.layer_grams` serves the model, else 'vmap'."""
    from privaudit.defenses.dp.engine.gradients import engine_reason

    return "vmap" if embedder.engine == "vmap" or engine_reason(embedder) is not None else "layerwise"


def pair_grams(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
               cross: bool = True, chunk: int | None = None, tangent: bool = False) -> PairGrams:
    """The row Grams of x and y: per layer with ghost products (:func:`layer_grams`, unless ``vmap`` is
    requested, the model is unsupported or the sensitivity checks need a graph), else from ``vmap``
    Jacobians. Both give the same numbers (tests). ``tangent``: the pair cotangents are orthogonal to their
    rows' embeddings (cosine similarities), so D - 1 directions per row suffice (:func:`tangent_basis`)."""
    if grams_engine(embedder) == "layerwise":
        from privaudit.defenses.dp.engine.pair_blocks import blocked_layer_grams, fits

        if not fits(embedder, params, x, y, tangent):  # a large encoder: rows in blocks, bounded memory
            return blocked_layer_grams(embedder, params, x, y, cross, tangent)
        return layer_grams(embedder, params, x, y, cross, tangent)
    return jacobian_grams(row_jacobians(embedder, params, x, chunk), row_jacobians(embedder, params, y, chunk), cross)


def pair_norms(embedder: Embedder | None, params: Mapping[str, torch.Tensor] | None, x: torch.Tensor | None,
               y: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor, mode: str = "exact",
               chunk: int | None = None, jacobians: tuple[torch.Tensor, torch.Tensor] | None = None,
               grams: PairGrams | None = None) -> torch.Tensor:
    """||grad_theta Z_ij|| for every pair (n, m) from Jacobian Grams (exact), or its triangle upper bound.

    The Grams come from ``grams``, else from materialised ``jacobians``, else from :func:`pair_grams`.
    """
    if mode not in PAIR_NORMS:
        raise ValueError(f"pair norms: {mode!r} not in {PAIR_NORMS}")
    if grams is None:
        grams = (jacobian_grams(*jacobians, cross=mode == "exact") if jacobians is not None
                 else pair_grams(embedder, params, x, y, mode == "exact", chunk))
    return gram_norms(grams, *grams.coordinates(a, b), mode, a.dtype)


def gram_norms(grams: PairGrams, a: torch.Tensor, b: torch.Tensor, mode: str, dtype: torch.dtype) -> torch.Tensor:
    """:func:`pair_norms` from pair cotangents already in the Grams' directions (:meth:`PairGrams.coordinates`),
    as ``dtype``.

    The Grams are float64 (exact products of float32 entries, accumulation error ~k 2^-53): the identity
    cancels where a pair's gradient is small against its parts, and float32 there can put the computed norm
    below the true one, letting a clipped pair exceed C (see :func:`rounding_slack`)."""
    own_x = (torch.bmm(a, grams.own_x) * a).sum(-1).clamp_min(0)  # a_ij^T G_i a_ij, batched over i
    own_y = (torch.bmm(b.transpose(0, 1), grams.own_y) * b.transpose(0, 1)).sum(-1).T.clamp_min(0)
    slack = rounding_slack(grams, a, b)
    if mode == "upper-bound":
        return _round_up((own_x + slack).sqrt() + (own_y + slack).sqrt(), dtype)
    assert grams.cross is not None
    cross = _cross_terms(grams.cross, a, b)
    return _round_up(((own_x + own_y + 2 * cross).clamp_min(0) + slack).sqrt(), dtype)


CROSS_BLOCK = 1 << 17  # float64 entries of the weighted cross Gram held at once (1 MB: x rows in blocks of it)


def _cross_terms(k: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a_ij^T K_ij b_ij for every pair (n, m): K (n, D, m, D) weighted by b along its last axis, then by a -- one
    pass over K, a block of x rows at a time in one buffer (no (n, D, m, D) temporary)."""
    n, d, m, e = k.shape
    step = max(1, CROSS_BLOCK // (d * m * e))
    buffer = k.new_empty(min(step, n) * d * m * e)
    out = k.new_empty(n, m)
    for i0 in range(0, n, step):
        i1 = min(n, i0 + step)
        kb = torch.mul(k[i0:i1], b[i0:i1, None], out=scratch_view(buffer, (i1 - i0, d, m, e)))
        out[i0:i1] = (a[i0:i1] * kb.sum(-1).transpose(1, 2)).sum(-1)
    return out


def _round_up(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` in ``dtype``, nudged up by one rounding so the cast never lowers a norm."""
    return (x * (1 + torch.finfo(dtype).eps)).to(dtype)


def rounding_slack(grams: PairGrams, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An upper bound on the rounding error of the Gram-identity squared norm, so a clip never under-clips.

    ||a^T J_x + b^T J_y||^2 = a^T G_x a + b^T G_y b + 2 a^T K b is evaluated from floating-point sums of
    products; where the two parts cancel (a pair whose gradient is nearly 0) the computed value can fall
    below the true one, and min(1, C / norm) then lets a clipped term exceed C (in float32 the sensitivity
    search measured 4.0014 C against the supremum 4 C of Logit-DP's spreadout at n = 2). Each Gram entry
    sums at most k products (k = ``grams.length`` + 2 D + 2 with the quadratic forms), so it errs by at
    most gamma_k sum |J_d| |J_e| <= gamma_k |J_d| |J_e| with gamma_k = k u / (1 - k u), u the float64
    unit roundoff (Higham, "Accuracy and Stability of Numerical Algorithms", Sec. 3.1; a ghost entry
    <M, M'> (<a, a'> + 1) is a sum over the same products |M_o a_i| |M'_o a'_i|, regrouped), so the
    whole expression errs by at most gamma_k (s_x + s_y)^2 with s = sum_d |a_d| |J_d|; adding that keeps
    the computed norm above the true one. The row norms |J_d| come from the Grams' diagonals, inflated
    by their own rounding (sums of squares: relative error <= gamma_k). gamma is about 3e-12 at
    k = 2.6e4: no measurable change where nothing cancels.
    """
    d = grams.own_x.shape[-1]
    gamma = rounding_gamma(grams.length + 2 * d + 2)
    s = torch.einsum("ijd,id->ij", a.abs(), grams.scale_x) + torch.einsum("ijd,jd->ij", b.abs(), grams.scale_y)
    return gamma * s.square()


def _logits(embedder: Embedder, params, x, y, similarity: PairSimilarity) -> torch.Tensor:
    zx, zy = embedder.embed(params, x), embedder.embed(params, y)
    return vmap(vmap(similarity, in_dims=(None, 0)), in_dims=(0, None))(zx, zy)


def efficient_pair_sum(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                       similarity: PairSimilarity, tau: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                       pair_clip: float, norms: str = "exact", chunk: int | None = None,
                       grams: PairGrams | None = None) -> ClippedSum:
    """sum_ij tau_ij Clip_B(grad Z_ij) as grad of sum_ij lambda_ij Z_ij (Logit-DP Sec. 5.3)."""
    if tracking():  # the sensitivity checks: lambda keeps its graph (first-order search), through the logits
        nrm = pair_norms(embedder, params, x, y, a, b, norms, chunk)
        factors = clip_factors(nrm, pair_clip)
        lam = tau * factors
        g = grad(lambda p: (lam * _logits(embedder, p, x, y, similarity)).sum())(dict(params))
        return ClippedSum(embedder.space.flatten(g), nrm.reshape(-1), pair_clip, "pair",
                          entered=(factors * nrm).reshape(-1).detach())
    if norms not in PAIR_NORMS:
        raise ValueError(f"pair norms: {norms!r} not in {PAIR_NORMS}")
    if grams is None:
        grams = pair_grams(embedder, params, x, y, norms == "exact", chunk)
    ca, cb = grams.coordinates(a, b)
    nrm = gram_norms(grams, ca, cb, norms, a.dtype)
    factors = clip_factors(nrm, pair_clip).detach()
    lam = (tau * factors).detach()
    # grad of F = sum_ij lambda_ij Z_ij through the pieces the Grams were made of (no further backward pass):
    # sum_i J_{x_i}^T (sum_j lambda_ij a_ij) + sum_j J_{y_j}^T (sum_i lambda_ij b_ij)
    lam64 = lam.double()
    total = grams.pullback(torch.bmm(lam64[:, None], ca)[:, 0], torch.bmm(lam64.T[:, None], cb.transpose(0, 1))[:, 0])
    return ClippedSum(total, nrm.reshape(-1), pair_clip, "pair",
                      "layerwise (ghost Grams)" if grams_engine(embedder) == "layerwise" else "vmap (row Jacobians)",
                      grams.detail, (factors * nrm).reshape(-1).detach())


def direct_pair_sum(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                    tau: torch.Tensor, a: torch.Tensor, b: torch.Tensor, pair_clip: float,
                    chunk: int = 1024) -> ClippedSum:
    """The same sum with every pair gradient materialised (the reference; Algorithm 1 lines 5-9)."""
    units = pair_units(a, b, tau)
    return clipped_sum(embedder, params, (Source(torch.cat([x, y])),), units, pair_clip, chunk)
