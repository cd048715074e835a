"""Readers for the standard on-disk formats torchvision uses, without downloading or executing code.

* MNIST / Fashion-MNIST: IDX files (LeCun et al.), optionally gzipped, under ``<root>/MNIST/raw`` or
  ``<root>/FashionMNIST/raw``.
* CIFAR-10 / CIFAR-100: the "python version" batches (pickled dicts of numpy arrays) under
  ``<root>/cifar-10-batches-py`` and ``<root>/cifar-100-python``. They are read with a restricted
  unpickler that only reconstructs dicts, lists, bytes, strings, numbers and numpy arrays, so a
  malicious file cannot execute code.
* STL-10: the binary version under ``<root>/stl10_binary`` (column-major uint8 images, 1-based labels).
* ImageFolder: torchvision's generic layout ``<root>/<class name>/**/<image>.png|jpg|...``, one folder per
  class, classes numbered in sorted order of their folder names (``torchvision.datasets.ImageFolder``),
  decoded with Pillow.

torchvision's own dataset classes also verify MD5 sums of the full files, which rejects the small
files tests write in these formats; these readers check structure (magic numbers, shapes, keys)
instead and report what is wrong in one line.
"""

from __future__ import annotations

import gzip
import io
import pickle
import warnings
from pathlib import Path

import numpy as np

from privaudit.core.errors import ConfigError

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def find_file(directory: Path, name: str) -> Path | None:
    """Return ``directory/name`` or ``directory/name.gz`` if either exists."""
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (MNIST format): magic ``0x0000TTDD`` (type, dims), big-endian sizes, data."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        raw = handle.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ConfigError(f"{path}: not an IDX file (bad magic number)")
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ConfigError(f"{path}: truncated IDX header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ConfigError(f"{path}: IDX payload has {len(raw) - header} bytes, header says {expected}")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that only allows the globals needed to rebuild numpy arrays."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle API
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a dataset file")


def read_cifar_batch(path: Path) -> dict:
    """Read one CIFAR "python version" batch file into a dict with ``str`` keys."""
    with open(path, "rb") as handle:
        try:
            obj = _RestrictedUnpickler(io.BytesIO(handle.read()), encoding="latin1").load()
        except (pickle.UnpicklingError, EOFError, ValueError) as exc:
            raise ConfigError(f"{path}: not a CIFAR batch file ({exc})") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}: not a CIFAR batch file (expected a dict)")
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}


def cifar_images(batch: dict, path: Path) -> np.ndarray:
    """Return a batch's images as uint8 (N, 3, 32, 32)."""
    data = batch.get("data")
    if data is None:
        raise ConfigError(f"{path}: CIFAR batch has no 'data' entry")
    data = np.asarray(data, dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ConfigError(f"{path}: CIFAR 'data' must have shape (N, 3072), got {data.shape}")
    return data.reshape(-1, 3, 32, 32)


def read_stl10(image_path: Path, label_path: Path | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Read STL-10 binary images (N, 3, 96, 96) stored column-major, and 1-based labels."""
    raw = np.fromfile(image_path, dtype=np.uint8)
    per_image = 3 * 96 * 96
    if raw.size == 0 or raw.size % per_image:
        raise ConfigError(f"{image_path}: size {raw.size} is not a multiple of 3*96*96")
    images = raw.reshape(-1, 3, 96, 96).transpose(0, 1, 3, 2)
    labels = None
    if label_path is not None:
        labels = np.fromfile(label_path, dtype=np.uint8).astype(np.int64) - 1
        if labels.shape[0] != images.shape[0]:
            raise ConfigError(f"{label_path}: {labels.shape[0]} labels for {images.shape[0]} images")
    return np.ascontiguousarray(images), labels


#: The file endings torchvision's ImageFolder accepts (``torchvision.datasets.folder.IMG_EXTENSIONS``).
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
_GREY_MODES = ("1", "L", "I", "I;16", "F")


def image_folder_classes(root: Path) -> list[str]:
    """The class folders of an ImageFolder root, sorted (torchvision's ``find_classes``; hidden folders,
    such as ``.ipynb_checkpoints``, are skipped)."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def image_folder_files(root: Path) -> tuple[list[Path], np.ndarray, list[str]]:
    """Every image file under ``root/<class>/`` (recursively, sorted) with its class index, and the classes."""
    classes = image_folder_classes(root)
    if len(classes) < 2:
        raise ConfigError(f"{root}: an ImageFolder needs at least 2 class folders (root/<class>/<image>), "
                          f"found {len(classes)}")
    files: list[Path] = []
    labels: list[int] = []
    for label, name in enumerate(classes):
        found = sorted(p for p in (root / name).rglob("*") if p.is_file() and p.name.lower().endswith(IMG_EXTENSIONS))
        if not found:
            raise ConfigError(f"{root / name}: class folder without images ({', '.join(IMG_EXTENSIONS)})")
        files += found
        labels += [label] * len(found)
    return files, np.asarray(labels, dtype=np.int64), classes


def read_image_folder(root: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Decode an ImageFolder (see :func:`image_folder_files`) into uint8 images (N, C, S, S), labels, classes.

    Every image must be square and of one size (privaudit does not resize: a transform the user did not ask
    for would change what the model saw). Grey if every image is single-channel, else RGB (C = 3).
    """
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:  # pragma: no cover - Pillow comes with matplotlib
        raise ConfigError("reading an ImageFolder needs Pillow: pip install pillow") from None
    files, labels, classes = image_folder_files(root)
    decoded = [_open_image(path, Image, UnidentifiedImageError) for path in files]
    size = decoded[0].size
    for path, img in zip(files, decoded):
        if img.size != size or size[0] != size[1]:
            raise ConfigError(f"{path}: {img.size[0]}x{img.size[1]} pixels; every image must be square and of "
                              f"the size of {files[0].name} ({size[0]}x{size[1]})")
    grey = all(img.mode in _GREY_MODES for img in decoded)
    images = np.stack([np.asarray(img.convert("L" if grey else "RGB"), dtype=np.uint8) for img in decoded])
    images = images[:, None] if grey else images.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(images), labels, classes


#: Pixels one image may have (4096 x 4096). Pillow's own decompression-bomb check is set to this cap while a
#: folder is read, and every image's header size is checked against it before any pixel is decoded.
MAX_PIXELS = 4096 * 4096


def _open_image(path: Path, Image, UnidentifiedImageError):
    """Decode one image, refusing one whose header claims more than :data:`MAX_PIXELS` before decoding it."""
    default = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(path)
        with img:
            width, height = img.size
            if width * height > MAX_PIXELS:
                raise ConfigError(f"{path}: the header claims {width}x{height} pixels, more pixels than the "
                                  f"{MAX_PIXELS} an image may have")
            img.load()
            return img.copy()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ConfigError(f"{path}: the header claims more pixels than the {MAX_PIXELS} an image may have "
                          f"({exc})") from None
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable image ({exc})") from None
    finally:
        Image.MAX_IMAGE_PIXELS = default
