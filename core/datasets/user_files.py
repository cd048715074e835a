"""A user's own members, non-members and population, read from their files into a membership split.

Each file holds labelled examples, exactly as the user's model takes them:

* ``.npz`` with arrays ``x`` (examples: features (N, d) or images (N, C, H, W), any real dtype, used as
  given, as float32) and ``y`` (integer class indices, the model's logit order);
* CSV: one column per feature and a label column (``label``, ``y``, ``target`` or ``class``; a header row
  is required), BOM-tolerant (:func:`privaudit.core.datasets.arrays.read_csv`);
* a folder in torchvision's ImageFolder layout (``DIR/<class>/<image>.png|jpg``; pixels scaled to [0, 1],
  (N, C, H, W)); classes are numbered in sorted order of the class names found across all the folders
  given, as ImageFolder numbers them, so give every class folder in each (empty ones are fine to omit
  only if the sorted order is unchanged).

:func:`user_membership_data` makes the :class:`~privaudit.core.datasets.MembershipData` the attacks take: the
audit pool is the members followed by the non-members (membership known, chosen by the user), the
attacker's shadow split is the population (or empty), and nothing is drawn from privaudit's own splits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from privaudit.core.datasets.arrays import read_csv, read_npz
from privaudit.core.datasets.registry import DatasetInfo
from privaudit.core.datasets.splits import MembershipData, Split
from privaudit.core.errors import ConfigError

LABEL_COLUMNS = ("label", "y", "target", "class")
FORMATS = ".npz (x, y), .csv (features and a label column) or an ImageFolder directory"


@dataclass(frozen=True)
class Examples:
    """Labelled examples read from ``source``: inputs as float32, labels as int64; ``classes``: an image folder's
    class names (None for arrays)."""

    x: np.ndarray
    y: np.ndarray
    source: str
    classes: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return int(self.y.size)


def check_distinct(first: object, second: object, fields: str = "--members and --nonmembers") -> None:
    """Refuse the same file or folder given for both sides (a path compared after resolving links; arrays are not
    paths and pass): members scored against themselves give AUC 0.5 and a verdict on nothing."""
    if not isinstance(first, (str, Path)) or not isinstance(second, (str, Path)):
        return
    a, b = Path(first), Path(second)
    same = a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    if same:
        raise ConfigError(f"{fields}: both are {str(first)!r}; give the examples the model was trained on and "
                          "examples it was not, in two different files or folders")


def read_examples(path: str | Path, field: str) -> Examples:
    """The labelled examples in ``path`` (see the module docstring); bad input names ``field`` and the file."""
    path = Path(path)
    if path.is_dir():
        return _image_folder(path, field)
    if not path.is_file():
        raise ConfigError(f"{field}: {path}: no such file or directory (accepted: {FORMATS})")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        arrays = _tagged(field, lambda: read_npz(path))
        missing = [k for k in ("x", "y") if k not in arrays]
        if missing:
            raise ConfigError(f"{field}: {path}: key {missing[0]!r} missing (an .npz needs x and y; found: "
                              f"{', '.join(sorted(arrays)) or 'none'})")
        return _checked(field, path, arrays["x"], arrays["y"])
    if suffix == ".csv":
        return _csv(path, field)
    raise ConfigError(f"{field}: {path}: unknown type {suffix or '(none)'!r}; accepted: {FORMATS}")


def _tagged(field: str, read):
    try:
        return read()
    except ConfigError as exc:
        raise ConfigError(f"{field}: {exc}") from None


def _csv(path: Path, field: str) -> Examples:
    header = _tagged(field, lambda: read_csv(path, text_column=_label_column_hint(path)))
    names, data = header
    if names is None:
        raise ConfigError(f"{field}: {path}: a header row is needed to find the label column "
                          f"({', '.join(LABEL_COLUMNS)})")
    column = next((c for c in LABEL_COLUMNS if c in names), None)
    if column is None:
        raise ConfigError(f"{field}: {path}: no label column (accepted names: {', '.join(LABEL_COLUMNS)}; found: "
                          f"{', '.join(names)})")
    j = names.index(column)
    if data.shape[1] < 2:
        raise ConfigError(f"{field}: {path}: no feature columns beside {column!r}")
    return _checked(field, path, np.delete(data, j, axis=1), data[:, j])


def _label_column_hint(path: Path) -> str | None:
    """The label column's name from the first line (for the message on a non-numeric label)."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as handle:
            first = handle.readline(4096).lower()
    except OSError:
        return None
    names = [c.strip() for c in first.split(",")]
    return next((c for c in LABEL_COLUMNS if c in names), None)


def _checked(field: str, path: Path, x: np.ndarray, y: np.ndarray) -> Examples:
    where = f"{field}: {path}"
    if not np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.complexfloating):
        raise ConfigError(f"{where}: x must hold real numbers, got dtype {x.dtype}")
    if x.ndim < 2 or x.shape[0] == 0:
        raise ConfigError(f"{where}: x must be (examples, features...) with at least one example, got shape "
                          f"{x.shape}")
    x = x.astype(np.float32, copy=False)
    if not np.isfinite(x).all():
        raise ConfigError(f"{where}: x holds NaN or infinite values")
    return Examples(x, check_labels(where, y, x.shape[0]), str(path))


def check_labels(where: str, y: np.ndarray, n: int, classes: int | None = None) -> np.ndarray:
    """``y`` as int64 class indices: numeric, integer-valued, >= 0 (and < ``classes``), one per example."""
    y = np.asarray(y)
    if not np.issubdtype(y.dtype, np.number) or np.issubdtype(y.dtype, np.complexfloating):
        raise ConfigError(f"{where}: labels must be integer class indices 0..C-1, got dtype {y.dtype}")
    y = y.ravel()
    if y.size != n:
        raise ConfigError(f"{where}: {y.size} labels for {n} rows")
    if not np.isfinite(y).all() or not np.all(np.equal(np.mod(y, 1), 0)):
        raise ConfigError(f"{where}: labels must be integers (class indices 0..C-1)")
    y = y.astype(np.int64)
    top = classes if classes is not None else np.iinfo(np.int64).max
    if y.size and (y.min() < 0 or y.max() >= top):
        bad = int(y.min()) if y.min() < 0 else int(y.max())
        raise ConfigError(f"{where}: label {bad} out of range; labels must lie in [0, "
                          f"{'C' if classes is None else classes}) (the model's {classes or 'C'} classes)")
    return y


def _image_folder(path: Path, field: str) -> Examples:
    from privaudit.core.datasets.formats import read_image_folder

    images, labels, classes = _tagged(field, lambda: read_image_folder(path))
    return Examples(images.astype(np.float32) / 255.0, labels, str(path), tuple(classes))


def _renumbered(parts: list[Examples]) -> list[Examples]:
    """Image folders' labels renumbered by the sorted union of their class names (ImageFolder's order)."""
    if all(p.classes is None for p in parts):
        return parts
    if any(p.classes is None for p in parts):
        raise ConfigError("--members/--nonmembers/--population: give all as image folders or all as arrays")
    names = sorted(set().union(*(p.classes for p in parts)))
    out = []
    for p in parts:
        index = np.array([names.index(c) for c in p.classes], dtype=np.int64)
        out.append(Examples(p.x, index[p.y], p.source, tuple(names)))
    return out


def user_membership_data(members: Examples, nonmembers: Examples, population: Examples | None,
                         num_classes: int) -> MembershipData:
    """The membership split of the user's files (module docstring): every label checked against ``num_classes``
    and every input shape against the members'."""
    parts = _renumbered([members, nonmembers] + ([population] if population is not None else []))
    shape = parts[0].x.shape[1:]
    for field, part in zip(("--members", "--nonmembers", "--population"), parts):
        if part.x.shape[1:] != shape:
            raise ConfigError(f"{field}: {part.source}: examples of shape {part.x.shape[1:]}, the members' are {shape}")
        check_labels(f"{field}: {part.source}", part.y, len(part), num_classes)
    splits = [_split(p, offset) for p, offset in zip(parts, np.cumsum([0] + [len(p) for p in parts])[:-1])]
    pool = Split.concat(splits[:2])
    membership = torch.cat([torch.ones(len(members), dtype=torch.bool), torch.zeros(len(nonmembers), dtype=torch.bool)])
    shadow = splits[2] if population is not None else splits[1].subset(torch.zeros(0, dtype=torch.long))
    image = len(shape) == 3
    info = DatasetInfo("user", shape[0] if image else 1, shape[-1], num_classes,
                       ("grey" if shape[0] == 1 else "rgb") if image else "grey",
                       f"your files: {len(members)} members, {len(nonmembers)} non-members"
                       + (f", {len(population)} population" if population is not None else ""))
    empty = splits[1].subset(torch.zeros(0, dtype=torch.long))
    return MembershipData(info, 0, empty, shadow, pool, membership, splits[1])


def _split(examples: Examples, offset: int) -> Split:
    n = len(examples)
    return Split(torch.from_numpy(np.ascontiguousarray(examples.x)), torch.from_numpy(examples.y),
                 torch.arange(offset, offset + n, dtype=torch.int64))
