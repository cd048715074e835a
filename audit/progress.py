"""Progress a CI log can read: when stdout is not a terminal (no progress bars), a heartbeat line at least
every ``interval`` seconds with what is running, elapsed time and an estimate of what is left."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


def interactive(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


class Heartbeat:
    """A daemon thread printing ``[privaudit +Ns] <status>`` every ``interval`` seconds while active.

    ``status`` is set by the runner as cells and stages start; ``done``/``total`` give the estimate (mean time
    per finished cell times the cells left, divided by the parallel jobs). Silent on a terminal, where tqdm's
    bars already show progress, and when ``enabled`` is false (``--quiet``).
    """

    def __init__(self, *, total: int, jobs: int = 1, interval: float = 20.0, enabled: bool = True,
                 stream: TextIO | None = None):
        self.stream = stream or sys.stdout
        self.enabled = enabled and not interactive(self.stream)
        self.total, self.jobs, self.interval = total, max(1, jobs), interval
        self.done = 0
        self.status = "starting"
        self.started = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def line(self) -> str:
        elapsed = time.perf_counter() - self.started
        text = f"[privaudit +{elapsed:.0f}s] {self.done}/{self.total} cells done; {self.status}"
        if 0 < self.done < self.total:
            left = elapsed / self.done * (self.total - self.done)
            text += f"; about {left:.0f}s left for the cells"
        return text

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            print(self.line(), file=self.stream, flush=True)

    def __enter__(self) -> "Heartbeat":
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
