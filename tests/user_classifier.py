"""A user's own tiny classifier and training function, imported by ``tests/test_audit_model.py`` as
``user_classifier:make_net`` / ``user_classifier:train`` (tests/ is on pytest's path), as a user's package would be."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_net() -> nn.Module:
    """An MLP for 8x8 digits: flatten, 64 hidden units, 10 logits."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, seed: int) -> None:
    """Full-batch Adam for 150 steps: enough to overfit a few hundred digits."""
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def make_small_net() -> nn.Module:
    """An MLP for 8x8 grey images of 3 classes (the ImageFolder test's)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 3))
