"""The time left is estimated from the run's first line: each task's planned cost
(:mod:`privaudit.audit.run.stage_costs`) at the speed measured on the finished tasks, then their measured times. On
tests/test_progress.py's replay of the quickstart's schedule, with priors wrong for this machine by a common factor and
by each task's own error, the estimate exists from the start and is within 25% of the time left from a tenth of the run
on (30 s near the end); the same priors taken at face value (no speed correction, planted) are not."""

from __future__ import annotations

import re

import numpy as np
import pytest

from privaudit.audit.run import stage_costs
from privaudit.audit.run.progress import CELL_STAGES, Progress
from privaudit.audit.suite.load import parse_suite
from test_progress import FakeClock, schedule

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def priors_for(tasks, machine: float, seed: int = 0) -> dict[str, dict[str, float]]:
    """Each task's priors: its true stage times divided by ``machine`` (the machine is that much slower than the
    priors assume), each task off by its own factor in [0.75, 1.33] (the priors' proportions are not exact)."""
    rng = np.random.default_rng(seed)
    return {task_id: {k: v / machine * float(np.exp(rng.uniform(-0.29, 0.29))) for k, v in stages.items()}
            for task_id, _, _, stages in tasks}


def replay_from_start(jobs: int, machine: float, step: float = 5.0):
    """(time, estimate, truth) every ``step`` seconds from 0 to the end."""
    clock = FakeClock()
    progress = Progress(jobs=jobs, now=clock)
    tasks, events, end = schedule(jobs)
    priors = priors_for(tasks, machine)
    for task_id, kind, group, stages in tasks:
        order = (*CELL_STAGES, *[s for s in stages if s not in CELL_STAGES]) if kind == "cell" else ()
        progress.add(task_id, kind, group, order, priors[task_id])
    samples, i, t = [], 0, 0.0
    while t < end:
        while i < len(events) and events[i][0] <= t:
            at, what, task_id, payload = events[i]
            {"start": lambda: progress.start(task_id, at), "stage": lambda: progress.enter_stage(task_id, payload, at),
             "finish": lambda: progress.finish(task_id, payload, at)}[what]()
            i += 1
        clock.t = t
        samples.append((t, progress.estimate()[0], end - t))
        t += step
    return samples, end


def off_by_more_than(samples, end: float, tolerance: float = 0.25, after: float = 0.1) -> list:
    """Samples from ``after`` of the run on whose estimate is off by more than ``tolerance`` (30 s when < 120 s
    are left: a fraction of a short remainder is a few seconds)."""
    return [(t, None if e is None else round(e), round(truth)) for t, e, truth in samples if t >= after * end
            and (e is None or abs(e - truth) > (tolerance * truth if truth >= 120 else 30))]


@pytest.mark.parametrize("jobs", [1, 2, 3])
@pytest.mark.parametrize("machine", [0.6, 1.0, 1.6])
def test_estimate_from_the_start_within_25_percent_after_a_tenth(jobs, machine):
    samples, end = replay_from_start(jobs, machine)
    assert all(e is not None for _, e, _ in samples)  # from the first line on
    assert off_by_more_than(samples, end) == []


def test_priors_at_face_value_fail_the_same_check(monkeypatch):
    from privaudit.audit.run.progress_estimate import Estimator

    monkeypatch.setattr(Estimator, "speed", lambda self, kind=None: 1.0)  # planted: the priors as they are
    samples, end = replay_from_start(2, 1.6)
    assert len(off_by_more_than(samples, end)) > 10


def test_planned_work_of_the_quickstart():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "suites" / "quickstart.toml"
    suite = parse_suite(tomllib.loads(path.read_text()), str(path))
    cells = {spec.defense.label: stage_costs.cell_priors(spec) for spec in suite.cells()}
    assert cells["supervised"]["lira-16"] == 2 * stage_costs.STAGE_SECONDS["lira"]  # 16 reference models, not 8
    assert cells["supervised"]["epsilon"] == 0.0 and cells["dp-gcl"]["epsilon"] > 0
    gcl = next(spec for spec in suite.cells() if spec.defense.label == "dp-gcl")
    assert set(cells["dp-gcl"]) == {*CELL_STAGES, *(a.label for a in gcl.attacks)}
    assert stage_costs.sensitivity_prior(suite.sensitivity) == 400 * stage_costs.SECONDS_PER_EVALUATION
    step = suite.step_audit
    assert stage_costs.step_audit_prior(step, "dpcl-simclr") > stage_costs.step_audit_prior(step, "dpsgd")


def test_untracked_work_with_a_prior_is_in_the_estimate_and_each_line_parses():
    clock = FakeClock()
    progress = Progress(jobs=1, now=clock)
    progress.add("digits/nonprivate/seed=0", "cell", "nonprivate", CELL_STAGES,
                 {"train": 4.0, "utility": 1.0, "epsilon": 0.0})
    progress.plan_phase("the sensitivity checks", 100.0)
    progress.plan_phase("the step audits")
    progress.enter_stage("digits/nonprivate/seed=0", "train", 0.0)
    clock.t = 1.0
    # 3 s of training and 1 s of utility at the planned speed, then the planned sensitivity checks
    assert progress.line().endswith("about 104s left, then the step audits (not timed)")
    progress.finish("digits/nonprivate/seed=0", {"train": 8.0, "utility": 2.0, "epsilon": 0.0}, at=10.0)
    clock.t = 10.0
    progress.begin_phase("the sensitivity checks")
    clock.t = 50.0
    line = progress.line()  # the cell took twice its plan: the checks are planned at 200 s, 40 s in
    assert re.fullmatch(r"\[privaudit \+(\d+)s\] .*; about (\d+)s left, then the step audits \(not timed\)", line)
    assert line.startswith("[privaudit +50s]") and "about 160s left" in line


def test_the_eta_script_reads_the_error_at_each_fraction_of_a_log(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "eta_error.py"
    spec = importlib.util.spec_from_file_location("eta_error", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    log = tmp_path / "run.log"
    log.write_text("[privaudit +5s] 0/2 cells done; running a; time left: estimated once a cell has finished\n"
                   "[1/2] digits/a: train 1.0s  done\n"
                   "[privaudit +20s] 1/2 cells done; running b; about 100s left\n"
                   "[privaudit +100s] 1/2 cells done; running b; about 10s left\n")
    assert script.main([str(log), "--total", "200"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "10%: +20s, estimate 100s, truth 180s, error -44.4%", "50%: +100s, estimate 10s, truth 100s, error -90.0%"]


def test_one_cheap_task_of_a_kind_does_not_set_the_speed_of_its_kind(monkeypatch):
    """The quickstart's first finished cell is its non-private baseline (a sixth of its prior, where the DP cells
    take about a half): a kind's own ratio is used only once :data:`SPEED_SAMPLE` of its tasks have finished;
    before that the ratio over every finished task. Planted: the kind's ratio from one task (the rule before)
    predicts the DP cells at a sixth of their cost."""
    from privaudit.audit.run import progress_estimate as progress_module

    clock = FakeClock()
    progress = Progress(jobs=1, now=clock)
    for k in range(4):
        progress.add(f"claim{k}", "sensitivity", priors={"run": 10.0})
    progress.add("cheap", "cell", "nonprivate", CELL_STAGES, {"train": 30.0})
    progress.add("dp", "cell", "dp-gcl", CELL_STAGES, {"train": 30.0})
    for k, (start, end) in enumerate([(0, 5), (5, 10), (10, 15), (15, 20)]):
        progress.start(f"claim{k}", start)
        progress.finish(f"claim{k}", None, end)
    progress.start("cheap", 20)
    progress.finish("cheap", {"train": 5.0}, 25)
    assert progress_module.SPEED_SAMPLE == 3
    assert progress.speed("cell") == pytest.approx(25 / 70)  # every kind: (4 x 5 + 5) / (4 x 10 + 30)
    clock.t = 25.0
    assert progress.estimate()[0] == pytest.approx(30 * 25 / 70)
    monkeypatch.setattr(progress_module, "SPEED_SAMPLE", 1)  # planted: the rule before, one cell's own ratio
    assert progress.estimate()[0] == pytest.approx(30 * 5 / 30)  # the DP cell at a sixth of its prior


def test_measured_priors_read_a_reference_or_a_timings_file_and_nothing_else(tmp_path):
    """A reference's cells (``stage_seconds``) and a run's ``timings.json`` (``cells``) give each cell's stages; bad
    values are dropped, and a missing or unreadable file gives no priors (the planned costs stay)."""
    ref = tmp_path / "benchmark.json"
    ref.write_text('{"cells": [{"id": "a", "stage_seconds": {"train": 100.5, "utility": 2, "epsilon": -1}}, '
                   '{"id": "b", "stage_seconds": {"train": true}}]}')
    assert stage_costs.measured_priors(ref) == {"a": {"train": 100.5, "utility": 2.0}, "b": {}}
    timings = tmp_path / "timings.json"
    timings.write_text('{"jobs": 2, "cells": {"a": {"train": 7.0, "claim checks": 1.5}}}')
    assert stage_costs.measured_priors(timings) == {"a": {"train": 7.0, "claim checks": 1.5}}
    (tmp_path / "bad.json").write_text("{not json")
    assert stage_costs.measured_priors(tmp_path / "bad.json") == {} == stage_costs.measured_priors(tmp_path / "none")
    assert stage_costs.measured_priors(None) == {}


def test_a_cell_takes_its_measured_stages_and_others_their_planned_costs():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "suites" / "quickstart.toml"
    suite = parse_suite(tomllib.loads(path.read_text()), str(path))
    gcl = next(spec for spec in suite.cells() if spec.defense.label == "dp-gcl")
    other = next(spec for spec in suite.cells() if spec.defense.label != "dp-gcl")
    measured = {gcl.id: {"train": 600.0, "utility": 30.0}}
    priors = stage_costs.cell_priors(gcl, measured)
    assert priors["train"] == 600.0 and priors["utility"] == 30.0
    assert priors["epsilon"] == stage_costs.STAGE_SECONDS["epsilon"]  # a stage the earlier run did not time
    assert set(priors) == {*CELL_STAGES, *(a.label for a in gcl.attacks)}
    assert stage_costs.cell_priors(other, measured) == stage_costs.cell_priors(other)


def test_a_suites_timings_must_be_a_path():
    from privaudit.core.errors import ConfigError

    raw = {"name": "t", "defenses": [{"name": "nonprivate"}], "timings": 3}
    with pytest.raises(ConfigError, match="timings: expected a file path, got 3"):
        parse_suite(raw, "t.toml", machine_checks=False)
    assert parse_suite({**raw, "timings": "x.json"}, "t.toml", machine_checks=False).timings == "x.json"


def benchmark_replay(measured: dict, machine: float, seed: int = 0, spread: float = 0.14) -> tuple[list, float]:
    """The Fashion-MNIST benchmark's cells scheduled as its run does (round robin by defense, 2 jobs), each taking
    its committed reference time times ``machine`` times its own factor in [exp(-spread), exp(spread)]; the progress
    priors are
    ``measured``. (time, estimate, truth) every 10 s, and the end."""
    import heapq
    from pathlib import Path

    from privaudit.audit.run.progress import round_robin

    path = Path(__file__).resolve().parents[1] / "suites" / "benchmark-fashion-mnist.toml"
    suite = parse_suite(tomllib.loads(path.read_text()), str(path), machine_checks=False)
    reference = stage_costs.measured_priors(Path(path).parents[1] / suite.timings)
    rng, clock = np.random.default_rng(seed), FakeClock()
    progress = Progress(jobs=2, now=clock)
    free, events = [(0.0, 0), (0.0, 1)], []
    for spec in round_robin(list(suite.cells()), lambda s: s.defense.label):
        stages = {k: v * machine * float(np.exp(rng.uniform(-spread, spread))) for k, v in reference[spec.id].items()
                  if k in CELL_STAGES}
        progress.add(spec.id, "cell", spec.defense.label, CELL_STAGES, stage_costs.cell_priors(spec, measured),
                     measured=spec.id in measured)
        start, worker = heapq.heappop(free)
        events.append((start, "start", spec.id, None))
        events.append((start + sum(stages.values()), "finish", spec.id, stages))
        heapq.heappush(free, (start + sum(stages.values()), worker))
    end = max(t for t, _ in free)
    samples, i = [], 0
    events.sort(key=lambda e: (e[0], e[1] != "finish"))
    for t in np.arange(0.0, end, 10.0):
        while i < len(events) and events[i][0] <= t:
            at, what, cid, payload = events[i]
            progress.start(cid, at) if what == "start" else progress.finish(cid, payload, at)
            i += 1
        clock.t = float(t)
        samples.append((float(t), progress.estimate()[0], end - float(t)))
    return samples, end


@pytest.mark.parametrize("machine", [0.5, 1.0, 2.0])
def test_the_benchmarks_estimate_holds_from_its_first_minutes_with_the_committed_timings(machine):
    """With the committed reference's stage times as priors (the suite's ``timings``), the benchmark's estimate is
    within 25% of the time left from its first finished cell (the floors, a minute in) to the last few minutes, on
    a machine twice as fast or slow; the planned costs alone (no timings, planted) are off by far more."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "reports" / "reference" / "benchmark-fashion-mnist" / "benchmark.json"
    measured = stage_costs.measured_priors(path)
    samples, end = benchmark_replay(measured, machine)
    first = min(t for t, e, _ in samples if e is not None)
    assert first <= 0.05 * end
    late = [(t, e, truth) for t, e, truth in samples if t >= 0.05 * end and truth > 300]
    assert late and all(abs(e - truth) <= 0.25 * truth for t, e, truth in late), late[:5]
    flat, _ = benchmark_replay({}, machine)
    assert max(abs(e - truth) / truth for t, e, truth in flat if e is not None and t >= 0.05 * end and truth > 300) > 1
