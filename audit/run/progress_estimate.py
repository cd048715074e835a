"""The time left of a run, from what its progress knows (:class:`Snapshot`: its tasks, each's stage times measured
so far, and the untracked work to come): every unfinished task's duration is predicted from those measurements and
the queue replayed on the workers (list scheduling, Graham 1966): the time left is when the last worker would be free.

A task's prediction is the mean duration of the finished tasks of its group (a cell's defense: its cells differ by
epsilon far less than defenses differ; where the plans are an earlier run's times of the same tasks, its own plan at
the group's measured speed), else its planned cost (:mod:`privaudit.audit.run.stage_costs`) at the speed
measured so far, else the mean of its kind, counting the time the running ones have run so far
(:meth:`Estimator._mean`); a running cell whose defense has a finished cell is predicted stage by stage. Until every
kind of task still to run has one finished task the estimate names what is not timed yet instead of guessing.
:class:`privaudit.audit.run.progress.Progress` records the tasks; :mod:`privaudit.audit.run.progress_line` says it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

#: Finished tasks of a kind before their own measured-over-planned ratio replaces the ratio over every kind.
SPEED_SAMPLE = 3


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
    measured: bool = False  # the priors are this task's own times in an earlier run (stage_costs.measured_priors)

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


@dataclass(frozen=True)
class Snapshot:
    """What a run's progress knows at ``now``: its tasks (in submission order), its workers, when it started, and
    the work that is not a task (in this process, after the tasks): still to come (``untracked``), running
    (``phase``, since ``phase_started``) and the planned cost of each (``phase_priors``)."""

    tasks: Sequence[Task]
    jobs: int
    now: float
    started: float
    untracked: Sequence[str] = ()
    phase: str | None = None
    phase_priors: Mapping[str, float] = field(default_factory=dict)
    phase_started: float | None = None


class Estimator:
    """The time left of a :class:`Snapshot` (module docstring)."""

    def __init__(self, snapshot: Snapshot):
        self.snapshot, self.jobs = snapshot, snapshot.jobs
        self.tasks = {t.id: t for t in snapshot.tasks}

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
            return self._scaled(task, same)
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

    @staticmethod
    def _scaled(task: Task, same: Sequence[Task]) -> float:
        """The finished tasks of ``task``'s group: where every plan involved is a measured one (an earlier run's times
        of these very tasks), their measured over planned seconds applied to ``task``'s own plan, so two cells of one
        defense that took different times keep their difference; else their mean duration (planned costs are
        the same for a defense's cells, and only proportional)."""
        total = sum(t.seconds for t in same)
        if task.prior and task.measured and all(t.prior and t.measured for t in same):
            return task.prior * total / sum(t.prior for t in same)
        return total / len(same)

    def _stage_left(self, task: Task, now: float) -> float | None:
        """What a running cell still needs by its stages, from the finished cells of its defense: the rest of the
        current stage and the stages after it (None: no such cell finished, or no stage reported)."""
        same = self._finished(task.kind, task.group) if task.group else []
        if task.stage not in task.stages or task.stage_started is None or not (same or task.priors):
            return None
        if same:
            means = [self._stage_scaled(task, same, s) for s in task.stages]
        else:  # no cell of its defense finished: its stage priors at the measured speed
            speed = self.speed(task.kind)
            means = [task.priors.get(s, 0.0) * speed for s in task.stages]
        i = task.stages.index(task.stage)
        return max(means[i] - (now - task.stage_started), 0.1 * means[i]) + sum(means[i + 1:])

    @staticmethod
    def _stage_scaled(task: Task, same: Sequence[Task], stage: str) -> float:
        """The mean of ``stage`` over the finished tasks of the group, scaled to ``task``'s plan of it as
        :meth:`_scaled` does for the whole task."""
        total = sum(t.stage_seconds.get(stage, 0.0) for t in same)
        planned = [t.priors.get(stage) for t in same]
        own = task.priors.get(stage)
        if task.measured and all(t.measured for t in same) and own and all(planned):
            return own * total / sum(planned)
        return total / len(same)

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
        now = self.snapshot.now
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
        s, speed = self.snapshot, self.speed()
        left = [s.phase_priors[n] * speed for n in s.untracked if n in s.phase_priors]
        if s.phase in s.phase_priors and s.phase_started is not None:
            total = s.phase_priors[s.phase] * speed
            left.append(max(total - (now - s.phase_started), 0.1 * total))
        return sum(left) if left else None
