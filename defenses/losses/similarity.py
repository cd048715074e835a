"""Similarity matrices between embeddings."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cosine_similarity_matrix(u: torch.Tensor, v: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """S_ij = <u_i/||u_i||, v_j/||v_j||> for u (n, d), v (m, d) -> (n, m).

    DP-GCL Eq. 3; Logit-DP's S_cos (Sec. 2); DPCL's S(Z) = Z^T Z for L2-normalised Z (Sec. 3.2.2).
    """
    return F.normalize(u, dim=-1, eps=eps) @ F.normalize(v, dim=-1, eps=eps).transpose(-1, -2)  # (..., n, m)
