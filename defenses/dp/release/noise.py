"""Gaussian noise drawn on the CPU from a seeded generator, so every device sees the same numbers."""

from __future__ import annotations

import torch


def gaussian(shape: tuple[int, ...] | torch.Size, std: float, generator: torch.Generator, *,
             device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """N(0, std^2) of ``shape`` (std may be 0: zeros, with the generator still advanced)."""
    if std < 0:
        raise ValueError(f"noise std must be >= 0, got {std}")
    draw = torch.randn(tuple(shape), generator=generator, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    return (draw * std).to(device=device, dtype=dtype)
