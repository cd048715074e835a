"""One run per output directory: an advisory lock (``fcntl.flock``) on ``<out>/.privaudit.lock``.

The lock is held by the process that runs the suite for as long as it runs; its worker processes (the local
executor's threads, Ray tasks) write only inside cell directories the runner assigned them and never take it.
The kernel releases the lock when the process dies (kill -9 included), so a killed run never leaves a stale
lock behind; ``--resume`` simply takes it again. The file holds the owner's pid for the error message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from privaudit.core.errors import ConfigError

LOCK_NAME = ".privaudit.lock"


@contextlib.contextmanager
def output_lock(out: Path) -> Iterator[Path]:
    """Hold the output directory's lock, or raise ConfigError naming the run that holds it."""
    path = Path(out) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"--out: cannot write to the output directory {str(out)!r}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise ConfigError(f"--out: {str(out)!r} is in use by another privaudit run (pid {owner}); wait for it "
                              "or choose another output directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock
