"""Barlow Twins (Zbontar et al. 2021) as DPCL writes it, with optionally supplied feature statistics.

DPCL Eqs. 5-6: L_BT = sum_i (1 - C_ii)^2 + lambda sum_i sum_{j != i} C_ij^2 with the cross-correlation
C_ij = sum_b za_{b,i} zb_{b,j} / (sqrt(sum_b za_{b,i}^2) sqrt(sum_b zb_{b,j}^2)) of mean-centred
features. With the per-feature mean mu (Eq. 7) and variance sigma^2 = SSE/(N-1) (Eqs. 8-9),
sum_b za_{b,i}^2 = (N-1) sigma_i^2, so C = za_c^T zb_c / ((N-1) sigma_a sigma_b^T).

DPCL Sec. 3.3.2 replaces mu and sigma^2 by noised versions; :func:`barlow_twins` takes them through
``stats1`` / ``stats2``.
"""

from __future__ import annotations

import torch

from privaudit.defenses.losses.reduce import reduce_terms

BARLOW_LAMBDA = 5e-3  # Zbontar et al. 2021 (about 1 / embedding dimension)


def feature_mean(z: torch.Tensor) -> torch.Tensor:
    """mu(Z) = (1/N) sum_i Z_i per feature (DPCL Eq. 7)."""
    return z.mean(dim=0)


def feature_sse(z: torch.Tensor) -> torch.Tensor:
    """SSE(Z) = sum_i Z_i^2 - N mu(Z)^2 per feature (DPCL Sec. 3.3.2, before Eq. 9)."""
    n = z.shape[0]
    return (z * z).sum(dim=0) - n * feature_mean(z) ** 2


def feature_stats(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mu(Z), sigma(Z)) with sigma(Z) = SSE(Z) / (N - 1), the unbiased variance (DPCL Eqs. 7-9)."""
    return feature_mean(z), feature_sse(z) / (z.shape[0] - 1)


def cross_correlation(z1: torch.Tensor, z2: torch.Tensor,
                      stats1: tuple[torch.Tensor, torch.Tensor] | None = None,
                      stats2: tuple[torch.Tensor, torch.Tensor] | None = None,
                      eps: float = 1e-6) -> torch.Tensor:
    """C (D, D) of DPCL Eq. 6 from features centred and scaled by the given (or batch) statistics."""
    n = z1.shape[0]
    mean1, var1 = stats1 if stats1 is not None else feature_stats(z1)
    mean2, var2 = stats2 if stats2 is not None else feature_stats(z2)
    a = (z1 - mean1) / torch.sqrt(var1.clamp(min=0) + eps)
    b = (z2 - mean2) / torch.sqrt(var2.clamp(min=0) + eps)
    return a.T @ b / (n - 1)


def barlow_twins(z1: torch.Tensor, z2: torch.Tensor, lambd: float = BARLOW_LAMBDA,
                 stats1: tuple[torch.Tensor, torch.Tensor] | None = None,
                 stats2: tuple[torch.Tensor, torch.Tensor] | None = None,
                 reduction: str = "sum") -> torch.Tensor:
    """Barlow Twins loss (DPCL Eq. 5). ``reduction='none'`` returns the D x D matrix of terms."""
    c = cross_correlation(z1, z2, stats1, stats2)
    eye = torch.eye(c.shape[0], dtype=torch.bool, device=c.device)
    terms = torch.where(eye, (1 - c) ** 2, lambd * c ** 2)
    return reduce_terms(terms, reduction)
