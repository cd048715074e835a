"""InfoNCE and SimCLR's NT-Xent as functions of embeddings or of a similarity matrix.

Two forms appear in the papers:

* one-directional InfoNCE over a batch of B positive pairs (x_i, x_i^+) with B x B logits
  Z_ij = s(x_i, x_j^+) / tau:  L = sum_i -log(e^{Z_ii} / sum_j e^{Z_ij})
  (DP-GCL Eq. 4; Logit-DP Def. 2.2, where the logits are the similarities, i.e. tau = 1);
* SimCLR's NT-Xent over the 2N views with every other view as a negative:
  l(i, j) = -log(e^{sim(z_i, z_j)/tau} / sum_{k != i} e^{sim(z_i, z_k)/tau}),
  L = (1/2N) sum_k [l(2k-1, 2k) + l(2k, 2k-1)]  (DPCL Eqs. 3-4; Chen et al. 2020).
  Here the views are ordered [view-1 of all N; view-2 of all N], so i's positive is i +/- N.

The ``*_from_*`` variants take the logits/similarities directly, so defenses that privatise the
similarity matrix (DPCL Sec. 3.2.2) or clip its gradient (Logit-DP) reuse the same code.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from privaudit.defenses.losses.reduce import reduce_terms
from privaudit.defenses.losses.similarity import cosine_similarity_matrix


def info_nce_from_logits(logits: torch.Tensor, reduction: str = "none") -> torch.Tensor:
    """Per-row InfoNCE terms l_i = -log softmax(Z_i)_i for square logits Z (n, n) (Logit-DP Def. 2.2)."""
    terms = -torch.diagonal(F.log_softmax(logits, dim=1))
    return reduce_terms(terms, reduction)


def info_nce(u: torch.Tensor, v: torch.Tensor, temperature: float = 0.1, reduction: str = "sum") -> torch.Tensor:
    """InfoNCE of DP-GCL Eq. 4: sum_i -log(e^{s_ii/tau} / sum_j e^{s_ij/tau}), s = cosine similarity."""
    return info_nce_from_logits(cosine_similarity_matrix(u, v) / temperature, reduction)


def nt_xent_from_similarity(sim: torch.Tensor, temperature: float = 0.5, reduction: str = "mean") -> torch.Tensor:
    """NT-Xent (DPCL Eq. 4) from a (2N, 2N) similarity matrix of views ordered [view 1; view 2].

    Term i is -log(exp(S_{i,p(i)}/tau) / sum_{k != i} exp(S_ik/tau)) with p(i) = i + N mod 2N; the
    mean over all 2N terms is DPCL Eq. 3. Leading dimensions of ``sim`` (..., 2N, 2N) are batch dimensions.
    """
    n2 = sim.shape[-1]
    if sim.dim() < 2 or sim.shape[-2] != n2 or n2 % 2:
        raise ValueError(f"similarity matrix must be square with an even side, got {tuple(sim.shape)}")
    n = n2 // 2
    logits = sim / temperature
    eye = torch.eye(n2, dtype=torch.bool, device=sim.device)
    logits = logits.masked_fill(eye, float("-inf"))
    positive = torch.arange(n2, device=sim.device).add(n).remainder(n2)
    terms = -(logits[..., torch.arange(n2, device=sim.device), positive] - torch.logsumexp(logits, dim=-1))
    return reduce_terms(terms, reduction)


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.5, reduction: str = "mean") -> torch.Tensor:
    """SimCLR's NT-Xent of two batches of views (DPCL Eqs. 3-4) with cosine similarity.

    Leading dimensions are batch dimensions (K stacked models: z1, z2 (K, N, D), terms (K, 2N) with
    ``reduction='none'``).
    """
    z = torch.cat([z1, z2], dim=-2)
    return nt_xent_from_similarity(cosine_similarity_matrix(z, z), temperature, reduction)
