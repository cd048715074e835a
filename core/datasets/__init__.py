"""Datasets: embedded digits and torchvision-format datasets from a local directory, and membership splits."""

from __future__ import annotations

import os

from privaudit.core.datasets.registry import (
    DATA_DIR_ENV,
    DATASETS,
    DatasetInfo,
    RawDataset,
    get_spec,
    install_hint,
    locate,
    load_raw,
    missing_files,
    resolve_data_dir,
)
from privaudit.core.datasets.splits import MembershipData, Split, SplitConfig, make_splits, training_set_size


def load_dataset(name: str, *, seed: int = 0, data_dir: str | os.PathLike[str] | None = None,
                 splits: SplitConfig | None = None) -> MembershipData:
    """Load dataset ``name`` and split it for membership auditing (see :mod:`privaudit.core.datasets.splits`)."""
    return make_splits(load_raw(name, data_dir), seed, splits)


__all__ = [
    "DATA_DIR_ENV", "DATASETS", "DatasetInfo", "MembershipData", "RawDataset", "Split", "SplitConfig",
    "get_spec", "install_hint", "load_dataset", "locate", "load_raw", "make_splits", "missing_files", "resolve_data_dir",
    "training_set_size",
]
