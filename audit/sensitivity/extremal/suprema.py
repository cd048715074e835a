"""Closed-form suprema of the checked quantities, with their derivations.

z is the L2-normalised representation of a view, C the clip norm.

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
* **Group clipping (DP-GCL Eq. 8)** and **spreadout pair sums (Logit-DP Lemma 4.6, n = 2)**: see
  :func:`group_clip_supremum` and :func:`spreadout_supremum`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

Params = Mapping[str, Any]


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


def group_clip_supremum(p: Params) -> float:
    """sup ||Delta|| = 2KC for Eq. 8's group clipping with K fixed groups (random grouping; Thm. 1 states (2K + 1) C).

    Upper bound: the added example joins one of the K fixed groups, so no group appears and each
    group's clipped gradient moves by at most 2C. Reached in the limit:
    :func:`~privaudit.audit.sensitivity.extremal.group_clip.group_clip_limit` turns every group's clipped
    gradient around (the added example's group included) with the rows on a half circle, as
    :func:`~privaudit.audit.sensitivity.extremal.split_flip.split_flip_seeds` does for SimCLR's views.
    """
    return 2.0 * round(int(p["B"]) / int(p["S"])) * float(p["C"])


def spreadout_supremum(p: Params) -> float | None:
    """sup ||Delta|| = 4C for Logit-DP's spreadout pair sums at n = 2 (one pair added to one); None for n > 2.

    Upper bound: D (one pair) is below the spreadout loss's two-row minimum and releases 0; D' has
    two off-diagonal logits Z_12 = <x1, y2>, Z_21 = <x2, y1> with dL/dZ_ij = 2 Z_ij / (n - 1) = 2 Z_ij
    (Logit-DP Def. 2.3), so ||Delta|| = ||2 Z_12 Clip(grad Z_12) + 2 Z_21 Clip(grad Z_21)|| <= 4C.
    Reached in the limit by :func:`~privaudit.audit.sensitivity.extremal.spreadout.spreadout_seeds`. For
    n > 2 no closed form is derived.
    """
    return 4.0 * float(p["C"]) if int(p["n"]) == 2 else None


# a supremum function returns None where no closed form is derived (at the claim's other settings)
SUPREMA: dict[str, tuple[Callable[[Params], float | None], str]] = {
    "dpcl.mean": (mean_supremum, "2 / B (tight)"),
    "dpcl.similarity-matrix": (similarity_supremum, "4 sqrt(2B - 2)"),
    "dpcl.sse": (sse_supremum, "4 (B - 1) / B"),
    "logitdp.spreadout": (spreadout_supremum, "4C at n = 2 (none derived for n > 2)"),
    "dpgcl.group-clip": (group_clip_supremum, "2KC, K = round(B / S) fixed groups"),
}
