"""DP-GCL's group-level InfoNCE (Eqs. 9, 12, 15): negatives only from the anchor's own group.

For anchors u_i = E(x_i), positives v_i = E(x_i^+), a group label per pair and N_a augmented
positives a_{m,j} = E(U(x_j^+)) (intra-group sample augmentation, Eq. 11), term i is

    l_i = -log( e^{s_ii/tau} / sum_{j in G(i)} ( e^{s_ij/tau} + sum_{m=1}^{N_a} e^{s^aug_{ij,m}/tau} ) )

(Eq. 12; Eq. 9 with N_a = 0; DP-GCL Eq. 4 / the one-directional InfoNCE of Eq. 6 when there are no
groups). :func:`group_info_nce_dual` adds the text-to-image direction of Eq. 15.
"""

from __future__ import annotations

import torch

from privaudit.defenses.losses.reduce import reduce_terms
from privaudit.defenses.losses.similarity import cosine_similarity_matrix


def group_info_nce(u: torch.Tensor, v: torch.Tensor, temperature: float, groups: torch.Tensor | None = None,
                   aug: torch.Tensor | None = None, reduction: str = "none") -> torch.Tensor:
    """Per-anchor terms of DP-GCL Eq. 12 (``groups`` None: every pair is in one group).

    ``aug`` is (N_a, B, D), the augmented positives used as extra negatives (or None).
    """
    logits = cosine_similarity_matrix(u, v) / temperature
    parts = [logits]
    if aug is not None:
        parts += [cosine_similarity_matrix(u, a) / temperature for a in aug]
    scores = torch.cat(parts, dim=1)
    if groups is not None:
        same = groups[:, None] == groups[None, :]
        scores = scores.masked_fill(~same.repeat(1, len(parts)), float("-inf"))
    terms = torch.logsumexp(scores, dim=1) - torch.diagonal(logits)
    return reduce_terms(terms, reduction)


def group_info_nce_dual(u: torch.Tensor, v: torch.Tensor, temperature: float, groups: torch.Tensor | None = None,
                        aug_u: torch.Tensor | None = None, aug_v: torch.Tensor | None = None,
                        reduction: str = "none") -> torch.Tensor:
    """DP-GCL Eq. 15: per pair i, the image-to-text term plus the text-to-image term.

    u_i = E1(x1_i), v_i = E2(x2_i); the second direction contrasts v_j against the u_i of its group
    (the columns of the similarity matrix), with ``aug_u`` as its extra negatives.
    """
    terms = group_info_nce(u, v, temperature, groups, aug_v) + group_info_nce(v, u, temperature, groups, aug_u)
    return reduce_terms(terms, reduction)
