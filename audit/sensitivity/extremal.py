"""Constructed extremal pairs and closed-form suprema of the checked quantities.

The search (:mod:`audit.sensitivity.search`) starts from these pairs; the gradient ascent then moves
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
* **Clipped gradient sums (DPCL Secs. 3.2.2 / 3.3.2; DP-GCL chunked grouping).** With every
  example a copy of x, every unit's gradient is (nearly) the same vector, so the clipped sum is
  about (number of units) x C in one direction when clipping saturates; replacing (adding) one
  example by the antipode of x adds the same strong negative (or a different batch statistic) to
  every unit's loss and turns every unit's gradient the same way, so all 2|B| clipped terms move
  together: ||Delta|| grows like |B| C, the order of the sound bound 4|B|C, against the paper's 4C.
  For chunked grouping the same copies make every group's gradient equal; the inserted example
  shifts the groups, and the ascent aligns the changes.

Every pair is built from the target's domain (rows of the data pool, inverted, repeated), so it is
a valid input of the code the defense trains with.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import torch

from audit.sensitivity.domains import ImageDomain, Pair, cat_rows, slice_rows
from audit.sensitivity.search import SEED_RANGE, Target

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


SUPREMA: dict[str, tuple[Callable[[Params], float], str]] = {
    "dpcl.mean": (mean_supremum, "2 / B (tight)"),
    "dpcl.similarity-matrix": (similarity_supremum, "4 sqrt(2B - 2)"),
    "dpcl.sse": (sse_supremum, "4 (B - 1) / B"),
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
