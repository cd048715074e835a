"""An output directory the user may share with their own files: privaudit replaces only what it wrote there.

Every file privaudit writes into ``--out`` is listed, with its SHA-256, in ``.privaudit-manifest.json`` in that
directory. Before any work, :func:`prepare` checks that the directory can be written (it is not a file, not
under a file, writable, its disk has room for what the audit writes) and that each file about to be written is
either absent or one the manifest lists with its current content (privaudit wrote it and nobody changed it
since); any other existing file is the user's, and the run stops with one line unless ``force``. :func:`write`
then writes every file atomically, all or nothing (:func:`privaudit.core.io.atomic_write_group`), and records
them in the manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Mapping, Sequence, Union

from privaudit.core.errors import ConfigError
from privaudit.core.io import atomic_write_group, atomic_write_json, check_output_dir

MANIFEST = ".privaudit-manifest.json"
Content = Union[bytes, memoryview]
#: Room for the report itself (JSON, Markdown, HTML with its figures, two PNGs) beyond the saved scores.
REPORT_BYTES = 8 << 20


def read_manifest(out: Path) -> dict[str, str]:
    """File name (relative to ``out``) -> SHA-256 of what privaudit last wrote there (empty when none)."""
    path = out / MANIFEST
    if not path.is_file():
        return {}
    try:
        files = json.loads(path.read_text(encoding="utf-8")).get("files", {})
    except (ValueError, OSError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def input_bytes(*sources: object) -> int:
    """Bytes of the inputs that are files or arrays (directories and other values count 0): what the saved
    scores of an audit of them can take, up to a factor 2 (float32 read, float64 saved; CSV digits)."""
    total = 0
    for source in sources:
        if isinstance(source, (str, os.PathLike)) and os.path.isfile(source):
            total += os.path.getsize(source)
        else:
            total += int(getattr(source, "nbytes", 0))
    return total


def check_space(out: Path, need: int, field: str = "--out") -> None:
    """A one-line ConfigError, before any work, when the disk that will hold ``out`` has less than ``need`` bytes
    free (a full disk would otherwise fail only at the end, after the work)."""
    probe = out
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        raise ConfigError(f"{field}: {str(out)!r} has {free / 1e6:.1f} MB free on its disk; this audit writes up to "
                          f"{need / 1e6:.1f} MB (free some space or choose another --out)")


def prepare(out: str | Path, names: Sequence[str], *, force: bool = False, field: str = "--out",
            need: int = REPORT_BYTES) -> Path:
    """Check, before any work, that ``names`` (about ``need`` bytes in all) can be written into ``out`` (module
    docstring); creates nothing."""
    out = check_output_dir(out, field)
    check_space(out, need, field)
    if force or not out.is_dir():
        return out
    from privaudit.audit.run.cache import file_sha256
    ours = read_manifest(out)
    for name in (*names, MANIFEST):
        path = out / name
        if not (path.exists() or path.is_symlink()):
            continue
        if path.is_dir() or path.is_symlink():
            raise ConfigError(f"{field}: {str(path)!r} exists and is not a file privaudit wrote; remove it or "
                              "pass --force")
        if name == MANIFEST:
            continue
        if ours.get(name) != file_sha256(path):
            what = "changed since privaudit wrote it" if name in ours else "was not written by privaudit"
            raise ConfigError(f"{field}: {str(path)!r} exists and {what}; pass --force to overwrite it, or choose "
                              "another --out")
    return out


def write(out: str | Path, files: Mapping[str, Content]) -> dict[str, Path]:
    """Write ``files`` (name relative to ``out`` -> content) all or nothing, then record them in the manifest."""
    out = Path(out)
    paths = atomic_write_group({out / name: data for name, data in files.items()})
    listed = read_manifest(out)
    listed.update({name: hashlib.sha256(data).hexdigest() for name, data in files.items()})
    atomic_write_json(out / MANIFEST, {"written_by": "privaudit", "files": dict(sorted(listed.items()))})
    return dict(zip(files, paths))
