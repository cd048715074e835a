"""One run per output directory: an advisory lock (``fcntl.flock``) on ``<out>/.privaudit.lock``.

The lock is held by the process that runs the suite for as long as it runs. Its worker processes inherit the
lock's file descriptor (:func:`privaudit.audit.run.workers.worker_pool`), and a ``flock`` lock belongs to the open
file that every copy of the descriptor shares: the kernel releases it only when the last of those processes
has closed it or died. So the directory stays locked until the last process that could write into it is
gone (kill -9 of the main process included), and a killed run never leaves a stale lock behind: ``--resume``
simply takes it again (waiting up to :data:`DEAD_OWNER_GRACE` seconds while the dead run's workers exit on
their death signal). The file holds the owner's pid for the error message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from privaudit.core.errors import ConfigError

LOCK_NAME = ".privaudit.lock"


@dataclass(frozen=True)
class HeldLock:
    """The lock file and its open descriptor (which worker processes inherit to hold the lock with the run)."""

    path: Path
    fd: int


#: seconds to wait for the workers of a run whose main process is gone (they exit on its death signal)
DEAD_OWNER_GRACE = 15.0


def _owner_alive(fd: int) -> bool:
    """Whether the pid written in the lock file is a live process (unknown or unreadable counts as alive)."""
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    if not text.isdigit():
        return True
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _acquire(fd: int) -> bool:
    """Take the exclusive lock; while its holder's main process is dead (killed) but its workers still hold the
    descriptor on their way out, retry for up to :data:`DEAD_OWNER_GRACE` seconds."""
    deadline = time.monotonic() + DEAD_OWNER_GRACE
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if _owner_alive(fd) or time.monotonic() > deadline:
                return False
            time.sleep(0.05)


@contextlib.contextmanager
def output_lock(out: Path) -> Iterator[HeldLock]:
    """Hold the output directory's lock, or raise ConfigError naming the run that holds it."""
    path = Path(out) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"--out: cannot write to the output directory {str(out)!r}: {exc.strerror}") from None
    try:
        if not _acquire(fd):
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise ConfigError(f"--out: {str(out)!r} is in use by another privaudit run (pid {owner}); wait for it "
                              "or choose another output directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield HeldLock(path, fd)
    finally:
        os.close(fd)  # releases the lock once no worker holds a copy of the descriptor
