"""What the audit-training tests share: the members file they audit (half of the embedded digits, in the npz format
``--members`` reads) and one audit call with the tests' fast settings; ``tests/conftest.py`` makes the first a
fixture (``members``) beside the honest recipe shortened to one epoch (``short_recipe``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_members(directory: Path) -> Path:
    """``directory/members.npz``: a seeded half of the digits (x in [0, 1], float32; y int64)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
    inside = np.random.default_rng(0).random(len(y)) < 0.5
    path = directory / "members.npz"
    np.savez(path, x=x[inside], y=y[inside])
    return path


def audit_recipe(factory: str, members: Path, train: str, **kw):
    """``audit_training`` of ``train`` on ``members`` at delta 1e-5, neighbours one size away, training not timed."""
    from privaudit.audit.user.training.training_audit import audit_training

    return audit_training(factory, train, members=members, delta=1e-5, time_training=False, size_radius=1, **kw)

