"""The worker side of the progress display (``--jobs N``): :func:`attach` (the pool's initializer) connects a
worker to the parent's queue, :class:`Tracked` reports a task's start and :class:`StageReporter` each stage; the
parent's :class:`~privaudit.audit.run.heartbeat.Heartbeat` applies them to its
:class:`~privaudit.audit.run.progress.Progress`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable
from privaudit.audit.run.progress import clock


_QUEUE: Any = None  # in a pool worker: where its events go (set by attach)


def attach(events: Any) -> None:
    """A pool worker's initializer: send this process's progress events to ``events`` (a multiprocessing queue)."""
    global _QUEUE
    _QUEUE = events


def report(task_id: str, what: str, name: str = "") -> None:
    """Send one event to the parent (nothing outside a pool worker)."""
    if _QUEUE is not None:
        _QUEUE.put((task_id, what, name, clock()))


@dataclass(frozen=True)
class StageReporter:
    """A cell's ``on_stage`` callback in a worker (picklable): reports each stage it starts."""

    task_id: str

    def __call__(self, stage: str) -> None:
        report(self.task_id, "stage", stage)


@dataclass(frozen=True)
class Tracked:
    """``fn`` as a pool task (picklable): reports its start, then runs it."""

    task_id: str
    fn: Callable[..., Any]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        report(self.task_id, "start")
        return self.fn(*args, **kwargs)
