"""What a test runs inside a spawned worker of :func:`privaudit.audit.run.workers.worker_pool`: a module of its own,
light to import (no torch), so that unpickling the task in the worker does not import a test module's imports."""

from __future__ import annotations

import os


def lock_seen_by_worker(lock_path: str) -> tuple[bool, bool]:
    """In a worker: whether it holds a descriptor of the lock file, and whether that descriptor holds the lock
    (taking it again on the same open file succeeds; any other open file would be refused)."""
    import fcntl

    from privaudit.audit.run import workers

    fd = workers.HELD_LOCK_FD
    same = fd is not None and os.path.samestat(os.fstat(fd), os.stat(lock_path))
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError unless this is the run's own open file
    return same, True
