"""The suite runner: expand a suite into cells, run them (cached, resumable), check sensitivity claims,
write the report and return the gate's exit code.

Layout of the output directory::

    report.json  report.md  report.html  plots/*.png      the report (generated from report.json)
    run.json                                              the manifest of the evidence (privaudit gate recomputes
                                                          every verdict from it: privaudit.audit.verify.evidence)
    timings.json                                          wall time per cell, stage and claim (not in the report; a
                                                          resumed run keeps its reused cells' and the earlier runs')
    cells/<id>-<key>/cell.json                            a finished cell's record (written last)
    cells/<id>-<key>/attacks/<attack>/scores.npz          per-example scores, membership, variants
    cells/<id>-<key>/attacks/<attack>/result.json         the attack's configuration, counts and bound
    cells/<id>-<key>/claim_checks.json                    a DP cell's claim (its event) and training trace
    sensitivity.json  sensitivity/witnesses/*             the sensitivity verdicts and their witnesses

A cell's key hashes its resolved configuration (:meth:`privaudit.audit.suite.model.CellSpec.resolved`). Every file is
written atomically (:mod:`privaudit.core.io`) and ``cell.json`` only after the cell's scores, so a run killed at
any point leaves finished cells complete and nothing torn; ``--resume`` reuses every finished cell whose
key matches and redoes the rest. Cells are computed from seeds alone, so the report of a resumed run
equals an uninterrupted run's, byte for byte (wall-clock times are in ``timings.json`` only).

Cached artifacts (``cell.json``, ``sensitivity.json``) are trusted only when
:func:`privaudit.audit.run.cache.read_keyed` verifies them: schema version
:data:`~privaudit.audit.run.cache.CACHE_SCHEMA`, the cell's key, a SHA-256 digest of their own content, and the
SHA-256 of every file they reference (``scores.npz`` and ``result.json`` of each attack, the witnesses). A torn,
corrupt or edited cache is recomputed, and one line on stderr says which and why. ``--only`` runs the selected
cells and merges every other finished cell into the report, so a partial report never replaces a whole one.

``--jobs N`` runs cells and side checks in worker processes that never outlive the run and never write after it
(:mod:`privaudit.audit.run.workers`): a run stopped early (SIGTERM, Ctrl-C, a full disk) terminates and reaps them
before it releases the output directory's lock, and a killed run's workers die with it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from privaudit.audit.report.records import CellRecord, SuiteGate
from privaudit.audit.run.cell import CellOutcome, peak_rss_mb
from privaudit.core.errors import ConfigError, one_of
from privaudit.audit.gate.judge import gate_settings, judge_run
from privaudit.audit.run.lock import output_lock
from privaudit.audit.run.heartbeat import Heartbeat
from privaudit.audit.run.progress import Progress, round_robin
from privaudit.audit.run.progress_events import attach
from privaudit.audit.run.workers import worker_pool
from privaudit.core.io import atomic_write_json, check_output_dir, strict
from privaudit.audit.suite.model import CellSpec, Suite
from privaudit.audit.run.cache import clean_temporaries, load_cached, persist, recompute_notice, write_manifest
from privaudit.audit.run.side_checks import (SideChecks, cached_sensitivity, gather_step_audits, sensitivity_key,
                                             sensitivity_results, step_audit_key, step_audit_results,
                                             submit_side_checks)
from privaudit.audit.run.plan import RunPlan, log, only_selects
from privaudit.audit.run.schedule import run_local, run_pool, run_ray, stage_line, track_cells

EXECUTOR_CHOICES = ("local", "ray")
MAX_JOBS = 256  # worker processes (--jobs)
EXIT_OK, EXIT_GATE_FAILED, EXIT_RUN_ERROR = 0, 1, 3


@dataclass(frozen=True)
class RunResult:
    """What :func:`run_suite` did: the report it wrote (``report.json``'s content), the exit code (0 pass, 1 the
    gate failed, 3 a cell or check errored), the output directory, the ids of the cells it ran (in finishing
    order) and of those it reused, and the wall-clock timings (``timings.json``'s content)."""

    report: dict[str, Any]
    exit_code: int
    out: Path
    ran: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    timings: dict[str, Any] = field(default_factory=dict)


def utc_now() -> str:
    """The current time, ISO 8601 in UTC to the second (``timings.json``'s ``created``)."""
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def run_suite(suite: Suite, *, out: str | Path | None = None, executor: str = "local", resume: bool = False,
              only: Sequence[str] | None = None, progress: bool = True, jobs: int = 1,
              yes_large: bool = False) -> RunResult:
    """Run ``suite`` end to end and write its report; see the module docstring.

    The output directory is locked for the whole run (:func:`privaudit.audit.run.lock.output_lock`): a second run on the
    same directory is refused with one line instead of racing the first for its files."""
    if executor not in EXECUTOR_CHOICES:
        raise one_of("--executor", executor, EXECUTOR_CHOICES)
    if not (isinstance(jobs, int) and 1 <= jobs <= MAX_JOBS):
        raise ConfigError(f"--jobs: must be an integer in [1, {MAX_JOBS}], got {jobs!r}")
    only = list(only or [])
    suite.check_size(yes_large)
    cells = suite.cells(only or None)
    run_sens = suite.sensitivity is not None and only_selects(only, "sensitivity")
    run_step = suite.step_audit is not None and only_selects(only, "step_audit")
    if only and not cells and not run_sens and not run_step:
        ids = ", ".join(c.id for c in suite.cells()[:5])
        raise ConfigError(f"--only: no cell matches {' '.join(only)!r}; cell ids look like: {ids}")
    suite.check_knn_k(cells)
    if executor == "ray":
        from privaudit.attacks.ray_executor import ensure_ray

        ensure_ray(suite.ray.address)
    out = check_output_dir(out if out is not None else suite.out)
    started = time.perf_counter()

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out: cannot create {str(out)!r}: {exc.strerror or exc}") from None
    from privaudit.defenses.training.pretrain import cache_in

    plan = RunPlan(suite, out, cells, only, run_sens, run_step, resume, executor, progress, started, jobs)
    # public-pretrained encoders are cached in OUT/cache/pretrained (shared by cells, workers and --resume)
    with output_lock(out) as lock, cache_in(out / "cache"):
        return _run_locked(plan, lock.fd)


@dataclass(frozen=True)
class _Finished:
    """The finished cells a run starts from (reused, or kept outside --only) and the cells it still runs."""

    records: dict[str, CellRecord]
    reused: list[str]
    pending: list[CellSpec]


@dataclass(frozen=True)
class _Ran:
    """What the run computed under its progress display: the cells' records, the sensitivity results, the
    step audits gathered from the pool (None: not run there) and the error lines for the gate."""

    records: dict[str, CellRecord]
    ran: list[str]
    sensitivity: list[dict[str, Any]]
    errors: list[str]
    step_raw: tuple[list[dict[str, Any]], list[str]] | None


def _run_locked(plan: RunPlan, lock_fd: int) -> RunResult:
    """The run itself, under the output directory's lock (``lock_fd``, which worker processes hold with the
    run): cells, side checks, gate, report, exit code."""
    clean_temporaries(plan.out)
    finished = _finished_cells(plan)
    timings: dict[str, Any] = {"created": utc_now(), "executor": plan.executor, "jobs": plan.jobs,
                               **_earlier_timings(plan.out, finished.reused)}
    parallel = plan.executor == "local" and plan.jobs > 1 and (len(finished.pending) + plan.run_sens) > 1
    tracker = Progress(jobs=plan.jobs if parallel else 1)
    with Heartbeat(tracker, enabled=plan.progress) as heartbeat, \
            worker_pool(plan.jobs, lock_fd, attach, (heartbeat.events,)) if parallel else contextlib.nullcontext() \
            as pool:
        side = submit_side_checks(plan, pool, tracker)
        ran = _run_with_progress(plan, finished.pending, side, pool, timings, tracker)
        step_results, step_errors = step_audit_results(plan, side.cached_step, ran.step_raw, timings, tracker)
    sensitivity = ran.sensitivity
    if not plan.run_sens and plan.suite.sensitivity is not None and plan.only:  # --only left them out: keep them
        cached = cached_sensitivity(plan.suite.sensitivity, plan.out, notice=False)
        sensitivity = cached if cached is not None else []
    errors = ran.errors + step_errors
    ordered, gate = _judge(plan, {**finished.records, **ran.records}, sensitivity, step_results, errors)
    report = _write_run_report(plan, ordered, sensitivity, gate, step_results, timings)
    return RunResult(report, _exit_code(ordered, errors, gate), plan.out, ran.ran, finished.reused, timings)


def _earlier_timings(out: Path, reused: Sequence[str]) -> dict[str, Any]:
    """What the runs before this one measured of the cells it reuses (their stage times and peak memory), and each
    earlier run's start and wall time (``earlier``), from the ``timings.json`` they left; a missing or unreadable
    file leaves them out (timings are not evidence: nothing is verified from them)."""
    from privaudit.core.io import read_json

    kept: dict[str, Any] = {"cells": {}, "earlier": []}
    try:
        old = read_json(out / "timings.json") if reused else {}
    except (OSError, ValueError):
        old = {}
    if not isinstance(old, dict):
        return kept
    for key in ("cells", "peak_rss_mb"):
        entries = old.get(key) if isinstance(old.get(key), dict) else {}
        picked = {cid: entries[cid] for cid in reused if cid in entries}
        if picked:
            kept[key] = picked
    earlier = [e for e in old.get("earlier") or [] if isinstance(e, dict)]
    if old.get("total") is not None:
        earlier.append({"created": old.get("created"), "total": old.get("total"), "jobs": old.get("jobs")})
    kept["earlier"] = earlier
    return kept


def _finished_cells(plan: RunPlan) -> _Finished:
    """Split the selected cells into those ``--resume`` reuses and those still to run (a cache that is not
    trusted says why on stderr); with ``--only``, add the finished cells outside the selection."""
    records: dict[str, CellRecord] = {}
    reused, pending = [], []
    for spec in plan.cells:
        cached, problem = load_cached(plan.out, spec) if plan.resume else (None, None)
        if cached is not None:
            records[spec.id] = cached
            reused.append(spec.id)
        else:
            if problem:
                recompute_notice(spec.id, problem)
            pending.append(spec)
    kept = _keep_unselected(plan, records)
    if kept:
        log(f"--only: {kept} finished cells outside the selection kept in the report", plan.progress)
    if reused:
        log(f"resume: {len(reused)} finished cells reused, {len(pending)} to run", plan.progress)
    return _Finished(records, reused, pending)


def _keep_unselected(plan: RunPlan, records: dict[str, CellRecord]) -> int:
    """--only: the cells left out keep their finished results, so the report stays whole (merged, never
    partial). Adds them to ``records``; returns how many."""
    selected = {spec.id for spec in plan.cells}
    kept = 0
    for spec in plan.suite.cells() if plan.only else []:
        if spec.id in selected:
            continue
        cached, problem = load_cached(plan.out, spec)
        if cached is not None:
            records[spec.id] = cached
            kept += 1
        elif problem:
            print(f"privaudit: --only: {spec.id}: {problem}; left out of the report until it runs again",
                  file=sys.stderr, flush=True)
    return kept


def _run_with_progress(plan: RunPlan, pending: list[CellSpec], side: SideChecks, pool: ProcessPoolExecutor | None,
                       timings: dict[str, Any], tracker: Progress) -> _Ran:
    """Run the pending cells, then finish the sensitivity checks and gather the pool's step audits, under a
    progress bar (the heartbeat runs around this; before the pool shuts down: that cancels what has not started)."""
    from tqdm.auto import tqdm

    pending = round_robin(pending, lambda spec: spec.defense.label)  # the report keeps the suite's order
    track_cells(pending, tracker, plan.suite.timings)
    with tqdm(total=len(pending), desc=f"cells ({plan.suite.name})", disable=None if plan.progress else True,
              dynamic_ncols=True) as bar:
        if plan.executor == "ray":
            outcomes = run_ray(pending, plan.suite)
        elif pool is not None:
            outcomes = run_pool(pending, pool)
        else:
            outcomes = run_local(pending, plan.progress, bar, tracker)
        with contextlib.closing(outcomes):  # closed at once when the run stops early (Ray cancels its tasks)
            records, ran = _persist_outcomes(plan, outcomes, len(pending), timings, bar, tracker)
        sensitivity, errors = sensitivity_results(plan, side, timings, tracker)
        step_raw = gather_step_audits(side.step_futures)
    return _Ran(records, ran, sensitivity, errors, step_raw)


def _persist_outcomes(plan: RunPlan, outcomes: Iterator[CellOutcome], total: int, timings: dict[str, Any], bar,
                      tracker: Progress) -> tuple[dict[str, CellRecord], list[str]]:
    """Persist each cell as it finishes (:func:`persist`); its record by id, and the ids in finishing order."""
    records: dict[str, CellRecord] = {}
    ran: list[str] = []
    for i, outcome in enumerate(outcomes, 1):
        records[outcome.spec.id] = persist(plan.out, outcome)
        ran.append(outcome.spec.id)
        timings["cells"][outcome.spec.id] = outcome.timings
        if outcome.peak_rss_mb is not None:  # the worker's peak so far (it may have run cells before)
            timings.setdefault("peak_rss_mb", {})[outcome.spec.id] = round(outcome.peak_rss_mb, 1)
        tracker.finish(outcome.spec.id, outcome.timings)
        if plan.progress:
            bar.write(stage_line(outcome.spec, outcome, i, total))
        bar.update(1)
    return records, ran


def _judge(plan: RunPlan, records: dict[str, CellRecord], sensitivity: list[dict[str, Any]],
           step_results: list[dict[str, Any]], errors: list[str]) -> tuple[tuple[CellRecord, ...], SuiteGate]:
    """The cells' records in the suite's order, each with its gate, and the suite's gate (:func:`judge_run`, from
    the resolved suite as the report records it: the gate ``privaudit gate`` recomputes is this one)."""
    suite = plan.suite
    grid = [spec.id for spec in suite.cells()]
    ordered = [records[cid] for cid in grid if cid in records]
    judged = judge_run(ordered, sensitivity, step_results, gate_settings(strict(suite.to_dict()), grid), errors)
    return judged.cells, judged.gate


def _write_run_report(plan: RunPlan, ordered: Sequence[CellRecord], sensitivity: list[dict[str, Any]],
                      gate: SuiteGate, step_results: list[dict[str, Any]],
                      timings: dict[str, Any]) -> dict[str, Any]:
    """Build and write the report, then ``timings.json``; return the report."""
    from privaudit.audit.report import build_report, write_report

    start = time.perf_counter()
    report = build_report(plan.suite, [c.to_dict() for c in ordered], sensitivity, gate.to_dict(),
                          only=plan.only or None)
    if step_results or plan.run_step:
        report["step_audit"] = step_results
    write_manifest(plan.out, plan.suite, sensitivity_key(plan.suite.sensitivity) if plan.suite.sensitivity else None,
                   step_audit_key(plan.suite) if plan.suite.step_audit else None)
    write_report(plan.out, report)
    timings["report"] = time.perf_counter() - start
    timings["total"] = time.perf_counter() - plan.started
    timings["peak_rss_mb_runner"] = peak_rss_mb()  # this process's (the cells' own peaks: "peak_rss_mb")
    atomic_write_json(plan.out / "timings.json", timings)
    return report


def _exit_code(ordered: Sequence[CellRecord], errors: list[str], gate: SuiteGate) -> int:
    """3 when a cell or a side check errored, else 1 when the gate failed, else 0."""
    if errors or any(c.error for c in ordered):
        return EXIT_RUN_ERROR
    return EXIT_GATE_FAILED if gate.status == "fail" else EXIT_OK
