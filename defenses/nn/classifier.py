"""The supervised model: a linear head on an encoder (what supervised training and its ensembles update)."""

from __future__ import annotations

import torch
import torch.nn as nn


class ClassifierNet(nn.Module):
    """head(encoder(x)): the part of a supervised model that training updates."""

    def __init__(self, encoder: nn.Module, head: nn.Linear):
        super().__init__()
        self.encoder = encoder
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))
