"""The datasets privaudit knows, where their files are expected, and how to load them.

``digits`` (scikit-learn's bundled 8x8 digits) is the embedded default and needs no files. The
torchvision datasets load from a local directory in torchvision's standard layout, given by
``--data-dir`` or the ``PRIVAUDIT_DATA_DIR`` environment variable; nothing is ever downloaded.

Where the files are looked for, first match wins (:func:`locate`):

1. the data root (``--data-dir`` / ``PRIVAUDIT_DATA_DIR``): torchvision's folder (``FashionMNIST/raw``),
   then the dataset's flat folders (``fashion-mnist/``) and the root itself (the IDX files as
   distributed, e.g. ``DIR/train-images-idx3-ubyte.gz``);
2. the system folders a distribution package installs (Debian's ``dataset-fashion-mnist`` puts the four
   gzipped IDX files in ``/usr/share/datasets/fashion-mnist``), so ``apt-get install
   dataset-fashion-mnist`` is all Fashion-MNIST needs.

``imagefolder`` is the user's own images in torchvision's ImageFolder layout, the data root itself being
the ImageFolder root (``DIR/<class name>/<image>.png|jpg``; :func:`privaudit.core.datasets.formats.read_image_folder`):
its shape and classes come from the files, and it has no official test split.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from privaudit.core.errors import ConfigError, one_of
from privaudit.core.datasets import formats

DATA_DIR_ENV = "PRIVAUDIT_DATA_DIR"
# Where Debian's ``dataset-fashion-mnist`` package installs the four gzipped IDX files (``dpkg -L``).
DEBIAN_FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


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
    flat: tuple[str, ...] = ()  # other folders under the data root holding the files ("" = the root itself)
    system: tuple[str, ...] = ()  # absolute folders a distribution package installs them into
    package: str | None = None  # that package (named in the error when the dataset is missing)
    present: Callable[[Path], bool] | None = None  # whether a folder holds the dataset (instead of ``expected``)
    layout: str | None = None  # the layout expected under the data root, for the error (instead of ``expected``)


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


def _load_image_folder(directory: Path | None) -> RawDataset:
    assert directory is not None
    images, labels, classes = formats.read_image_folder(directory)
    channels, size = images.shape[1], images.shape[2]
    info = DatasetInfo("imagefolder", channels, size, len(classes), "grey" if channels == 1 else "rgb",
                       f"ImageFolder {directory}: {len(labels)} images {size}x{size}, classes {', '.join(classes)}")
    return RawDataset(info, images, labels, np.zeros(len(labels), dtype=bool))


_CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))

DATASETS: dict[str, DatasetSpec] = {
    "digits": DatasetSpec(
        DatasetInfo("digits", 1, 8, 10, "digits", "scikit-learn's bundled 8x8 handwritten digits (1,797 images)"),
        None, (), _load_digits),
    "mnist": DatasetSpec(
        DatasetInfo("mnist", 1, 28, 10, "grey", "MNIST handwritten digits, 28x28 grey"),
        "MNIST/raw",
        ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
        _mnist_like("mnist"), flat=("mnist",)),
    "fashion-mnist": DatasetSpec(
        DatasetInfo("fashion-mnist", 1, 28, 10, "grey", "Fashion-MNIST clothing images, 28x28 grey"),
        "FashionMNIST/raw",
        ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
        _mnist_like("fashion-mnist"), flat=("fashion-mnist", ""), system=(DEBIAN_FASHION_MNIST,),
        package="dataset-fashion-mnist"),
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
    "imagefolder": DatasetSpec(
        DatasetInfo("imagefolder", 3, 0, 0, "rgb", "your own images in torchvision's ImageFolder layout "
                    "(--data-dir DIR: DIR/<class>/<image>.png|jpg; shape and classes read from the files)"),
        "", (), _load_image_folder, present=lambda d: len(formats.image_folder_classes(d)) >= 2,
        layout="<class name>/<image>.png|jpg (torchvision's ImageFolder, at least 2 class folders)"),
}


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path | None:
    """The data root: the explicit argument, else ``$PRIVAUDIT_DATA_DIR``, else None."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env).expanduser() if env else None


def candidate_dirs(name: str, data_dir: str | os.PathLike[str] | None) -> list[Path]:
    """Folders searched for dataset ``name``, in order (see the module docstring)."""
    spec = get_spec(name)
    if spec.subdir is None:
        return []
    root = resolve_data_dir(data_dir)
    out = []
    if root is not None:
        out += [root / spec.subdir, *(root / f if f else root for f in spec.flat)]
    return out + [Path(d) for d in spec.system]


def locate(name: str, data_dir: str | os.PathLike[str] | None) -> Path | None:
    """The first folder holding every expected file of ``name`` (None: embedded or not found)."""
    spec = get_spec(name)
    for directory in candidate_dirs(name, data_dir):
        if spec.present is not None:
            if spec.present(directory):
                return directory
        elif all(formats.find_file(directory, f) is not None for f in spec.expected):
            return directory
    return None


def install_hint(name: str) -> str:
    """How to make dataset ``name`` available: the package to install and/or the flag."""
    spec = get_spec(name)
    if spec.layout is not None:
        return f"pass --data-dir DIR or set {DATA_DIR_ENV}=DIR with DIR/{spec.layout}"
    flag = (f"pass --data-dir DIR or set {DATA_DIR_ENV}=DIR (DIR/{spec.subdir}/ with "
            f"{', '.join(f + '[.gz]' if 'idx' in f else f for f in spec.expected)}; privaudit never downloads)")
    if spec.package:
        return f"install it with `apt-get install {spec.package}` (found in {', '.join(spec.system)}), or {flag}"
    return flag


def missing_files(name: str, data_dir: str | os.PathLike[str] | None) -> list[str]:
    """Expected files of dataset ``name`` that are absent (empty when it is available).

    When no searched folder holds them all, the files missing from the first searched folder that
    exists (or ``<data-dir>/...`` when none does).
    """
    spec = get_spec(name)
    if spec.subdir is None or locate(name, data_dir) is not None:
        return []
    root = resolve_data_dir(data_dir)
    if spec.layout is not None:
        return [f"{root if root is not None else '<data-dir>'}/{spec.layout}"]
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
    directory = locate(name, data_dir)
    if directory is not None:
        return spec.loader(directory)
    root = resolve_data_dir(data_dir)
    if root is None:
        raise ConfigError(f"dataset {name!r} needs a data directory: {install_hint(name)}")
    if spec.layout is not None:
        raise ConfigError(f"dataset {name!r}: {root} is not an ImageFolder; {install_hint(name)}")
    directory = root / spec.subdir
    absent = [f for f in spec.expected if formats.find_file(directory, f) is None]
    raise ConfigError(f"dataset {name!r}: {directory} is missing {', '.join(absent)}; {install_hint(name)}")
