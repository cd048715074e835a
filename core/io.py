"""Atomic file writes and safe checkpoint I/O.

Every artifact privaudit writes goes through here: data are written to a temporary file in the
destination directory, flushed and fsynced, then moved into place with ``os.replace`` (atomic on
POSIX). A run killed at any moment leaves either the old file or the new one, never a torn one.
Checkpoints are safetensors (no code executed on load).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from privaudit.core.errors import NO_SPACE, DiskFull

if TYPE_CHECKING:  # torch is imported by whoever hands us tensors; JSON-only callers (the accountant CLI) stay light
    import torch


#: Every temporary file privaudit writes is named ``.<target>.privaudit-tmp-<random>.tmp``; a killed run's leftovers
#: are removed by matching :data:`TEMP_GLOB`, which no file the tool did not create is meant to match.
TEMP_MARK = "privaudit-tmp-"
TEMP_GLOB = f".*.{TEMP_MARK}*.tmp"


def check_output_path(path: str | os.PathLike[str], field: str = "--out") -> Path:
    """``path`` as a Path, or a one-line ConfigError naming ``field`` when it is empty (or blank): an empty path
    would be the current directory, which is never what an empty setting means."""
    from privaudit.core.errors import ConfigError

    if not str(os.fspath(path)).strip():
        raise ConfigError(f"{field}: must be a directory path, got {os.fspath(path)!r} (to write into the current "
                          "directory, say '.')")
    return Path(path)


def check_output_dir(path: str | os.PathLike[str], field: str = "--out") -> Path:
    """Fail early (a one-line ConfigError naming ``field``) when ``path`` cannot be an output directory: it is a
    file, it is not writable, or it does not exist and cannot be created (a parent is a file or read-only).
    Creates nothing; called before any training starts so that a bad ``--out`` loses no work."""
    from privaudit.core.errors import ConfigError

    path = check_output_path(path, field)
    shown = str(path) or "."
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{field}: {shown!r} exists and is not a directory")
    probe = path
    while not probe.exists():
        if probe.is_symlink():
            raise ConfigError(f"{field}: {shown!r} is a dangling symbolic link")
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"{field}: {shown!r} cannot be created: {str(probe)!r} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == path else f"cannot be created: {str(probe)!r} is not writable"
        raise ConfigError(f"{field}: {shown!r} {what}")
    try:  # permissions are not the whole story (a read-only mount, root): try it with one of our temporaries
        fd, tmp = tempfile.mkstemp(prefix=f".probe.{TEMP_MARK}", suffix=".tmp", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        what = "is not writable" if probe == path else f"cannot be created: {str(probe)!r} is not writable"
        raise ConfigError(f"{field}: {shown!r} {what} ({exc.strerror or exc})") from None
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file in the same directory + ``os.replace``).

    The file gets the permissions an ordinary ``open(path, "w")`` would give it (0666 less the umask),
    not the owner-only mode of the temporary file.
    """
    return atomic_write_group({path: data})[0]


def atomic_write_group(files: Mapping[str | os.PathLike[str], bytes]) -> list[Path]:
    """Write several files all-or-nothing: every one goes to its own temporary file (fsynced) first; only when
    all are written are they moved into place. If any write fails (a full disk, a read-only directory), the
    temporaries are removed, no destination is touched, and the ``OSError`` propagates -- as
    :class:`~privaudit.core.errors.DiskFull` when no space was left (ENOSPC, EDQUOT).

    The final renames are metadata operations in directories just written to; a crash between two of them
    leaves some files new and the rest old, never a torn file. In a worker process (:func:`guard_writes`) the
    worker first checks that its run is alive, before it creates a temporary file and again before it renames."""
    targets = [Path(target) for target in files]
    check_writer()
    staged: list[tuple[str, Path]] = []
    current = None  # the file being written or moved into place
    try:
        for current, data in zip(targets, files.values()):
            staged.append((_stage(current, data), current))
        check_writer()
        while staged:
            tmp, current = staged[0]
            os.replace(tmp, current)
            staged.pop(0)
    except BaseException as exc:
        for tmp, _ in staged:
            _discard(tmp)
        if isinstance(exc, OSError) and exc.errno in NO_SPACE:
            raise DiskFull(str(current), exc.strerror or os.strerror(exc.errno)) from None
        raise
    return targets


def _stage(path: Path, data: bytes) -> str:
    """Write ``data`` to a new temporary file beside ``path`` (permissions of an ordinary new file, flushed and
    fsynced); return its name. Nothing is left behind when this fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{TEMP_MARK}", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        _discard(tmp)
        raise
    return tmp


def _discard(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


#: The run's main process, in a worker process of the run (:func:`guard_writes`); None elsewhere.
_RUN_PARENT: int | None = None
#: How an orphaned worker ends (128 + SIGTERM, as if it had been terminated with its run).
ORPHAN_EXIT = 143


def guard_writes(parent: int) -> None:
    """Make this process (a worker of the run whose main process is ``parent``) check before every write that
    the run is still alive (:func:`check_writer`): a worker never writes into the output directory after the
    run that owns it (and its lock) has died."""
    global _RUN_PARENT
    _RUN_PARENT = parent


def check_writer() -> None:
    """In a guarded worker (:func:`guard_writes`) whose run has died (its parent is no longer the run's main
    process: it was re-parented), end the process at once, writing nothing and running no cleanup."""
    if _RUN_PARENT is not None and os.getppid() != _RUN_PARENT:
        os._exit(ORPHAN_EXIT)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if type(obj).__module__.startswith("torch") and hasattr(obj, "detach"):  # a torch.Tensor
        return obj.detach().cpu().tolist()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def to_json(obj: Any, *, indent: int | None = 2) -> str:
    """Serialise ``obj`` to JSON; numpy/torch scalars and arrays become plain numbers and lists.

    Non-finite floats are written as ``Infinity``/``NaN`` (Python's JSON dialect); reports that must
    be strict JSON convert them to ``null`` before calling this.
    """
    return json.dumps(obj, indent=indent, default=_json_default, sort_keys=False)


def strict(obj: Any) -> Any:
    """A JSON-safe copy: non-finite floats become None, tuples lists, numpy scalars plain numbers."""
    return _sanitize(json.loads(to_json(obj, indent=None)))


def _sanitize(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k: _sanitize(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_sanitize(v) for v in obj]
    return obj


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically."""
    return atomic_write_text(path, to_json(obj) + "\n")


def nesting_depth(value: Any, limit: int) -> int:
    """Nesting depth of objects (dicts) and arrays (lists) in parsed data, counted without recursion (so a
    hostile file cannot exhaust the stack), stopping once past ``limit``."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            break
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children)
    return deepest


def read_json(path: str | os.PathLike[str]) -> Any:
    """Read a JSON file."""
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def atomic_save_tensors(path: str | os.PathLike[str], tensors: Mapping[str, torch.Tensor],
                        metadata: Mapping[str, str] | None = None) -> Path:
    """Save named tensors as safetensors, atomically. Tensors are made contiguous and moved to CPU."""
    from safetensors.torch import save

    flat = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
    return atomic_write_bytes(path, save(flat, metadata=dict(metadata) if metadata else None))


def load_tensors(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Load a safetensors file (no code is executed)."""
    from safetensors.torch import load_file

    return load_file(str(path), device=str(device))


def atomic_save_npz(path: str | os.PathLike[str], **arrays: np.ndarray) -> Path:
    """Save numpy arrays to a compressed ``.npz`` atomically (loaded back with ``allow_pickle=False``)."""
    import io

    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{k: np.asarray(v) for k, v in arrays.items()})
    return atomic_write_bytes(path, buffer.getvalue())


def load_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Load a ``.npz`` written by :func:`atomic_save_npz`, refusing pickled objects."""
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}
