"""The progress line: it names what runs (cell and stage, side checks), and its estimate of the time left, made
from the stage times measured so far, is within a factor 2 of the truth from the first finished cell on.

The schedule replayed here is the quickstart's (sensitivity claims and step audits submitted first, then the cells,
one per defense first, as the runner submits them) on 1 to 4 workers, with stage times of the shape a run measures: the estimator sees only what a run would see (starts,
stage entries, finishes with their stage seconds) at each moment of a fake clock.
"""

from __future__ import annotations

import heapq

import pytest

from privaudit.audit.run.progress import CELL_STAGES, Progress, round_robin

# (defense, stage seconds) per cell in the suite's order; the two epsilons of one defense differ, as they do.
CELLS = [
    ("supervised", {"train": 3.1, "utility": 0.2, "epsilon": 0.0, "loss": 0.0, "lira-16": 27.3, "rmia-16": 1.8}),
    ("nonprivate", {"train": 1.0, "utility": 0.2, "epsilon": 0.0, "loss": 0.2, "lira": 8.4, "rmia": 0.9}),
    ("dpcl-simclr", {"train": 4.5, "utility": 0.5, "epsilon": 1.2, "loss": 0.2, "lira": 21.4, "rmia": 1.1,
                     "gradient-canary": 4.7}),
    ("dpcl-simclr", {"train": 2.4, "utility": 0.7, "epsilon": 2.7, "loss": 0.1, "lira": 26.8, "rmia": 1.0,
                     "gradient-canary": 7.5}),
    ("alm", {"train": 2.6, "utility": 0.2, "epsilon": 0.0, "loss": 0.0, "lira": 17.9, "rmia": 0.7}),
    ("alm", {"train": 2.4, "utility": 0.1, "epsilon": 0.0, "loss": 0.0, "lira": 18.6, "rmia": 0.9}),
    ("dp-gcl", {"train": 1.4, "utility": 0.3, "epsilon": 1.8, "loss": 0.1, "lira": 12.5, "rmia": 1.1,
                "gradient-canary": 4.5}),
    ("dp-gcl", {"train": 2.4, "utility": 0.5, "epsilon": 4.9, "loss": 0.2, "lira": 19.8, "rmia": 1.0,
                "gradient-canary": 7.3}),
    ("logit-dp", {"train": 5.6, "utility": 0.9, "epsilon": 1.1, "loss": 0.1, "lira": 30.3, "rmia": 1.1,
                  "gradient-canary": 9.1}),
    ("logit-dp", {"train": 5.3, "utility": 1.0, "epsilon": 4.9, "loss": 0.2, "lira": 45.8, "rmia": 1.1,
                  "gradient-canary": 9.6}),
    ("dp-fedemb", {"train": 9.1, "utility": 0.1, "epsilon": 0.4, "loss": 0.1, "lira": 33.3, "rmia": 0.8,
                   "user-canary": 3.1, "user-data-canary": 9.5}),
    ("dp-fedemb", {"train": 2.7, "utility": 0.2, "epsilon": 6.2, "loss": 0.1, "lira": 34.1, "rmia": 1.1,
                   "user-canary": 3.2, "user-data-canary": 4.3}),
    ("control-undernoised", {"train": 2.9, "utility": 0.3, "epsilon": 2.9, "gradient-canary": 6.3}),
]
CLAIMS = [15.1, 15.2, 12.8, 20.2, 19.0, 31.2, 20.6, 19.7, 37.5, 30.1, 34.1, 57.1, 76.4, 49.2, 41.9]
STEPS = [29.7, 31.3, 5.9, 4.3, 5.5, 9.6, 4.4, 1.8]


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def schedule(jobs: int, scale: float = 1.0):
    """Every event of the run on ``jobs`` first-come-first-served workers: (time, kind, task id, payload), sorted;
    and the time the last task ends. ``scale`` stretches the cells (a machine that gets busier)."""
    tasks = ([(f"sensitivity c{i}", "sensitivity", "", {"all": s}) for i, s in enumerate(CLAIMS)]
             + [(f"step audit s{i}", "step audit", "", {"all": s}) for i, s in enumerate(STEPS)]
             + [(f"digits/{d}/{i}", "cell", d, {k: v * scale for k, v in stages.items()})
                for i, (d, stages) in round_robin(list(enumerate(CELLS)), lambda c: c[1][0])])
    free = [(0.0, w) for w in range(jobs)]
    events = []
    for task_id, kind, group, stages in tasks:
        start, worker = heapq.heappop(free)
        t = start
        events.append((start, "start", task_id, None))
        for name, seconds in stages.items():
            if kind == "cell":
                events.append((t, "stage", task_id, name))
            t += seconds
        events.append((t, "finish", task_id, stages if kind == "cell" else None))
        heapq.heappush(free, (t, worker))
    return tasks, sorted(events, key=lambda e: (e[0], e[1] != "finish")), max(t for t, _ in free)


def replay(jobs: int, estimator, scale: float = 1.0, step: float = 5.0):
    """(time, estimate, truth) every ``step`` seconds from the first finished cell to the end."""
    clock = FakeClock()
    progress = Progress(jobs=jobs, now=clock)
    tasks, events, end = schedule(jobs, scale)
    for task_id, kind, group, stages in tasks:
        progress.add(task_id, kind, group, (*CELL_STAGES, *[s for s in stages if s not in CELL_STAGES])
                     if kind == "cell" else ())
    first_cell = min(t for t, what, task_id, _ in events if what == "finish" and task_id.startswith("digits/"))
    samples, i = [], 0
    t = 0.0
    while t < end:
        while i < len(events) and events[i][0] <= t:
            at, what, task_id, payload = events[i]
            clock.t = at
            if what == "start":
                progress.start(task_id, at)
            elif what == "stage":
                progress.enter_stage(task_id, payload, at)
            else:
                progress.finish(task_id, payload, at)
            i += 1
        clock.t = t
        if t >= first_cell:
            samples.append((t, estimator(progress), end - t))
        t += step
    return samples


def within_factor_two(samples) -> list:
    """The samples whose estimate is off by more than a factor 2 (or, in the last 30 s, by more than 30 s)."""
    bad = []
    for t, estimate, truth in samples:
        if estimate is None:
            bad.append((t, estimate, truth))
        elif truth >= 30 and not truth / 2 <= estimate <= 2 * truth:
            bad.append((t, round(estimate), round(truth)))
        elif truth < 30 and abs(estimate - truth) > 30:
            bad.append((t, round(estimate), round(truth)))
    return bad


def estimate(progress: Progress) -> float | None:
    return progress.estimate()[0]


def naive(progress: Progress) -> float | None:
    """The estimate this replaced: mean time per finished cell since the start, times the cells left, per job."""
    cells = [t for t in progress.tasks.values() if t.kind == "cell"]
    done = sum(t.finished is not None for t in cells)
    elapsed = progress.now() - progress.started
    return elapsed / done * (len(cells) - done) / progress.jobs if done else None


@pytest.mark.parametrize("jobs, scale", [(2, 1.0), (1, 1.0), (3, 1.0), (4, 1.0), (2, 1.5), (2, 0.5)])
def test_estimate_is_within_a_factor_two_of_the_time_left_after_the_first_cell(jobs, scale):
    samples = replay(jobs, estimate, scale)
    assert len(samples) > 20
    assert within_factor_two(samples) == []


def test_the_former_estimate_fails_the_same_check():
    """The check has teeth: elapsed time per finished cell, with the side checks run first, is off by far more."""
    assert len(within_factor_two(replay(2, naive))) > 10


def test_the_line_names_each_running_cell_and_stage_and_says_when_it_cannot_estimate():
    clock = FakeClock()
    progress = Progress(jobs=2, now=clock)
    progress.add("sensitivity dpcl.mean", "sensitivity")
    progress.add("digits/dp-gcl/eps=1/seed=0", "cell", "dp-gcl", (*CELL_STAGES, "lira"))
    progress.add("digits/alm/eps=1/seed=0", "cell", "alm", (*CELL_STAGES, "lira"))
    progress.start("sensitivity dpcl.mean", 0.0)
    progress.enter_stage("digits/dp-gcl/eps=1/seed=0", "train", 1.0)
    clock.t = 12.0
    line = progress.line()
    assert line.startswith("[privaudit +12s] 0/2 cells, 0/1 sensitivity claim done; ")
    assert "running sensitivity claim dpcl.mean (12s), digits/dp-gcl/eps=1/seed=0: train (11s); 1 waiting" in line
    assert line.endswith("time left: estimated once a sensitivity claim and a cell have finished")

    progress.finish("sensitivity dpcl.mean", at=20.0)
    progress.enter_stage("digits/dp-gcl/eps=1/seed=0", "lira", 22.0)
    progress.finish("digits/dp-gcl/eps=1/seed=0", {"train": 10.0, "utility": 1.0, "epsilon": 1.0, "lira": 20.0},
                    at=42.0)
    progress.enter_stage("digits/alm/eps=1/seed=0", "lira", 42.0)
    clock.t = 50.0
    # no alm cell has finished: the alm cell is predicted by the finished cell's 32 s, and it started 8 s ago
    assert progress.line() == ("[privaudit +50s] 1/2 cells, 1/1 sensitivity claim done; "
                               "running digits/alm/eps=1/seed=0: lira (8s); about 24s left")
    progress.add("digits/alm/eps=8/seed=0", "cell", "alm", (*CELL_STAGES, "lira"))
    progress.finish("digits/alm/eps=1/seed=0", {"train": 2.0, "utility": 1.0, "epsilon": 1.0, "lira": 6.0}, at=56.0)
    progress.enter_stage("digits/alm/eps=8/seed=0", "train", 56.0)
    progress.enter_stage("digits/alm/eps=8/seed=0", "utility", 57.0)
    clock.t = 57.5
    # now timed by its own defense, stage by stage: 0.5 s of utility, then epsilon 1 s and lira 6 s
    assert progress.line().endswith("running digits/alm/eps=8/seed=0: utility (0s); about 8s left")


def test_work_not_tracked_as_tasks_is_named_as_still_to_come():
    clock = FakeClock()
    progress = Progress(jobs=1, now=clock)
    progress.add("digits/nonprivate/seed=0", "cell", "nonprivate", CELL_STAGES)
    progress.untracked.append("the sensitivity checks")
    progress.enter_stage("digits/nonprivate/seed=0", "train", 0.0)
    progress.finish("digits/nonprivate/seed=0", {"train": 5.0, "utility": 1.0, "epsilon": 0.5}, at=6.5)
    progress.begin_phase("the sensitivity checks")
    clock.t = 30.0
    assert progress.line() == "[privaudit +30s] 1/1 cell done; running the sensitivity checks"
    progress.begin_phase(None)
    progress.untracked.append("the step audits")
    assert progress.line().endswith("1/1 cell done; waiting for a worker; then the step audits (not timed)")


def test_a_side_check_is_named_by_its_kind_once():
    clock = FakeClock()
    progress = Progress(jobs=2, now=clock)
    progress.add("step audit alm", "step audit")
    progress.add("sensitivity dpgcl.group[chunk]", "sensitivity")
    progress.start("step audit alm", 0.0)
    progress.start("sensitivity dpgcl.group[chunk]", 1.0)
    clock.t = 3.0
    assert progress.running() == "running step audit alm (3s), sensitivity claim dpgcl.group[chunk] (2s)"
