"""Reduction of per-term losses, shared by every loss function."""

from __future__ import annotations

import torch

from privaudit.core.errors import one_of

REDUCTIONS = ("mean", "sum", "none")


def reduce_terms(terms: torch.Tensor, reduction: str) -> torch.Tensor:
    """Reduce per-term losses: ``mean``, ``sum`` or ``none`` (return the terms)."""
    if reduction == "mean":
        return terms.mean()
    if reduction == "sum":
        return terms.sum()
    if reduction == "none":
        return terms
    raise one_of("reduction", reduction, REDUCTIONS)
