"""The datasets privaudit knows, where their files are expected, and how to load them.

``digits`` (scikit-learn's bundled 8x8 digits) is the embedded default and needs no files. The
torchvision datasets load from a local directory in torchvision's standard layout, given by
``--data-dir`` or the ``PRIVAUDIT_DATA_DIR`` environment variable; nothing is ever downloaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from core.errors import ConfigError, one_of
from core.datasets import formats

DATA_DIR_ENV = "PRIVAUDIT_DATA_DIR"


@dataclass(frozen=True)
class DatasetInfo:
    """Static facts about a dataset: image shape, classes, augmentation family."""

    name: str
    channels: int
    size: int
    num_classes: int
    augmentation: str  # "digits" (8x8 grey) or "grey" / "rgb"
    description: str

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.channels, self.size, self.size)


@dataclass
class RawDataset:
    """Images as uint8 (N, C, H, W), integer labels, and which rows form the official test split."""

    info: DatasetInfo
    images: np.ndarray
    labels: np.ndarray
    is_test: np.ndarray  # bool (N,): official test split (all False when the dataset has none)
    users: np.ndarray | None = None  # per-example user id when the dataset has users


@dataclass(frozen=True)
class DatasetSpec:
    info: DatasetInfo
    subdir: str | None  # directory under the data root; None for embedded datasets
    expected: tuple[str, ...]  # files expected in that directory (".gz" accepted for IDX)
    loader: Callable[[Path | None], RawDataset]


def _load_digits(_: Path | None) -> RawDataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    # Pixel values are 0..16; scale to 0..255 so every dataset is uint8 on the same range.
    images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)[:, None, :, :]
    labels = bunch.target.astype(np.int64)
    return RawDataset(DATASETS["digits"].info, images, labels, np.zeros(len(labels), dtype=bool))


def _mnist_like(key: str) -> Callable[[Path | None], RawDataset]:
    def load(directory: Path | None) -> RawDataset:
        assert directory is not None
        parts = []
        for prefix, test in (("train", False), ("t10k", True)):
            img_path = formats.find_file(directory, f"{prefix}-images-idx3-ubyte")
            lbl_path = formats.find_file(directory, f"{prefix}-labels-idx1-ubyte")
            assert img_path is not None and lbl_path is not None
            images = formats.read_idx(img_path)
            labels = formats.read_idx(lbl_path).astype(np.int64)
            if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
                raise ConfigError(
                    f"{img_path}: expected images (N, H, W) and N labels, got {images.shape} and {labels.shape}")
            parts.append((images[:, None].astype(np.uint8), labels, np.full(len(labels), test)))
        images, labels, is_test = (np.concatenate(x) for x in zip(*parts))
        return RawDataset(DATASETS[key].info, images, labels, is_test)

    return load


def _load_cifar(key: str, folder: str, train_files: tuple[str, ...], test_file: str,
                label_key: str) -> Callable[[Path | None], RawDataset]:
    def load(directory: Path | None) -> RawDataset:
        assert directory is not None
        parts = []
        for name in (*train_files, test_file):
            path = directory / name
            batch = formats.read_cifar_batch(path)
            if label_key not in batch:
                raise ConfigError(f"{path}: CIFAR batch has no {label_key!r} entry")
            images = formats.cifar_images(batch, path)
            labels = np.asarray(batch[label_key], dtype=np.int64)
            if labels.shape[0] != images.shape[0]:
                raise ConfigError(f"{path}: {labels.shape[0]} labels for {images.shape[0]} images")
            parts.append((images, labels, np.full(len(labels), name == test_file)))
        images, labels, is_test = (np.concatenate(x) for x in zip(*parts))
        return RawDataset(DATASETS[key].info, images, labels, is_test)

    return load


def _load_stl10(directory: Path | None) -> RawDataset:
    assert directory is not None
    parts = []
    for prefix, test in (("train", False), ("test", True)):
        images, labels = formats.read_stl10(directory / f"{prefix}_X.bin", directory / f"{prefix}_y.bin")
        assert labels is not None
        parts.append((images, labels, np.full(len(labels), test)))
    images, labels, is_test = (np.concatenate(x) for x in zip(*parts))
    return RawDataset(DATASETS["stl10"].info, images, labels, is_test)


_CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))

DATASETS: dict[str, DatasetSpec] = {
    "digits": DatasetSpec(
        DatasetInfo("digits", 1, 8, 10, "digits", "scikit-learn's bundled 8x8 handwritten digits (1,797 images)"),
        None, (), _load_digits),
    "mnist": DatasetSpec(
        DatasetInfo("mnist", 1, 28, 10, "grey", "MNIST handwritten digits, 28x28 grey"),
        "MNIST/raw",
        ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
        _mnist_like("mnist")),
    "fashion-mnist": DatasetSpec(
        DatasetInfo("fashion-mnist", 1, 28, 10, "grey", "Fashion-MNIST clothing images, 28x28 grey"),
        "FashionMNIST/raw",
        ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
        _mnist_like("fashion-mnist")),
    "cifar10": DatasetSpec(
        DatasetInfo("cifar10", 3, 32, 10, "rgb", "CIFAR-10, 32x32 colour, 10 classes"),
        "cifar-10-batches-py", (*_CIFAR10_TRAIN, "test_batch"),
        _load_cifar("cifar10", "cifar-10-batches-py", _CIFAR10_TRAIN, "test_batch", "labels")),
    "cifar100": DatasetSpec(
        DatasetInfo("cifar100", 3, 32, 100, "rgb", "CIFAR-100, 32x32 colour, 100 fine classes"),
        "cifar-100-python", ("train", "test"),
        _load_cifar("cifar100", "cifar-100-python", ("train",), "test", "fine_labels")),
    "stl10": DatasetSpec(
        DatasetInfo("stl10", 3, 96, 10, "rgb", "STL-10 labelled train/test, 96x96 colour"),
        "stl10_binary", ("train_X.bin", "train_y.bin", "test_X.bin", "test_y.bin"),
        _load_stl10),
}


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path | None:
    """The data root: the explicit argument, else ``$PRIVAUDIT_DATA_DIR``, else None."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env).expanduser() if env else None


def missing_files(name: str, data_dir: str | os.PathLike[str] | None) -> list[str]:
    """Expected files of dataset ``name`` that are absent (empty when it is available)."""
    spec = get_spec(name)
    if spec.subdir is None:
        return []
    root = resolve_data_dir(data_dir)
    if root is None:
        return [f"<data-dir>/{spec.subdir}/{f}" for f in spec.expected]
    directory = root / spec.subdir
    return [str(directory / f) for f in spec.expected if formats.find_file(directory, f) is None]


def get_spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise one_of("dataset", name, DATASETS)
    return DATASETS[name]


def load_raw(name: str, data_dir: str | os.PathLike[str] | None = None) -> RawDataset:
    """Load dataset ``name`` from disk (or the embedded copy). Raises ``ConfigError`` naming missing files."""
    spec = get_spec(name)
    if spec.subdir is None:
        return spec.loader(None)
    root = resolve_data_dir(data_dir)
    if root is None:
        raise ConfigError(
            f"dataset {name!r} needs a data directory: pass --data-dir or set {DATA_DIR_ENV} "
            f"(expected {spec.subdir}/ with {', '.join(spec.expected)})")
    directory = root / spec.subdir
    absent = [f for f in spec.expected if formats.find_file(directory, f) is None]
    if absent:
        raise ConfigError(
            f"dataset {name!r}: {directory} is missing {', '.join(absent)} "
            f"(torchvision's on-disk format; privaudit never downloads)")
    return spec.loader(directory)
