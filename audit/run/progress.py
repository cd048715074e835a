"""Progress a CI log can read: what runs (each cell and its stage, each side check) and an estimate of the time
left, computed from the stage times measured so far in this run.

A run is a list of tasks (cells, sensitivity claims, step audits) in the order they were submitted to ``jobs``
workers, which take them first come, first served. :class:`Progress` records when each task started, which stage it
is in and, once finished, how long each stage took; :meth:`Progress.estimate` predicts every unfinished task's
duration from those measurements and replays the queue on the workers (list scheduling, Graham 1966): the time
left is when the last worker would be free. A task's prediction is the mean duration of the finished tasks of its
group (a cell's defense: its cells differ by epsilon far less than defenses differ), else of its kind, counting the
time the running ones have run so far (:meth:`Progress._mean`); a running cell whose defense has a finished cell is
predicted stage by stage. Until every kind of task still to run has one finished task the line says what is not
timed yet instead of guessing.

In a worker process (``--jobs N``) the events travel through a queue (:mod:`privaudit.audit.run.progress_events`);
the parent's :class:`~privaudit.audit.run.heartbeat.Heartbeat` applies them here and prints the line at least every
``interval`` seconds when stdout is not a terminal (a terminal has tqdm's bars instead).
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TextIO

#: The clock every process uses: system-wide on Linux and macOS, so a worker's times compare with the parent's.
clock = time.monotonic


#: Stages every cell runs before its attacks (audit/run/cell.py); the attack stages are named by their labels.
CELL_STAGES = ("train", "utility", "epsilon", "claim checks")

#: Finished tasks of a kind before their own measured-over-planned ratio replaces the ratio over every kind.
SPEED_SAMPLE = 3

KIND_NAMES = {"cell": ("cell", "cells"), "sensitivity": ("sensitivity claim", "sensitivity claims"),
              "step audit": ("step audit", "step audits")}


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


@dataclass
class Task:
    """One unit of work: a cell (``group``: its defense, ``stages``: the stages it will run) or a side check."""

    id: str
    kind: str
    group: str = ""
    stages: tuple[str, ...] = ()
    started: float | None = None
    stage: str | None = None
    entered: dict[str, float] = field(default_factory=dict)  # when each stage started
    finished: float | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)  # measured by the cell itself, once finished
    priors: dict[str, float] = field(default_factory=dict)  # planned cost per stage (a side check: one entry)

    @property
    def prior(self) -> float | None:
        """The planned cost (the sum of the stage priors; None without any)."""
        return sum(self.priors.values()) if self.priors else None

    @property
    def stage_started(self) -> float | None:
        return None if self.stage is None else self.entered.get(self.stage)

    @property
    def train_seconds(self) -> float | None:
        """How long the cell trained: measured once finished, else from its stage events once past training."""
        if self.stage_seconds:
            return self.stage_seconds.get("train")
        start = self.entered.get("train")
        later = [t for t in self.entered.values() if start is not None and t > start]
        return min(later) - start if later else None

    @property
    def seconds(self) -> float | None:
        """The measured duration of a finished task (its stages' sum when they were measured)."""
        if self.stage_seconds:
            return sum(v for k, v in self.stage_seconds.items() if "." not in k)
        if self.started is not None and self.finished is not None:
            return self.finished - self.started
        return None


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
            priors: dict[str, float] | None = None) -> None:
        """Register a task; ``priors``: its planned cost in seconds per stage
        (:mod:`privaudit.audit.run.stage_costs`)."""
        with self._lock:
            self.tasks.setdefault(task_id, Task(task_id, kind, group, tuple(stages),
                                                priors={k: float(v) for k, v in (priors or {}).items()}))

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

    # -- the estimate --------------------------------------------------------------------------------------------

    def _finished(self, kind: str, group: str | None = None) -> list[Task]:
        return [t for t in self.tasks.values() if t.kind == kind and t.finished is not None and t.seconds is not None
                and (group is None or t.group == group)]

    def _mean(self, kind: str, now: float) -> float | None:
        """The mean duration of ``kind``'s tasks: the finished ones, and each running one that has run more than
        half that mean counted at twice its time so far (a task seen at a random moment of its run is half done on
        average), so a long task still running raises the estimate before it finishes."""
        done = [t.seconds for t in self._finished(kind)]
        if not done:
            return None
        mean = sum(done) / len(done)
        longer = [2 * (now - t.started) for t in self.tasks.values() if t.kind == kind and t.finished is None
                  and t.started is not None and 2 * (now - t.started) > mean]
        return (sum(done) + sum(longer)) / (len(done) + len(longer))

    def speed(self, kind: str | None = None) -> float:
        """Measured over planned seconds of the finished tasks that have priors: of ``kind`` once
        :data:`SPEED_SAMPLE` of them have finished, else of every kind (the machine's speed against the priors; one
        cheap task of a kind, such as a non-private cell, would otherwise set the speed of all the others), else 1
        (the priors as they are)."""
        done = [t for t in self.tasks.values() if t.finished is not None and t.prior and t.seconds is not None]
        same = [t for t in done if t.kind == kind]
        pool = same if len(same) >= SPEED_SAMPLE else done
        return sum(t.seconds for t in pool) / sum(t.prior for t in pool) if pool else 1.0

    def _train_ratio(self) -> float | None:
        """The finished cells' mean ratio of whole cell to training time: the attacks train reference models with
        the cell's own defense, so a cell costs a multiple of its training."""
        ratios = [t.seconds / t.train_seconds for t in self._finished("cell") if t.train_seconds]
        return sum(ratios) / len(ratios) if ratios else None

    def _cell_size(self, task: Task, now: float) -> float | None:
        """A started cell's predicted duration from its own training time (None while it trains)."""
        if task.finished is not None:
            return task.seconds
        ratio, train = self._train_ratio(), task.train_seconds
        if ratio is None or train is None or task.started is None:
            return None
        return max(ratio * train, now - task.started)

    def predicted(self, task: Task, now: float) -> float | None:
        """The predicted duration of ``task`` (None: nothing of its kind has finished yet): the mean of the finished
        tasks of its group (a cell's defense); for a cell of a defense not timed yet, its own training time times
        the cells' ratio once it has trained, else the mean of what is known of the started cells; for a side
        check, the mean of its kind (:meth:`_mean`)."""
        same = self._finished(task.kind, task.group) if task.group else []
        if same:
            return sum(t.seconds for t in same) / len(same)
        if task.prior is not None:
            return task.prior * self.speed(task.kind)
        if task.kind != "cell":
            return self._mean(task.kind, now)
        if not self._finished("cell"):
            return None
        own = self._cell_size(task, now)
        if own is not None:
            return own
        sizes = [self._cell_size(t, now) for t in self.tasks.values() if t.kind == "cell" and t.started is not None]
        known = [x for x in sizes if x is not None]
        return sum(known) / len(known)

    def _stage_left(self, task: Task, now: float) -> float | None:
        """What a running cell still needs by its stages, from the finished cells of its defense: the rest of the
        current stage and the stages after it (None: no such cell finished, or no stage reported)."""
        same = self._finished(task.kind, task.group) if task.group else []
        if task.stage not in task.stages or task.stage_started is None or not (same or task.priors):
            return None
        if same:
            means = [sum(t.stage_seconds.get(s, 0.0) for t in same) / len(same) for s in task.stages]
        else:  # no cell of its defense finished: its stage priors at the measured speed
            speed = self.speed(task.kind)
            means = [task.priors.get(s, 0.0) * speed for s in task.stages]
        i = task.stages.index(task.stage)
        return max(means[i] - (now - task.stage_started), 0.1 * means[i]) + sum(means[i + 1:])

    def remaining(self, task: Task, now: float) -> float | None:
        """Predicted seconds ``task`` still needs (a running one: what is left of its current stage and the rest)."""
        if task.finished is not None:
            return 0.0
        if task.started is not None:
            by_stage = self._stage_left(task, now)
            if by_stage is not None:
                return by_stage
        total = self.predicted(task, now)
        if total is None or task.started is None:
            return total
        return max(total - (now - task.started), 0.1 * total)

    def estimate(self) -> tuple[float | None, list[str]]:
        """(predicted seconds until every task is done, or None; the kinds of task not timed yet)."""
        with self._lock:
            now = self.now()
            unknown: list[str] = []
            free = [0.0] * self.jobs
            running = [t for t in self.tasks.values() if t.finished is None and t.started is not None]
            waiting = [t for t in self.tasks.values() if t.finished is None and t.started is None]
            for task in running + waiting:  # running first, then the queue in submission order
                left = self.remaining(task, now)
                if left is None:
                    if task.kind not in unknown:
                        unknown.append(task.kind)
                    continue
                i = min(range(self.jobs), key=free.__getitem__)
                free[i] += left
            if unknown:
                return None, unknown
            after = self._phases_left(now)
            if not running and not waiting and after is None:
                return 0.0, []
            return max(free) + (after or 0.0), []

    def _phases_left(self, now: float) -> float | None:
        """Planned seconds of the untracked work still to come or running (None: none has a prior), at the measured
        speed; it runs after the tasks, in this process."""
        speed = self.speed()
        left = [self.phase_priors[n] * speed for n in self.untracked if n in self.phase_priors]
        if self.phase in self.phase_priors and self.phase_started is not None:
            total = self.phase_priors[self.phase] * speed
            left.append(max(total - (now - self.phase_started), 0.1 * total))
        return sum(left) if left else None

    # -- what to print -------------------------------------------------------------------------------------------

    def counts(self) -> str:
        """``3/13 cells, 15/15 sensitivity claims done`` for the kinds this run has."""
        parts = []
        for kind, (one, many) in KIND_NAMES.items():
            tasks = [t for t in self.tasks.values() if t.kind == kind]
            if tasks:
                done = sum(t.finished is not None for t in tasks)
                parts.append(f"{done}/{len(tasks)} {many if len(tasks) != 1 else one}")
        return ", ".join(parts) + " done" if parts else "starting"

    def running(self) -> str:
        """What runs now: each started task, its stage and for how long; then how many wait."""
        now = self.now()
        with self._lock:
            tasks = list(self.tasks.values())
        active = [t for t in tasks if t.started is not None and t.finished is None]
        parts = []
        for t in active:
            label = KIND_NAMES.get(t.kind, (t.kind,))[0]
            name = t.id if t.kind == "cell" else f"{label} {t.id.removeprefix(t.kind + ' ')}"
            if t.stage is not None and t.stage_started is not None:
                parts.append(f"{name}: {t.stage} ({now - t.stage_started:.0f}s)")
            else:
                parts.append(f"{name} ({now - t.started:.0f}s)")
        if self.phase:
            parts.append(self.phase)
        waiting = sum(t.started is None for t in tasks)
        text = "running " + ", ".join(parts) if parts else "waiting for a worker"
        return text + (f"; {waiting} waiting" if waiting else "")

    def line(self) -> str:
        elapsed = self.now() - self.started
        text = f"[privaudit +{elapsed:.0f}s] {self.counts()}; {self.running()}"
        left, unknown = self.estimate()
        later = _and([n for n in self.untracked if n not in self.phase_priors])
        if unknown:
            text += f"; time left: estimated once {_and([f'a {KIND_NAMES.get(k, (k,))[0]}' for k in unknown])} " \
                    f"{'has' if len(unknown) == 1 else 'have'} finished"
        elif left is not None and (left > 0 or not ((self.phase and self.phase not in self.phase_priors) or later)):
            text += f"; about {left:.0f}s left" + (f", then {later} (not timed)" if later else "")
        elif later:
            text += f"; then {later} (not timed)"
        return text


def _and(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(items) if len(items) < 3 else f"{', '.join(items[:-1])} and {items[-1]}"
