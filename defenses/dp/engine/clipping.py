"""Clipping to an L2 norm bound (Abadi et al. 2016): Clip_C(g) = g * min(1, C / ||g||)."""

from __future__ import annotations

import torch


def clip_factors(norms: torch.Tensor, clip: float) -> torch.Tensor:
    """min(1, C / ||g||) for each norm (1 for a zero gradient)."""
    if clip <= 0:
        raise ValueError(f"clip: must be > 0, got {clip}")
    safe = torch.where(norms > 0, norms, torch.ones_like(norms))
    return torch.where(norms > clip, clip / safe, torch.ones_like(norms))


def clipped_fraction(norms: torch.Tensor, clip: float) -> float:
    """Fraction of units whose norm exceeded the bound (0 for no units)."""
    return float((norms > clip).float().mean()) if norms.numel() else 0.0
