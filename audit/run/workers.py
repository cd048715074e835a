"""The run's worker processes (``privaudit run --jobs N``), which never outlive the run.

* **They die with it.** Each worker asks the kernel for SIGKILL when its parent dies (Linux
  ``prctl(PR_SET_PDEATHSIG, SIGKILL)``), and, on every platform, a watcher thread ends it within
  :data:`WATCH_SECONDS` once it has been re-parented (its parent is no longer the run's main process).
* **They write nothing after it.** Before each write into the output directory a worker checks that the run is
  alive (:func:`privaudit.core.io.guard_writes`), and otherwise exits at once, writing nothing.
* **They hold the run's lock.** Each worker inherits the descriptor of the output directory's lock
  (:mod:`privaudit.audit.run.lock`), so the directory stays locked until the last worker is gone, even when the main
  process was killed first.
* **They are stopped, not waited for, when the run stops early.** When the run ends by an exception (SIGTERM,
  Ctrl-C, a full disk, an error), :func:`worker_pool` terminates the workers and waits until they are gone
  before the lock is released; a normal end waits for the submitted tasks.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterator

#: How often a worker's watcher thread checks that the run's main process is still its parent (seconds).
WATCH_SECONDS = 0.5
#: How long stopping waits for a terminated worker before it kills it (seconds).
STOP_GRACE_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
#: In a worker: the output directory's lock descriptor it holds for the run (None in the main process).
HELD_LOCK_FD: int | None = None


class InheritedFd:
    """A file descriptor that a spawned worker receives as the same open file (the lock's descriptor): pickled
    while the worker is being spawned, it is passed to the child process (``multiprocessing.reduction.DupFd``)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        from multiprocessing import reduction

        return _detach, (reduction.DupFd(self.fd),)


def _detach(dup) -> int:
    return dup.detach()


@contextlib.contextmanager
def worker_pool(jobs: int, lock_fd: int | None = None, initializer: Callable[..., None] | None = None,
                initargs: tuple[Any, ...] = ()) -> Iterator[ProcessPoolExecutor]:
    """``jobs`` spawned worker processes that die with the run (module docstring), holding ``lock_fd`` (the
    output directory's lock) while they live, each running ``initializer(*initargs)`` once set up (the progress
    events' queue: :func:`privaudit.audit.run.progress_events.attach`). On a normal exit the pool waits for its tasks;
    when the block ends by an exception, the workers are terminated and reaped before the exception goes on."""
    lock = None if lock_fd is None else InheritedFd(lock_fd)
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(os.getpid(), lock, initializer, initargs))
    try:
        yield pool
    except BaseException:
        stop_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def stop_workers(pool: ProcessPoolExecutor, grace: float = STOP_GRACE_SECONDS) -> int:
    """Terminate the pool's worker processes (SIGTERM, then SIGKILL after ``grace`` seconds) and reap them;
    return how many there were. The pool's tasks fail (BrokenProcessPool) and it can only be shut down."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + grace
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()
    return len(processes)


def _init_worker(parent: int, lock: int | None, then: Callable[..., None] | None = None,
                 then_args: tuple[Any, ...] = ()) -> None:
    """Runs first in each worker: die with the run, write only while it lives, keep the lock's descriptor open
    (it is never closed here: the kernel closes it when the worker ends), then ``then(*then_args)``."""
    from privaudit.core.io import guard_writes

    global HELD_LOCK_FD
    die_with_parent(parent)
    guard_writes(parent)
    HELD_LOCK_FD = lock
    if then is not None:
        then(*then_args)


def die_with_parent(parent: int, interval: float = WATCH_SECONDS) -> None:
    """End this process when ``parent`` (the run's main process) is no longer its parent: at once by the
    kernel's parent-death signal where there is one (Linux), and within ``interval`` seconds by a watcher
    thread everywhere. Exits now if the parent already died (before the signal was armed)."""
    from privaudit.core.io import ORPHAN_EXIT

    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(ORPHAN_EXIT)
    threading.Thread(target=_watch_parent, args=(parent, interval), name="privaudit-watch-parent",
                     daemon=True).start()


def _watch_parent(parent: int, interval: float) -> None:
    from privaudit.core.io import ORPHAN_EXIT

    while os.getppid() == parent:
        time.sleep(interval)
    os._exit(ORPHAN_EXIT)
