"""Grams of the rows' embedding Jacobians: what Logit-DP's pair norms need (Logit-DP Sec. 5.3).

For rows x_1..x_n and y_1..y_m with embedding Jacobians J_r (D x p), a pair gradient
grad Z_ij = J_{x_i}^T a_ij + J_{y_j}^T b_ij has

    ||grad Z_ij||^2 = a_ij^T G_{x_i} a_ij + b_ij^T G_{y_j} b_ij + 2 a_ij^T K_ij b_ij,
    G_r = J_r J_r^T (D x D),  K_ij = J_{x_i} J_{y_j}^T (D x D),

so the norms need the (nD x mD) cross Gram and the per-row Grams, never a pair gradient
(:mod:`privaudit.defenses.dp.engine.pairs`). Two ways to get them (same numbers, tests compare them):

* :func:`jacobian_grams` -- from materialised Jacobians (n, D, p): one (nD x p)(p x mD) product.
* :func:`layer_grams` -- per layer, from one forward of the rows and K backward passes with basis
  cotangents (pass c gives M_{r,c} = row r's output gradient at the layer for direction c):
  e_1..e_D, or for cosine similarities an orthonormal basis of z_r^perp (K = D - 1, :func:`tangent_basis`:
  the pair cotangents are orthogonal to their row's embedding). A ``nn.Linear`` layer with input a_r
  contributes J_{r,c} = M_{r,c} a_r^T (+ M_{r,c} for the bias), so its Gram entries are the ghost
  products (Li et al. 2022; Bu et al. 2023)

      <J_{r,c}, J_{s,e}> = <M_{r,c}, M_{s,e}> (<a_r, a_s> + 1),

  costing (nK)(mK)(d_out) + nm d_in instead of (nK)(mK)(d_in d_out). A convolution with L output
  positions and patches P_{r,l} has <g_{r,c}, g_{s,e}> = sum_{l,l'} <M_{r,c,l}, M_{s,e,l'}> <P_{r,l}, P_{s,l'}>,
  contracted as (M_x A) M_y with A = P_x P_y^T (n m K d_out L (L + K) multiply-adds, :meth:`Grams.add_conv_ghost`)
  where that beats materialising the rows' weight gradients (a block of filters at a time) at CPU speeds
  (:func:`_conv_costs`: few output positions); weight standardisation enters as per-filter rank-2 corrections
  of that Gram (:func:`_ws_hat`), or is applied to the materialised rows where they are fewer than the output
  gradients (:func:`_ws_project`); group norm and biases contribute the Gram of their materialised per-row
  gradients. Narrow factors' cross products wait and are taken as one wide product (:meth:`Grams.flush`).
  Each layer type's rule (:meth:`privaudit.defenses.dp.engine.layer_rules.LayerRule.grams`) picks its form; the
  products live on :class:`Grams`.

Every Gram is accumulated in float64 from float32 factors: each entry is a sum of products, each product
through at most k roundings on its way (:meth:`Grams.bound`: the widest sum it is part of, then the
accumulations), so the entry errs by at most gamma_k = k u / (1 - k u) (u = 2^-53) times the sum of
|products| (Higham, Sec. 3.1, for any order and grouping of the sums), which
:func:`privaudit.defenses.dp.engine.pairs.rounding_slack` adds back so no computed pair norm falls below the true one.
The total gradient of sum_ij lambda_ij Z_ij is a pull-back of per-row cotangents through the same
pieces (:attr:`PairGrams.pullback`), so no further backward pass runs. A large encoder's Grams come in
blocks of rows instead (:mod:`privaudit.defenses.dp.engine.pair_blocks`), with the pull-back a backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, NamedTuple

import torch
import torch.nn as nn

from privaudit.defenses.dp.engine.embedder import Embedder, Source
from privaudit.defenses.dp.engine.layer_rules import Params, Pull, conv_patches, ws_backward
from privaudit.defenses.dp.engine.layerwise import Layer, Tape, record


@dataclass
class PairGrams:
    """Row Grams for n rows x and m rows y (float64) and the pull-back of per-row cotangents.

    ``own_x`` (n, D, D), ``own_y`` (m, D, D), ``cross`` (n, D, m, D) or None (not computed);
    ``pullback(cx (n, D), cy (m, D))`` is sum_i J_{x_i}^T cx_i + sum_j J_{y_j}^T cy_j as a flat (p,)
    vector; ``length`` bounds the roundings along any product's path to a Gram entry, and ``scale_x`` (n, D),
    ``scale_y`` (m, D) bound each row direction's contribution to those sums: every Gram entry
    <J_{r,d}, J_{s,e}> is computed as a sum of products whose absolute values add up to at most
    scale_{r,d} scale_{s,e} (|J_{r,d}| for plain Grams; :func:`privaudit.defenses.dp.engine.pairs.rounding_slack`).
    """

    own_x: torch.Tensor
    own_y: torch.Tensor
    cross: torch.Tensor | None
    pullback: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    length: int
    scale_x: torch.Tensor
    scale_y: torch.Tensor
    embeddings: tuple[torch.Tensor, torch.Tensor] | None = None  # (zx, zy) where the Grams' forward gave them
    # (Q_x (n, D, K), Q_y (m, D, K)) float64: the Grams are of J_r Q_r, and cotangents enter as Q_r^T c
    basis: tuple[torch.Tensor, torch.Tensor] | None = None
    detail: str = ""  # how the rows were cut into blocks, where memory required it (defenses.dp.engine.pair_blocks)

    def coordinates(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pair cotangents a (n, m, D), b (n, m, D) in the Grams' directions (float64): Q^T a, Q^T b."""
        a, b = a.double(), b.double()
        if self.basis is None:
            return a, b
        return torch.einsum("ijd,idk->ijk", a, self.basis[0]), torch.einsum("ijd,jdk->ijk", b, self.basis[1])


def jacobian_grams(jx: torch.Tensor, jy: torch.Tensor, cross: bool = True) -> PairGrams:
    """Grams of materialised Jacobians ``jx`` (n, D, p), ``jy`` (m, D, p) (keeps any autograd graph)."""
    n, d, p = jx.shape
    m = jy.shape[0]
    dx, dy = jx.double(), jy.double()
    k = (dx.reshape(n * d, p) @ dy.reshape(m * d, p).T).view(n, d, m, d) if cross else None

    def pullback(cx: torch.Tensor, cy: torch.Tensor) -> torch.Tensor:
        return cx.to(jx.dtype).reshape(-1) @ jx.reshape(-1, p) + cy.to(jy.dtype).reshape(-1) @ jy.reshape(-1, p)

    own_x, own_y = torch.einsum("idp,iep->ide", dx, dx), torch.einsum("jdp,jep->jde", dy, dy)
    return PairGrams(own_x, own_y, k, pullback, p, _diag_scale(own_x, p), _diag_scale(own_y, p))


def rounding_gamma(k: int) -> float:
    """gamma_k = k u / (1 - k u), u the float64 unit roundoff: a float64 sum of k products, in any order, errs by at
    most gamma_k times the sum of the products' magnitudes (Higham, "Accuracy and Stability of Numerical
    Algorithms", Lemma 3.1 and Sec. 3.1). Needs k u < 1."""
    u = torch.finfo(torch.float64).eps / 2
    if not 0 <= k * u < 1:
        raise ValueError(f"rounding count k: {k} outside [0, 1/u)")
    return k * u / (1 - k * u)


def _diag_scale(own: torch.Tensor, length: int) -> torch.Tensor:
    """sqrt(G_r[d, d]) inflated by its own rounding (a sum of ``length`` squares: relative error <= gamma)."""
    return (own.diagonal(dim1=-2, dim2=-1).clamp_min(0) * (1 + rounding_gamma(length))).sqrt()


def _ws_project(g: torch.Tensor, w_hat: torch.Tensor) -> torch.Tensor:
    """P_o g'_o = g' - 1 <g', 1> / f - w_hat_o <g', w_hat_o> / f for rows g' (..., out, f) and w_hat (out, f)
    (:func:`_ws_hat`): weight standardisation's gradient from g' = g / sigma."""
    return g - g.mean(-1, keepdim=True) - w_hat * (g * w_hat).mean(-1, keepdim=True)


def _ws_hat(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight standardisation's Gram without applying it to every row: w_hat and the correction coefficients.

    WSConv2d uses w_hat = (w - mean) / sigma per filter o (fan-in f, sigma = sqrt(var + 1e-5)); the
    gradient with respect to w is J_o = (1 / sigma_o) P_o g_o with P_o = I - 1 1^T / f - w_hat w_hat^T / f
    (:func:`privaudit.defenses.dp.engine.layer_rules.ws_backward`). P_o is symmetric and, with rho = |w_hat|^2 / f and
    mu = 1^T w_hat / f (0 up to rounding), P_o^2 = I - 1 1^T / f - (2 - rho) w_hat w_hat^T / f
    + (mu / f)(1 w_hat^T + w_hat 1^T). So with g' = g / sigma, h1 = <g', 1>, h2 = <g', w_hat> (per filter)

        <J_r, J_s> = <g'_r, g'_s> - sum_o [h1 h1' / f + (2 - rho) h2 h2' / f - (mu / f)(h1 h2' + h2 h1')]_o,

    the Gram of g' corrected by rank-2 terms per filter: the per-row P_o g_o are never formed.
    Returns w_hat (out, f) in float64 and the (3, out) coefficients of h1 h1', h2 h2' and h1 h2' (and h2 h1').
    """
    wf = w.detach().double().reshape(w.shape[0], -1)
    f = wf.shape[1]
    w_hat = (wf - wf.mean(1, keepdim=True)) * torch.rsqrt(wf.var(1, keepdim=True, unbiased=False) + 1e-5)
    rho, mu = w_hat.square().sum(1) / f, w_hat.sum(1) / f
    return w_hat, torch.stack([-torch.full_like(rho, 1 / f), -(2 - rho) / f, mu / f])


GHOST_PENALTY = 4  # CPU time of a ghost-form multiply-add (products of inner width L or out L) vs a wide one's
ROWS_CHUNK = 1 << 19  # float64 entries of a convolution's row gradients materialised at once (a block of filters)


def _conv_costs(mod: nn.Conv2d, positions: int, n: int, m: int, dim: int) -> tuple[int, int]:
    """(ghost, rows): the weighted multiply-adds of a convolution's cross Gram in the ghost form
    (:meth:`Grams.add_conv_ghost`) and from materialised row gradients, for n x rows and m y rows with ``dim``
    directions each, L = ``positions`` output positions, ``out`` filters of fan-in k:

        ghost = GHOST_PENALTY [(n dim out L)(m L) + (m)(n dim)(out L)(dim)] + (n L)(m L) k,
        rows  = (n dim)(m dim) out k.

    The ghost form's products are narrow (inner width L, then out L with dim columns), so on CPU a
    multiply-add of it costs about :data:`GHOST_PENALTY` times one of the materialised form's wide product."""
    out, fan = mod.weight.shape[0], mod.weight[0].numel()
    ghost = GHOST_PENALTY * n * m * dim * out * positions * (positions + dim) + (n * positions) * (m * positions) * fan
    return ghost, (n * dim) * (m * dim) * out * fan


def _conv_ghost_cheaper(mod: nn.Conv2d, positions: int, n: int, m: int, dim: int) -> bool:
    """Whether the ghost form beats materialising the rows' weight gradients for the cross Gram
    (:func:`_conv_costs`). Both forms hold bounded blocks (:data:`ROWS_CHUNK`, :data:`GHOST_LIMIT`), so only the
    cost decides."""
    ghost, rows = _conv_costs(mod, positions, n, m, dim)
    return ghost < rows


GHOST_LIMIT = 1 << 18  # float64 entries of one ghost-form block (2 MB, cache-sized); x rows go in chunks of it


FLUSH_LIMIT = 1 << 22  # float64 entries of the factors whose cross products wait for one wide product (32 MB)
WIDE = 256  # factors at least this wide take their cross product at once (a copy would cost more than it saves)


def scratch_view(buffer: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """A contiguous ``shape`` view of the first entries of the flat ``buffer``: a loop's same-size temporaries
    share one allocation (on CPU every fresh page of a large temporary costs a page fault, about as much as
    the arithmetic of the products it holds)."""
    size = 1
    for k in shape:
        size *= k
    return buffer[:size].view(shape)


class Grams:
    """Accumulates own (R, D, D), cross (n, D, m, D) and the row-direction scales^2 (R, D), in float64.

    Rounding bookkeeping for :func:`privaudit.defenses.dp.engine.pairs.rounding_slack`: ``length`` bounds the roundings
    along any one product's path within the sum that computes it, ``sums`` counts the accumulations into an
    entry (one per contribution added to own or cross); :meth:`scales` bounds every path by their sum."""

    def __init__(self, n: int, m: int, dim: int, cross: bool, device: torch.device):
        f64 = torch.float64
        self.n, self.m, self.dim = n, m, dim
        self.own = torch.zeros(n + m, dim, dim, dtype=f64, device=device)
        self.cross = torch.zeros(n, dim, m, dim, dtype=f64, device=device) if cross else None
        self.scale2 = torch.zeros(n + m, dim, dtype=f64, device=device)
        self.length = 0
        self.sums = 0
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # (x factors, y factors) awaiting flush
        self._pending_entries = 0

    def add(self, left: torch.Tensor, right: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """own_r += L_r W R_r^T and cross_ij += L_{x_i} W R_{y_j}^T for factors (R, D, q), W = diag(weight);
        returns the own block's diagonal (R, D). The cross products of narrow factors (q < :data:`WIDE`) wait (up to
        :data:`FLUSH_LIMIT` entries) for :meth:`flush`, which takes them as one wide product: the same sum of the
        same products, without a narrow product and a pass over the cross Gram per call."""
        n, m, d = self.n, self.m, self.dim
        lw = left if weight is None else left * weight
        block = torch.bmm(lw, right.transpose(1, 2))
        self.own.add_(block)
        self.sums += 1
        q = left.shape[-1]
        if self.cross is not None and q >= WIDE:
            self.cross.view(n * d, m * d).addmm_(lw[:n].reshape(n * d, q), right[n:].reshape(m * d, q).T)
            self.length = max(self.length, q + 1)
        elif self.cross is not None:
            self._pending.append((lw[:n], right[n:]))
            self._pending_entries += left.numel()
            if self._pending_entries > FLUSH_LIMIT:
                self.flush()
        return block.diagonal(dim1=-2, dim2=-1)

    def takes_at_once(self, q: int) -> bool:
        """Whether :meth:`add` takes the cross product of factors of width ``q`` at once (keeps no reference)."""
        return self.cross is None or q >= WIDE

    def flush(self) -> None:
        """cross += [L_x^(1) W_1 | L_x^(2) W_2 | ...] [R_y^(1) | R_y^(2) | ...]^T over the waiting factors: one
        product of width q = the sum of their widths, each entry a sum of q products of (weighted) factors, at most
        q + 1 roundings along any one."""
        if not self._pending:
            return
        n, m, d = self.n, self.m, self.dim
        q = sum(x.shape[-1] for x, _ in self._pending)
        ref = self._pending[0][0]
        wide = torch.empty(n + m, d, q, dtype=ref.dtype, device=ref.device)
        col = 0
        while self._pending:  # released one by one as they are copied
            x, y = self._pending.pop(0)
            wide[:n, :, col:col + x.shape[-1]] = x
            wide[n:, :, col:col + x.shape[-1]] = y
            col += x.shape[-1]
        self.cross.view(n * d, m * d).addmm_(wide[:n].view(n * d, q), wide[n:].view(m * d, q).T)
        self._pending_entries = 0
        self.length = max(self.length, q + 1)
        self.sums += 1

    def add_ghost(self, left: torch.Tensor, inner: torch.Tensor) -> torch.Tensor:
        """own_r[d, e] += <L_{r,d}, L_{r,e}> I_{r,r} and cross_ij[d, e] += <L_{x_i,d}, L_{y_j,e}> I_{x_i,y_j}, for
        factors L (R, D, q) and row weights I (R, R) (only the own and x-y entries are read); returns the own
        diagonal. One wide product for the x-y block (x rows in chunks of :data:`GHOST_LIMIT` entries in one
        buffer), weighted as it is added."""
        n, m, d = self.n, self.m, self.dim
        idx = torch.arange(n + m, device=left.device)
        block = torch.bmm(left, left.transpose(1, 2)) * inner[idx, idx][:, None, None]
        self.own.add_(block)
        self.sums += 1
        if self.cross is not None:
            q = left.shape[-1]
            right = left[n:].reshape(m * d, q).T
            step = max(1, GHOST_LIMIT // (d * m * d))
            buffer = left.new_empty(min(step, n) * d * m * d)
            for i0 in range(0, n, step):
                i1 = min(n, i0 + step)
                bb = torch.mm(left[i0:i1].reshape(-1, q), right, out=scratch_view(buffer, ((i1 - i0) * d, m * d)))
                self.cross[i0:i1].addcmul_(bb.view(i1 - i0, d, m, d), inner[i0:i1, None, n:, None])
        return block.diagonal(dim1=-2, dim2=-1)

    def add_conv_ghost(self, delta: torch.Tensor, pt: torch.Tensor) -> torch.Tensor:
        """own and cross += sum_{l,l',o} delta_{r,d,o,l} <P_{r,l}, P_{s,l'}> delta_{s,e,o,l'}, for output gradients
        delta (R, D, out, L) and patches P (R, L, k); returns the own diagonal.

        The cross block is contracted in the cheap order: the patch products A = P_x P_y^T ((nL) x (mL), one
        wide product), then W_{i,d,o,j,l'} = sum_l delta_{i,d,o,l} A_{i,l,j,l'} (x rows in chunks of
        :data:`GHOST_LIMIT` entries) and cross_{i,d,j,e} = sum_{o,l'} W_{i,d,o,j,l'} delta_{j,e,o,l'}: n m D out L (L +
        D)
        multiply-adds where the positions' pairwise products would take n m D^2 out L^2, and no (nDL) x (mDL) block."""
        n, m, d = self.n, self.m, self.dim
        out, positions = delta.shape[2], delta.shape[3]
        own_inner = torch.bmm(pt, pt.transpose(1, 2))  # (R, L, L)
        block = torch.einsum("rdol,rlk,reok->rde", delta, own_inner, delta)
        self.own.add_(block)
        self.sums += 1
        if self.cross is not None:
            a_xy = (pt[:n].reshape(n * positions, -1) @ pt[n:].reshape(m * positions, -1).T).view(n, positions, -1)
            left = delta[n:].reshape(m, d, out * positions)  # (j, e, (o, l'))
            step = max(1, GHOST_LIMIT // (d * out * m * positions))
            buffers = [delta.new_empty(min(step, n) * d * out * m * positions) for _ in range(2)]
            for i0 in range(0, n, step):
                i1 = min(n, i0 + step)
                w = torch.bmm(delta[i0:i1].reshape(i1 - i0, d * out, positions), a_xy[i0:i1],
                              out=scratch_view(buffers[0], (i1 - i0, d * out, m * positions)))  # (i, (d, o), (j, l'))
                wt = scratch_view(buffers[1], (m, i1 - i0, d, out, positions))
                wt.copy_(w.view(i1 - i0, d, out, m, positions).permute(3, 0, 1, 2, 4))
                # the D-row operand on the left: a product of D rows runs faster than one of D columns
                prod = torch.bmm(left, wt.view(m, (i1 - i0) * d, -1).transpose(1, 2))  # (j, e, (i, d))
                self.cross[i0:i1].add_(prod.view(m, d, i1 - i0, d).permute(2, 3, 0, 1))
        return block.diagonal(dim1=-2, dim2=-1)

    def scales(self) -> torch.Tensor:
        """Takes the waiting cross products (:meth:`flush`); upper bounds on the row-direction scales, inflated by
        their own rounding (sums of squares over at most :meth:`bound` roundings each)."""
        self.flush()
        return (self.scale2.clamp_min(0) * (1 + rounding_gamma(self.bound()))).sqrt()

    def bound(self) -> int:
        """The roundings along any product's path to a Gram entry: within its sum, then the accumulations."""
        return self.length + self.sums

    # -- the layers' contributions (called by the layer rules, :meth:`LayerRule.grams`) ---------------

    def linear(self, params: Params, a: torch.Tensor, b: torch.Tensor) -> Pull:
        """Ghost products of a Linear layer: <J_{r,d}, J_{s,e}> = <M_{r,d}, M_{s,e}> (<a_r, a_s> + 1)."""
        r = a.shape[0]
        md, ad = b.double(), a.double()  # (R, D, out), (R, in)
        inner = ad @ ad.T if "weight" in params else torch.zeros(r, r, dtype=torch.float64, device=a.device)
        if "bias" in params:
            inner = inner + 1
        self.scale2.add_(self.add_ghost(md, inner))
        self.length = max(self.length, b.shape[-1] * (a.shape[-1] + 1))

        def pull(c: torch.Tensor) -> dict[str, torch.Tensor]:
            v = torch.einsum("rd,rdo->ro", c, b)
            g = {}
            if "weight" in params:
                g["weight"] = v.T @ a
            if "bias" in params:
                g["bias"] = v.sum(0)
            return g
        return pull

    def conv_weight(self, mod: nn.Conv2d, w: torch.Tensor, a: torch.Tensor, b: torch.Tensor, ws: bool) -> Pull:
        """A convolution's weight ``w`` (weight-standardised with ``ws``): ghost products over the output
        positions where they are cheaper (:func:`_conv_ghost_cheaper`), else the Gram of the rows' materialised
        weight gradients; WS by :func:`_ws_hat`'s corrections. ``b`` (R, D, out, H, W)."""
        r, d, out = b.shape[:3]
        standardised = ws
        delta = b.reshape(r, d, out, -1).to(torch.float64, copy=ws)  # (R, D, out, L), b untouched by the fold
        if ws:  # fold 1 / sigma_o into the output gradients (exact float64 products): the rows' gradients are g'
            inv = torch.rsqrt(w.detach().reshape(out, -1).var(1, unbiased=False) + 1e-5)
            delta.mul_(inv.double().view(1, 1, -1, 1))
        # the patches P (R, L, in k^2), contiguous: a transposed operand slows the batched products 3x
        patches = conv_patches(mod, a).transpose(1, 2)
        pt = torch.empty(patches.shape, dtype=torch.float64, device=a.device).copy_(patches)  # one copy
        positions = delta.shape[-1]
        if _conv_ghost_cheaper(mod, positions, self.n, self.m, d):
            mag2 = self._conv_ghost(delta, pt, w.numel())
        else:
            # WS on the rows themselves where they are fewer than the output gradients the corrections read
            w_hat = _ws_hat(w)[0] if ws and pt.shape[2] < positions else None
            mag2 = self._conv_rows(delta, pt, w_hat)
            self.length = max(self.length, w.numel())
            ws = ws and w_hat is None
        self.scale2.add_(mag2)
        if ws:
            self._ws_corrections(w, delta, pt, mag2)

        def pull(c: torch.Tensor) -> dict[str, torch.Tensor]:
            v = torch.bmm(c.double()[:, None], delta.view(r, d, -1)).view(r, out, positions)  # sum_d c_d delta_d
            g = (v.transpose(0, 1).reshape(out, -1) @ pt.view(-1, pt.shape[2])).to(w.dtype).reshape(w.shape)
            if standardised:  # g' = g / sigma: undo the fold, then the standardisation's VJP
                g = ws_backward(w, g / inv.view(-1, 1, 1, 1))
            return {"weight": g}
        return pull

    def _conv_rows(self, delta: torch.Tensor, pt: torch.Tensor, w_hat: torch.Tensor | None) -> torch.Tensor:
        """The Grams of the rows' materialised weight gradients (exact products of the float32 factors, float64
        sums), a block of :data:`ROWS_CHUNK` entries' filters at a time (the Grams are sums over the parameters),
        projected by weight standardisation where ``w_hat`` is given (:func:`_ws_project`); returns the row
        directions' scales^2. The pull-back and h1, h2 of the WS corrections contract the factors themselves (no
        R D x out in k^2 tensor kept). Blocks that :meth:`add` takes at once share one buffer."""
        r, d, out, positions = delta.shape
        fan = pt.shape[2]
        mag2 = torch.zeros(r, d, dtype=torch.float64, device=delta.device)
        step = max(1, ROWS_CHUNK // (r * d * fan))
        buffer = delta.new_empty(r * d * min(step, out) * fan)
        for o0 in range(0, out, step):
            block = delta[:, :, o0:o0 + step].reshape(r, -1, positions)
            width = block.shape[1] // d * fan
            into = {"out": scratch_view(buffer, (r, block.shape[1], fan))} if (
                w_hat is not None or self.takes_at_once(width)) else {}  # else add() may keep the rows
            rows = torch.bmm(block, pt, **into).view(r, d, -1, fan)
            if w_hat is not None:
                rows = _ws_project(rows, w_hat[o0:o0 + step])
            rows = rows.view(r, d, -1)
            mag2 += self.add(rows, rows)
        return mag2.clamp_min(0)

    def _conv_ghost(self, delta: torch.Tensor, pt: torch.Tensor, numel: int) -> torch.Tensor:
        """<g_{r,d}, g_{s,e}> = sum_{l,l'} <delta_{r,d,l}, delta_{s,e,l'}> <P_{r,l}, P_{s,l'}>; returns the
        row directions' scales^2: every entry is a sum of the ``numel`` L^2 products delta P P' delta' in some
        grouping, each through at most k + L + out L + 3 roundings (:meth:`add_conv_ghost`), and their absolute
        values add up to <G~_{r,d}, G~_{s,e}> <= |G~_{r,d}| |G~_{s,e}|, G~ = |delta| |P|^T."""
        out, positions = delta.shape[2], delta.shape[3]
        self.add_conv_ghost(delta, pt)
        pa = pt.abs()
        mag2 = torch.einsum("rdol,rlk,rdok->rd", delta.abs(), torch.bmm(pa, pa.transpose(1, 2)), delta.abs())
        self.length = max(self.length, numel * positions ** 2, pt.shape[2] + positions + out * positions + 3)
        return mag2

    def _ws_corrections(self, w: torch.Tensor, delta: torch.Tensor, pt: torch.Tensor, mag2: torch.Tensor) -> None:
        """Weight standardisation's per-filter rank-2 corrections of the Gram of g' (:func:`_ws_hat`)."""
        r, out = delta.shape[0], delta.shape[2]
        w_hat, coef = _ws_hat(w)
        # h1 = sum_l delta_l <P_l, 1>, h2 = sum_l delta_l <P_l, w_hat_o>: no pass over the rows' gradients
        d, positions = delta.shape[1], delta.shape[3]
        h1 = torch.bmm(delta.view(r, d * out, positions), pt.sum(2)[:, :, None]).view(r, d, out)
        h2 = (delta * torch.matmul(w_hat, pt.transpose(1, 2))[:, None]).sum(-1)
        # the four rank-one terms per filter c0 h1 h1' + c1 h2 h2' + c2 (h1 h2' + h2 h1') as one product of two
        # columns per filter: [c0 h1 + c2 h2, c1 h2 + c2 h1] . [h1', h2'] (two more roundings per term)
        self.add(torch.cat([h1 * coef[0] + h2 * coef[2], h2 * coef[1] + h1 * coef[2]], -1), torch.cat([h1, h2], -1))
        # the corrections' products add up to at most 3 |G~|^2 (Cauchy-Schwarz per filter), in either grouping
        self.scale2.add_(4 * mag2)
        self.length += 3 * out

    def materialised(self, rows: dict[str, torch.Tensor], params: Params) -> Pull:
        """Parameters without ghost products (biases, group norm): the Gram of their per-row gradients
        ``rows`` {name: (K, R, ...)}."""
        parts = [v.transpose(0, 1).reshape(v.shape[1], v.shape[0], -1).double() for v in rows.values()]
        whole = torch.cat(parts, -1) if len(parts) > 1 else parts[0]  # (R, K, q): one product for every parameter
        self.scale2.add_(self.add(whole, whole).clamp_min(0))
        self.length = max(self.length, whole.shape[-1])
        jac = dict(zip(rows, whole.split([j.shape[-1] for j in parts], -1)))

        def pull(c: torch.Tensor) -> dict[str, torch.Tensor]:
            cd = c.double()
            return {k_: torch.einsum("rd,rdp->p", cd, j).to(params[k_].dtype).reshape(params[k_].shape)
                    for k_, j in jac.items()}
        return pull


def tangent_basis(z: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis (R, D, D - 1) of each row's tangent space z_r^perp (Householder reflection).

    The cosine similarity's derivative in u is (I - u^ u^T) v^ / |u|, orthogonal to u: Logit-DP's pair
    cotangents a_ij and b_ij lie in z_i^perp and z'_j^perp, so D - 1 Jacobian directions per row carry
    every pair gradient exactly (a_ij = Q_i Q_i^T a_ij), one fewer backward copy per row and (D-1)^2 / D^2
    of the cross Gram. H = I - 2 v v^T / |v|^2 with v = u^ + sign(u_1) e_1 maps e_1 to -sign(u_1) u^, so
    its other columns span u^perp.
    """
    u = torch.nn.functional.normalize(z.double(), dim=-1)
    v = u.clone()
    v[:, 0] += torch.where(u[:, 0] >= 0, 1.0, -1.0)
    eye = torch.eye(z.shape[-1], dtype=torch.float64, device=z.device)
    h = eye - 2 * v[:, :, None] * v[:, None, :] / v.square().sum(-1)[:, None, None]
    return h[:, :, 1:]


class Directions(NamedTuple):
    """One forward of the rows and K backward passes, pass c carrying cotangent direction c of every row."""

    tape: Tape
    grads: dict[str, torch.Tensor]  # every layer's output gradients (R, K, ...): row r, pass c
    copies: int  # K
    zs: torch.Tensor  # (R, D) the rows' embeddings
    basis: torch.Tensor | None  # (R, D, K) float64 tangent directions, None for e_1..e_D

    def layer_grads(self, name: str, keep: bool = False) -> torch.Tensor:
        """Layer ``name``'s output gradients (R, K, ...) (row r, direction c), released from ``grads`` unless
        ``keep``."""
        return self.grads[name] if keep else self.grads.pop(name)


def backward_directions(embedder: Embedder, params: Mapping[str, torch.Tensor], xy: torch.Tensor,
                         tangent: bool) -> Directions | None:
    """The rows ``xy`` through the model once, then K backward passes, pass c carrying direction c: e_1..e_D
    (K = D), or with ``tangent`` the columns of an orthonormal basis of z_r^perp (K = D - 1); None where
    ``tangent`` meets an embedding within 1e-6 of 0. (K passes over one recorded forward cost the same
    arithmetic as one pass over the rows replicated K times, without the K forwards and their activations.)"""
    tape = record(embedder, params, (Source(xy),))
    (z,) = tape.zs
    zs = z.detach()
    dim = zs.shape[-1]
    copies = dim - 1 if tangent and dim > 1 else dim
    basis = None
    if copies < dim:
        if bool((zs.norm(dim=-1) <= 1e-6).any()):
            return None
        basis = tangent_basis(zs)
        directions = basis.to(z.dtype)  # (R, D, K)
        basis = directions.double()  # the directions actually backpropagated
    else:
        directions = torch.eye(dim, dtype=z.dtype, device=z.device).expand(len(xy), dim, dim)
    grads: dict[str, torch.Tensor] = {}  # each pass's gradients copied in as it ends (its own are then reused)
    for c in range(copies):
        for name, (g,) in tape.output_grads([directions[:, :, c]], retain=c < copies - 1).items():
            if name not in grads:
                grads[name] = g.new_empty(g.shape[0], copies, *g.shape[1:])
            grads[name][:, c] = g
    return Directions(tape, grads, copies, zs, basis)


def layer_grams(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                cross: bool = True, tangent: bool = False) -> PairGrams:
    """The Grams per layer, each layer's rule adding its part (:meth:`LayerRule.grams`: ghost products for
    Linear layers and small convolution outputs), from one forward of the rows and K backward passes with
    the basis cotangents (:func:`backward_directions`): e_1..e_D (K = D), or with ``tangent`` an
    orthonormal basis Q_r of z_r^perp (K = D - 1, :func:`tangent_basis`; the Grams are then those of
    J_r Q_r, and :attr:`PairGrams.basis` says so). ``tangent`` is exact for cotangents orthogonal to z_r
    (cosine similarities) and falls back to e_1..e_D where an embedding is within 1e-6 of 0
    (cosine_pair's eps regime).

    Requires a model the layerwise engine supports (:func:`privaudit.defenses.dp.engine.layerwise.engine_model_reason`).
    """
    n, m = len(x), len(y)
    run = backward_directions(embedder, params, torch.cat([x, y]), tangent)
    if run is None:
        return layer_grams(embedder, params, x, y, cross, tangent=False)
    zs, basis = run.zs, run.basis
    acc = Grams(n, m, run.copies, cross, zs.device)
    pulls: list[tuple[Layer, Pull]] = []
    for layer in run.tape.layers:
        (call,) = run.tape.calls[layer.name]
        a = call.inp  # (R, ...): every row's input
        b = run.layer_grads(layer.name)  # (R, K, ...)
        pulls.extend((layer, pull) for pull in layer.rule.grams(acc, layer.module, layer.own(params), a, b))
    scale = acc.scales()
    space = embedder.space

    def pullback(cx: torch.Tensor, cy: torch.Tensor) -> torch.Tensor:
        c = torch.cat([cx, cy]).to(zs.dtype)  # (R, K)
        grads: dict[str, torch.Tensor] = {}
        for layer, pull in pulls:
            grads.update(layer.qualify(pull(c)))
        return space.flatten(grads)

    return PairGrams(acc.own[:n], acc.own[n:], acc.cross, pullback, acc.bound(), scale[:n], scale[n:],
                     (zs[:n], zs[n:]), None if basis is None else (basis[:n], basis[n:]))
