"""The spreadout regulariser (Zhang et al. 2017) in Logit-DP's form.

Logit-DP Def. 2.3: l^(i,n)(Z) = sum_{j != i} Z_j^2 / (n - 1) on the similarity profile Z of x_i
against x'_1..x'_n; the loss is the sum over i.
"""

from __future__ import annotations

import torch

from privaudit.defenses.losses.reduce import reduce_terms
from privaudit.defenses.losses.similarity import cosine_similarity_matrix


def spreadout_from_similarity(sim: torch.Tensor, reduction: str = "none") -> torch.Tensor:
    """Per-row spreadout terms sum_{j != i} S_ij^2 / (n - 1) for a square similarity matrix."""
    n = sim.shape[0]
    off = sim.masked_fill(torch.eye(n, dtype=torch.bool, device=sim.device), 0.0)
    return reduce_terms((off ** 2).sum(dim=1) / (n - 1), reduction)


def spreadout(u: torch.Tensor, v: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
    """Spreadout loss of Logit-DP Def. 2.3 with cosine similarity."""
    return spreadout_from_similarity(cosine_similarity_matrix(u, v), reduction)
