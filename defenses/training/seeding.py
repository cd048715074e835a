"""Deterministic, independent random streams derived from one seed.

Each consumer (model init, batch sampling, augmentation, noise, ...) gets its own stream keyed by a
purpose string, so adding draws to one stream never shifts another and runs are reproducible.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def derive_seed(seed: int, *purpose: object) -> int:
    """A 63-bit seed derived from ``seed`` and a purpose path, e.g. ``derive_seed(0, "noise", step)``."""
    digest = hashlib.sha256(repr((int(seed), *map(str, purpose))).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def torch_generator(seed: int, *purpose: object) -> torch.Generator:
    """A CPU ``torch.Generator`` for the stream ``(seed, *purpose)``.

    Random numbers are drawn on the CPU and moved to the model's device, so results do not depend
    on the device's generator implementation.
    """
    gen = torch.Generator(device="cpu")
    gen.manual_seed(derive_seed(seed, *purpose))
    return gen


def numpy_rng(seed: int, *purpose: object) -> np.random.Generator:
    """A numpy ``Generator`` for the stream ``(seed, *purpose)``."""
    return np.random.default_rng(derive_seed(seed, *purpose))
