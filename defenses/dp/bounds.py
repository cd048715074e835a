"""Sensitivity bounds: what each paper claims, and the correct bound where the claim is wrong.

Every function returns an L2 sensitivity. ``n`` / ``batch`` is a batch size, ``clip`` a clip norm.
Where a paper's bound is wrong or incomplete the docstring says why, and a ``*_sound`` function gives
the bound the code can rely on. :mod:`privaudit.defenses.dp.base` calibrates noise with one of them
(``sensitivity='paper'`` or ``'sound'``) and the claim records both.
"""

from __future__ import annotations

import math


# --- DP-GCL (Sec. 2.3 and 3.2, App. A), add/remove --------------------------------------------------
def dpgcl_sample_level(batch: int, clip: float, terms_per_example: int = 1) -> float:
    """DP-GCL Sec. 2.3.1, Eq. 6: sum of per-term clipped InfoNCE gradients, (2B + 1) C.

    Adding an example adds its own terms (t C) and may change every one of the other B t terms
    (2 C each): (2B + 1) t C for a batch of B examples plus the added one. The bound grows with the
    *realised* batch size, which Poisson sampling makes random; :func:`dpgcl_sample_level_sound`
    is the bound for every batch of at most ``max_batch`` examples.
    """
    return (2 * batch + 1) * terms_per_example * clip


def dpgcl_sample_level_sound(max_batch: int, clip: float, terms_per_example: int = 1) -> float:
    """(2 (b - 1) + 1) t C: valid for every pair of neighbouring batches of at most b examples."""
    return (2 * (max_batch - 1) + 1) * terms_per_example * clip


def dpgcl_batch_level(clip: float) -> float:
    """DP-GCL Eq. 7 (batch-level clipping, Huang et al.; Logit-DP's Naive-DP): 2C. Correct."""
    return 2 * clip


def dpgcl_group_clip(groups: int, clip: float) -> float:
    """DP-GCL Thm. 1 (Eq. 8: group clipping with full-batch negatives): (2K + 1) C, K = ceil(B/S).

    Correct for a batch that forms K groups; like Eq. 6 it depends on the realised batch size.
    """
    return (2 * groups + 1) * clip


def dpgcl_group(clip: float) -> float:
    """DP-GCL Thms. 2-3 (Eqs. 10 and 13, group-level negatives, with or without augmentation): 2C.

    App. A's argument needs every example other than the added one to keep its group. That holds
    when each example draws its own group independently of the others (``grouping='random'``);
    it does not hold when groups are consecutive chunks of a random permutation of the batch
    (``grouping='chunk'``, what Algorithm 1 line 5 describes): inserting one example shifts every
    later example by one position, so every later group can change and the sensitivity is up to
    :func:`dpgcl_group_chunk_sound`.
    """
    return 2 * clip


def dpgcl_group_chunk_sound(max_groups: int, clip: float) -> float:
    """(2K + 1) C for chunked groups: all K groups after the insertion point may change, one may be new."""
    return (2 * max_groups + 1) * clip


# --- DPCL (Li et al. 2022), replace-one, fixed batch size -------------------------------------------
def dpcl_similarity(n_views: int) -> float:
    """DPCL Thm. 1: S = Z^T Z of |Z| L2-normalised views has sensitivity 4 sqrt(|Z| - 1). Correct.

    Replacing one example changes its two views: two rows and two columns of S, 4|Z| - 4 entries,
    each by at most 2 (the unchanged unit diagonal makes it slightly loose).
    """
    return 4 * math.sqrt(n_views - 1)


def dpcl_mean(batch: int) -> float:
    """DPCL Thm. 2: the per-feature mean of N L2-normalised representations, 2/N. Correct."""
    return 2 / batch


def dpcl_sse() -> float:
    """DPCL Thm. 3: SSE(Z) = sum z^2 - N zbar^2 per feature of L2-normalised rows, 6. Correct (loose)."""
    return 6.0


def dpcl_gradient(clip: float, clip_unit: str = "view") -> float:
    """DPCL Sec. 3.2.2 / 3.3.2: the clipped gradient sum "with noised similarity" (or noised mean
    and variance) has sensitivity 4C (two changed views, 2C each); 2C per example-unit.

    WRONG for the loss the paper trains. With S~ = S(Z) + E, view r's gradient is
    J_r^T sum_b (W + W^T)_{rb} z_b, W = dL/dS~: it contains every other view's embedding z_b, so
    replacing one example changes every per-view gradient, not two. Noising S (or the mean and
    variance of Barlow Twins, whose loss couples examples through C = sum_b ...) does not make the
    per-example gradients independent. The sound bound is :func:`dpcl_gradient_sound`.
    """
    return 4 * clip if clip_unit == "view" else 2 * clip


def dpcl_gradient_sound(batch: int, clip: float, clip_unit: str = "view") -> float:
    """Every clipped unit may change by 2C under replace-one: 2 * (#units) * C (= DPCL Sec. 3.2.1's 4|B|C per view)."""
    units = 2 * batch if clip_unit == "view" else batch
    return 2 * units * clip


def dpcl_gradient_plain(batch: int, clip: float, clip_unit: str = "view") -> float:
    """DPCL Sec. 3.2.1 / 3.3.1 ("original DPSGD"): 4|B|C for 2|B| per-view gradients. Correct."""
    return dpcl_gradient_sound(batch, clip, clip_unit)


# --- Logit-DP (Kong et al.), add/remove -------------------------------------------------------------
def _softmax_extremes(n: int, temperature: float) -> tuple[float, float]:
    """Largest and smallest softmax probability of one entry among n logits in [-1/tau, 1/tau]."""
    a = math.exp(2.0 / temperature)
    return a / (a + n - 1), 1.0 / (1.0 + (n - 1) * a)


def logitdp_infonce_paper(n: int, pair_clip: float, temperature: float = 1.0) -> float:
    """Logit-DP Lemma 4.5 with Thm. 4.2: 2 (1 + (n-2) e^2 / (e^2 + n - 1)) B for cosine logits in [-1, 1].

    The lemma assumes tau = 1; for logits s/tau this is the same expression with e^2 -> e^{2/tau}
    (what the public code does). It is still too small, see :func:`logitdp_infonce_sound`.
    """
    a = math.exp(2.0 / temperature)
    return 2 * (1 + (n - 2) * a / (a + n - 1)) * pair_clip


def logitdp_infonce_sound(n: int, pair_clip: float, temperature: float = 1.0) -> float:
    """The corrected Lemma 4.5 bound for a batch of n (the larger neighbour), logits s/tau.

    (G1 + G2 + (n-1) L) B with G1 <= 2 (1 - p_min), G2 <= (n-1) p_max, L <= p_max, where p_max / p_min
    are the largest / smallest softmax probability of one of n logits in [-1/tau, 1/tau]. The paper's
    proof uses one p_n for G1 (the new row's diagonal probability) and for G2, L (the new column's
    probability in the other rows); they are different entries and are extreme together (x'_n aligned
    with every x_i, x_n anti-aligned with x'_n), so 2 (1 + (n-2) p) is too small by up to 2 p_max B.
    A temperature enters through the logit range: e^2 becomes e^{2/tau}.
    """
    p_max, p_min = _softmax_extremes(n, temperature)
    return (2 * (1 - p_min) + 2 * (n - 1) * p_max) * pair_clip


def logitdp_infonce_sup(pair_clip: float, temperature: float = 1.0) -> float:
    """sup over n of :func:`logitdp_infonce_sound`: 2 (1 + e^{2/tau}) B, valid for any batch size.

    Under Poisson sampling the batch size is random (and not private), so the noise must not be
    calibrated to it; this bound makes the mechanism batch-size independent.
    """
    return 2 * (1 + math.exp(2.0 / temperature)) * pair_clip


def logitdp_spreadout(pair_clip: float) -> float:
    """Logit-DP Lemma 4.6 (spreadout, cosine similarities): G1 + G2 + (n-1) L <= 6, so 6B for every n. Correct."""
    return 6 * pair_clip
