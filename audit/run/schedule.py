"""Scheduling a run's cells: in this process, over worker processes (``--jobs``) or on Ray, each reported to the
progress tracker; a cell whose worker was lost is a failed cell.
"""

from __future__ import annotations

from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any, Iterator, Sequence

from privaudit.audit.run.cell import CellOutcome, ExecutorSpec, base_record, run_cell
from privaudit.audit.failures import failure_line
from privaudit.audit.run.progress import CELL_STAGES, Progress
from privaudit.audit.run.progress_events import StageReporter, Tracked
from privaudit.audit.run.stage_costs import cell_priors, measured_priors
from privaudit.audit.suite.model import CellSpec, Suite


def stage_line(spec: CellSpec, outcome: CellOutcome, index: int, total: int) -> str:
    stages = "  ".join(f"{name} {seconds:.1f}s" for name, seconds in outcome.timings.items())
    status = f"ERROR {outcome.error}" if outcome.error else "done"
    return f"[{index}/{total}] {spec.id}: {stages}  {status}"


def track_cells(cells: Sequence[CellSpec], tracker: Progress, timings: str | None = None) -> None:
    """Register the cells with the progress tracker: each runs train, utility, epsilon, then its attacks; their
    priors are the suite's earlier measured stage times (``timings``) where it has them."""
    measured = measured_priors(timings)
    for spec in cells:
        tracker.add(spec.id, "cell", spec.defense.label, (*CELL_STAGES, *(a.label for a in spec.attacks)),
                    cell_priors(spec, measured), measured=spec.id in measured)


def run_local(cells: Sequence[CellSpec], progress: bool, bar, tracker: Progress) -> Iterator[CellOutcome]:
    for spec in cells:
        def stage(name: str, spec: CellSpec = spec) -> None:
            bar.set_postfix_str(f"{spec.id}: {name}", refresh=True)
            tracker.enter_stage(spec.id, name)

        yield run_cell(spec, ExecutorSpec("local"), progress, on_stage=stage)


def run_pool(cells: Sequence[CellSpec], pool: ProcessPoolExecutor) -> Iterator[CellOutcome]:
    """Cells in parallel worker processes (``--jobs``); each sets its own torch threads, so the numbers are the
    ones ``--jobs 1`` gives. Outcomes come back as cells finish; the runner orders the report by the suite.
    Each worker reports the cell's start and stages to the progress tracker (:mod:`privaudit.audit.run.progress`)."""
    futures = {pool.submit(Tracked(spec.id, run_cell), spec, ExecutorSpec("local"), False, StageReporter(spec.id)):
               spec for spec in cells}
    for future in as_completed(futures):
        spec = futures[future]
        try:
            yield future.result()
        except Exception as exc:  # noqa: BLE001 - a lost worker is a failed cell
            yield _lost_cell(spec, "worker", exc)


def run_ray(cells: Sequence[CellSpec], suite: Suite) -> Iterator[CellOutcome]:
    from privaudit.attacks.ray_executor import ensure_ray, submit

    ray = ensure_ray(suite.ray.address)
    executor = ExecutorSpec("ray", (("num_cpus", suite.ray.cpus_per_task), ("num_gpus", suite.ray.gpus_per_task),
                                    ("threads", suite.threads)))
    refs = {submit(run_cell, spec, executor, False, num_cpus=suite.ray.cpus_per_cell,
                   num_gpus=suite.ray.gpus_per_cell, threads=suite.threads): spec for spec in cells}
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    yield ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a lost worker is a failed cell
                    yield _lost_cell(refs[ref], "ray", exc)
    finally:  # the run stopped early (SIGTERM, Ctrl-C, an error): its tasks stop with it
        for ref in pending:
            ray.cancel(ref, force=True)


def _lost_cell(spec: CellSpec, where: str, exc: BaseException) -> CellOutcome:
    """The outcome of a cell whose worker was lost (``where``: ``worker`` or ``ray``): a failed cell."""
    record = base_record(spec)
    message = failure_line(where, exc)
    record["details"]["error"] = message
    return CellOutcome(spec, record, error=message)


def submit_tracked(pool: ProcessPoolExecutor, tracker: Progress, task_id: str, kind: str, prior: float,
                    fn: Any, *args: Any) -> Future:
    """Submit ``fn(*args)`` to the pool as a task the progress tracker follows (start, finish; ``prior``: its
    planned seconds)."""
    tracker.add(task_id, kind, priors={kind: prior})
    future = pool.submit(Tracked(task_id, fn), *args)
    future.add_done_callback(lambda _: tracker.finish(task_id))
    return future
