"""Shared fixtures."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture(scope="session")
def digits():
    """The embedded digits dataset split for auditing (seed 0)."""
    from audit.datasets import load_dataset

    return load_dataset("digits", seed=0)
