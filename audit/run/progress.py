"""Progress a CI log can read: what runs (each cell and its stage, each side check) and an estimate of the time
left, computed from the stage times measured so far in this run.

A run is a list of tasks (cells, sensitivity claims, step audits) in the order they were submitted to ``jobs``
workers, which take them first come, first served. :class:`Progress` records when each task started, which stage it
is in and, once finished, how long each stage took, and the work that is not a task (in-process side checks). The
estimate of the time left from those records is :mod:`privaudit.audit.run.progress_estimate`'s (:meth:`Progress.
estimate` takes a :class:`~privaudit.audit.run.progress_estimate.Snapshot` of them under the lock) and the line that
says it :mod:`privaudit.audit.run.progress_line`'s (:meth:`Progress.line`).

In a worker process (``--jobs N``) the events travel through a queue (:mod:`privaudit.audit.run.progress_events`);
the parent's :class:`~privaudit.audit.run.heartbeat.Heartbeat` applies them here and prints the line at least every
``interval`` seconds when stdout is not a terminal (a terminal has tqdm's bars instead).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, Sequence, TextIO

from privaudit.audit.run import progress_line
from privaudit.audit.run.progress_estimate import SPEED_SAMPLE, Estimator, Snapshot, Task

#: The clock every process uses: system-wide on Linux and macOS, so a worker's times compare with the parent's.
clock = time.monotonic


#: Stages every cell runs before its attacks (audit/run/cell.py); the attack stages are named by their labels.
CELL_STAGES = ("train", "utility", "epsilon", "claim checks")

__all__ = ["CELL_STAGES", "SPEED_SAMPLE", "Progress", "Task", "clock", "interactive", "round_robin"]


def round_robin(items: Sequence[Any], group: Callable[[Any], str]) -> list[Any]:
    """``items`` reordered so that the first of each group comes first, then the second of each, ...: cells run
    one per defense first, so every defense is timed early and the estimate rests on each (order inside a group
    and between groups kept)."""
    by_group: dict[str, list[Any]] = {}
    for item in items:
        by_group.setdefault(group(item), []).append(item)
    rounds = max((len(v) for v in by_group.values()), default=0)
    return [members[r] for r in range(rounds) for members in by_group.values() if r < len(members)]


def interactive(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


class Progress:
    """The run's tasks and what is known of them; thread-safe (a listener thread applies workers' events)."""

    def __init__(self, jobs: int = 1, now: Callable[[], float] = clock):
        self.jobs, self.now = max(1, int(jobs)), now
        self.started = now()
        self.tasks: dict[str, Task] = {}
        self.phase: str | None = None  # work running now that is not a task (in-process side checks)
        self.untracked: list[str] = []  # such work still to come, in order ("the sensitivity checks")
        self.phase_priors: dict[str, float] = {}  # planned cost of untracked work, by name
        self.phase_started: float | None = None
        self._lock = threading.Lock()

    def plan_phase(self, name: str, prior: float | None = None) -> None:
        """Untracked work ``name`` will run after the tasks, in this process; ``prior``: its planned cost."""
        with self._lock:
            self.untracked.append(name)
            if prior is not None:
                self.phase_priors[name] = float(prior)

    def begin_phase(self, name: str | None) -> None:
        """Untracked work ``name`` starts (None: it ended); it is no longer work to come."""
        with self._lock:
            if name in self.untracked:
                self.untracked.remove(name)
            self.phase, self.phase_started = name, (None if name is None else self.now())

    def add(self, task_id: str, kind: str, group: str = "", stages: Sequence[str] = (),
            priors: dict[str, float] | None = None, measured: bool = False) -> None:
        """Register a task; ``priors``: its planned cost in seconds per stage
        (:mod:`privaudit.audit.run.stage_costs`), ``measured``: taken from an earlier run of the same task."""
        with self._lock:
            self.tasks.setdefault(task_id, Task(task_id, kind, group, tuple(stages),
                                                priors={k: float(v) for k, v in (priors or {}).items()},
                                                measured=measured))

    def start(self, task_id: str, at: float | None = None) -> None:
        with self._lock:
            task = self.tasks.get(task_id)
            if task is not None and task.started is None:
                task.started = self.now() if at is None else at

    def enter_stage(self, task_id: str, stage: str, at: float | None = None) -> None:
        """``task_id`` starts ``stage`` (and the task itself, if this is its first event)."""
        at = self.now() if at is None else at
        self.start(task_id, at)
        with self._lock:
            task = self.tasks.get(task_id)
            if task is not None:
                task.stage = stage
                task.entered[stage] = at

    def finish(self, task_id: str, stage_seconds: dict[str, float] | None = None, at: float | None = None) -> None:
        """``task_id`` is done; ``stage_seconds`` are its stages' measured durations (a cell's timings)."""
        at = self.now() if at is None else at
        self.start(task_id, at)
        with self._lock:
            task = self.tasks.get(task_id)
            if task is not None and task.finished is None:
                task.finished, task.stage = at, None
                task.stage_seconds = {k: float(v) for k, v in (stage_seconds or {}).items()
                                      if isinstance(v, (int, float))}

    def apply(self, event: tuple[str, str, str, float]) -> None:
        """A worker's event ``(task id, "start" | "stage", stage name, time)``."""
        task_id, what, name, at = event
        if what == "stage":
            self.enter_stage(task_id, name, at)
        else:
            self.start(task_id, at)

    # -- the estimate and the line ----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """What is known now (the tasks themselves: take it under the lock to read them consistently)."""
        return Snapshot(list(self.tasks.values()), self.jobs, self.now(), self.started, list(self.untracked),
                        self.phase, dict(self.phase_priors), self.phase_started)

    def speed(self, kind: str | None = None) -> float:
        """Measured over planned seconds (:meth:`~privaudit.audit.run.progress_estimate.Estimator.speed`)."""
        with self._lock:
            return Estimator(self.snapshot()).speed(kind)

    def estimate(self) -> tuple[float | None, list[str]]:
        """(predicted seconds until every task is done, or None; the kinds of task not timed yet)."""
        with self._lock:
            return Estimator(self.snapshot()).estimate()

    def running(self) -> str:
        """What runs now (:func:`privaudit.audit.run.progress_line.running`)."""
        with self._lock:
            snapshot = self.snapshot()
        return progress_line.running(snapshot)

    def line(self) -> str:
        """The progress line (:func:`privaudit.audit.run.progress_line.line`)."""
        with self._lock:
            snapshot = self.snapshot()
            estimate = Estimator(snapshot).estimate()
        return progress_line.line(snapshot, estimate)
