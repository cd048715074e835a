"""The parent side of the progress display: :class:`Heartbeat` prints ``[privaudit +Ns] ...`` at least every
:data:`INTERVAL` seconds when stdout is not a terminal (a terminal has tqdm's bars instead), and applies the
workers' events (:mod:`privaudit.audit.run.progress_events`) to the run's
:class:`~privaudit.audit.run.progress.Progress`.
"""

from __future__ import annotations

import queue as queue_module
import sys
import threading
from typing import Any, Callable, TextIO
from privaudit.audit.run.progress import Progress, interactive


#: Seconds between two progress lines in a CI log.
INTERVAL = 20.0


class Heartbeat:
    """Prints ``[privaudit +Ns] <progress line>`` every ``interval`` seconds while active, and applies the workers'
    events from :attr:`events` (created on first use, for a pool's initializer) to :attr:`progress`.

    Silent on a terminal, where tqdm's bars already show progress, and when ``enabled`` is false (``--quiet``); the
    events are read either way (the progress is also what the runner's bar shows).
    """

    def __init__(self, progress: Progress, *, interval: float | None = None, enabled: bool = True,
                 stream: TextIO | None = None):
        self.progress = progress
        self.stream = stream or sys.stdout
        self.enabled = enabled and not interactive(self.stream)
        self.interval = INTERVAL if interval is None else interval
        self._events: Any = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def events(self) -> Any:
        """The queue pool workers report to (a spawn-context multiprocessing queue)."""
        if self._events is None:
            import multiprocessing

            self._events = multiprocessing.get_context("spawn").Queue()
            self._start(self._listen)
        return self._events

    def line(self) -> str:
        return self.progress.line()

    def _print(self) -> None:
        while not self._stop.wait(self.interval):
            print(self.line(), file=self.stream, flush=True)

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                self.progress.apply(self._events.get(timeout=0.5))
            except queue_module.Empty:
                continue
            except (EOFError, OSError, ValueError):  # the queue was closed under us: the run is ending
                return

    def _start(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        self._threads.append(thread)

    def __enter__(self) -> "Heartbeat":
        if self.enabled:
            self._start(self._print)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2.0)
