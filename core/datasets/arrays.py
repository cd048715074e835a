"""Arrays from a user's files, checked before anything large is allocated: ``.npy``, ``.npz`` and CSV.

* ``.npy`` / ``.npz``: the array header (shape, dtype) is read first and checked against the bytes the file
  (or the zip entry) actually holds, so a header claiming 10^12 rows is one line of error, not an
  allocation; object arrays are refused (no pickle); a corrupt zip is one line.
* CSV: read as UTF-8 with or without a byte-order mark (``utf-8-sig``: a BOM is not part of the first
  field), streamed row by row into a float array (8 bytes a value), every field at most
  :data:`MAX_FIELD` characters; a header row is recognised by a first field that is not a number.

Every problem is a :class:`privaudit.core.errors.ConfigError` naming the file (and the field, row or key).
"""

from __future__ import annotations

import array
import csv
import zipfile
import zlib
from pathlib import Path
from typing import IO

import numpy as np

from privaudit.core.errors import ConfigError

#: Values one array may hold (8 GB of float32 at most): a header claiming more is refused before loading.
MAX_VALUES = 2_000_000_000
#: Characters of one CSV field: a number, a label or a column name never needs more.
MAX_FIELD = 1000


def _header(handle: IO[bytes], where: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, header bytes) of the .npy stream ``handle``; a ConfigError naming ``where`` if unreadable."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(handle)
        reader = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(version)
        if reader is None:
            raise ValueError(f"unsupported .npy version {version}")
        shape, _, dtype = reader(handle, max_header_size=100_000)
    except (ValueError, OSError, EOFError) as exc:
        raise ConfigError(f"{where}: not a readable .npy array ({exc})") from None
    if dtype.hasobject:
        raise ConfigError(f"{where}: holds Python objects (dtype {dtype}); save numbers (no pickle is loaded)")
    return tuple(int(d) for d in shape), dtype, handle.tell()


def _check_size(where: str, shape: tuple[int, ...], dtype: np.dtype, available: int) -> None:
    values = int(np.prod(shape, dtype=object)) if shape else 1
    if values > MAX_VALUES:
        raise ConfigError(f"{where}: the header claims shape {shape} ({values:.3g} values), more than the "
                          f"{MAX_VALUES:.0e} one array may hold")
    if values * dtype.itemsize != available:
        raise ConfigError(f"{where}: the header claims shape {shape} of {dtype} ({values * dtype.itemsize} bytes) "
                          f"but the file holds {available} bytes of data (truncated or not a .npy file)")


def read_npy(path: str | Path) -> np.ndarray:
    """The array in ``path``, its header checked against the file size before it is loaded."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            shape, dtype, start = _header(handle, str(path))
            _check_size(str(path), shape, dtype, path.stat().st_size - start)
            return np.load(path, allow_pickle=False)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Every array in the ``.npz`` at ``path`` (key -> array), each header checked against its zip entry first."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            entries = [i for i in archive.infolist() if not i.is_dir()]
            for info in entries:
                where = f"{path}[{info.filename.removesuffix('.npy')}]"
                with archive.open(info) as handle:
                    shape, dtype, start = _header(handle, where)
                _check_size(where, shape, dtype, info.file_size - start)
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable .npz file ({type(exc).__name__}: {exc})") from None


def read_csv(path: str | Path, *, text_column: str | None = None) -> tuple[list[str] | None, np.ndarray]:
    """(header or None, a (rows, columns) float64 array) of the CSV at ``path``.

    The header, when there is one, is lower-cased and stripped. ``text_column``: the name of a column whose
    non-numeric values get their own message (labels must be class indices).
    """
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            return _parse_csv(csv.reader(handle), str(path), text_column)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a UTF-8 text file ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise ConfigError(f"{path}: not a readable CSV file ({exc})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _parse_csv(reader, where: str, text_column: str | None) -> tuple[list[str] | None, np.ndarray]:
    header: list[str] | None = None
    values = array.array("d")
    width = rows = 0
    for row in _rows(reader, where):
        if not row or not any(c.strip() for c in row):
            continue
        long = next((c for c in row if len(c) > MAX_FIELD), None)
        if long is not None:
            raise ConfigError(f"{where}: line {reader.line_num}: a field longer than {MAX_FIELD} characters "
                              f"({len(long)})")
        if rows == 0 and header is None and not _is_number(row[0]):
            header = [c.strip().lower() for c in row]
            width = len(header)
            continue
        width = width or len(row)
        if len(row) != width:
            raise ConfigError(f"{where}: line {reader.line_num}: {len(row)} fields, expected {width}")
        values.extend(_numbers(row, where, reader.line_num, header, text_column))
        rows += 1
    if rows == 0:
        raise ConfigError(f"{where}: no data rows (needs at least one example)")
    return header, np.array(values, dtype=np.float64).reshape(rows, width)


def _rows(reader, where: str):
    """The reader's rows; its own field limit (131072 characters) reported like ours, with the line."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ConfigError(f"{where}: line {reader.line_num}: a field longer than the CSV reader's limit "
                              f"(at most {MAX_FIELD} characters; {exc})") from None
        yield row


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _numbers(row: list[str], where: str, line: int, header: list[str] | None,
             text_column: str | None) -> list[float]:
    try:
        return [float(c) for c in row]
    except ValueError:
        j = next(j for j, c in enumerate(row) if not _is_number(c))
        name = header[j] if header else f"column {j + 1}"
        if text_column is not None and name == text_column:
            raise ConfigError(f"{where}: line {line}: label {row[j].strip()!r} is not a number; labels must be integer "
                              "class indices 0..C-1 in the model's logit order") from None
        raise ConfigError(f"{where}: line {line}: {name}: {row[j].strip()[:40]!r} is not a number") from None


def read_torch(path: str | Path, field: str):
    """What ``torch.save`` wrote to ``path``, loaded with ``weights_only=True`` (tensors, numbers, strings, lists,
    dicts: no code runs); anything else -- not a zip archive, a foreign pickle -- is one line naming ``field``."""
    import pickle

    import torch

    path = Path(path)
    if not zipfile.is_zipfile(path):
        raise ConfigError(f"{field}: {path}: not a readable file of torch.save (expected its zip archive)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, ValueError, OSError, EOFError, KeyError, IndexError, pickle.UnpicklingError,
            zipfile.BadZipFile) as exc:
        detail = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ConfigError(f"{field}: {path}: not a readable file of torch.save ({type(exc).__name__}: {detail})") \
            from None
