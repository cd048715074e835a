"""Gate power over bug classes: ``privaudit gate-power SUITE --bugs CATALOGUE --allow-plugins``.

:mod:`privaudit.audit.verify.gate_power` measures the smallest noise shortfall the gate catches. Real DP bugs are not
all shortfalls: batches sampled otherwise than claimed, a clip other than the one the noise is calibrated to, reused
noise, noise missing on some parameters, a normaliser that follows the data, wrong accountant inputs. A catalogue
(a Python file outside the product path, loaded like a plugin: ``BUGS``, name -> an object with ``cls``,
``description``, ``applies`` (defense names) and ``plant(defense, params)``, a context manager that plants the
bug into the real training code for its block; the project's is ``tests/bug_plants.py``) is planted, bug by bug,
into each gated DP defense of the suite it applies to, at each epsilon, on ``seeds`` seeds. Each planted run is
the defense's own cell (its claim checks and its primary attack, :func:`privaudit.audit.verify.planted.cell_record`),
judged as a claim by the suite's gate at its family size (:func:`privaudit.audit.verify.power_gate.judge_as_claim`):
caught when the gate fails it. The correct defense runs beside the bugs on the same seeds (``correct``: every one must
pass). All seeds run (a catch *rate*, not a decision). Output: ``gate_power_bugs.json`` and ``gate_power_bugs.md``.
This module runs the measurement (``judge`` stays importable from here).
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from privaudit.audit.report.records import CellRecord
from privaudit.audit.verify.planted import (CellRun, Planted, cell_record, plantable, planted_comparisons,
                                            planted_delta, suite_family)
from privaudit.audit.verify.power_gate import judge_as_claim as judge
from privaudit.audit.verify.power_render import bug_line
from privaudit.core.errors import ConfigError, check_positive

__all__ = ["CORRECT", "BugRun", "class_rates", "judge", "load_catalogue", "measure_bugs", "run_bug"]

CORRECT = "correct"


def load_catalogue(path: str | Path) -> dict[str, Any]:
    """The ``BUGS`` mapping of a catalogue file (imported by path; its folder goes on sys.path for its imports)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--bugs: no such file {str(path)!r} (a Python file defining BUGS)")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = f"privaudit_bug_catalogue_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    module = sys.modules[name]
    bugs = getattr(module, "BUGS", None)
    if not isinstance(bugs, dict) or not bugs:
        raise ConfigError(f"--bugs: {str(path)!r} defines no BUGS mapping (name -> bug with a plant(defense, params))")
    return bugs


@dataclass(frozen=True)
class BugRun(CellRun):
    """A cell of the defense with catalogue ``catalogue``'s ``bug`` planted (none for :data:`CORRECT`)."""

    bug: str = CORRECT
    catalogue: str = ""


def run_bug(job: BugRun) -> CellRecord:
    """The defense's cell trained with the bug planted (none for :data:`CORRECT`)."""
    import contextlib

    p = job.planted
    context = contextlib.nullcontext() if job.bug == CORRECT else \
        load_catalogue(job.catalogue)[job.bug].plant(p.name, dict(p.params))
    with context:
        return cell_record(p.name, dict(p.params), p.label, p.attack, job,
                           f"{p.label}/eps={job.epsilon:g}/{job.bug}/seed={job.seed}")


def _cells(suite: Any, bugs: dict[str, Any], names: Sequence[str], defenses: Sequence[str] | None,
           epsilons: Sequence[float] | None) -> list[tuple[Planted, float, str]]:
    """(defense, epsilon, bug) to run: each named bug where it applies, and the correct defense."""
    planted, _ = plantable(suite)
    if defenses is not None:
        planted = [p for p in planted if p.label in defenses or p.name in defenses]
    out = []
    for p in planted:
        for eps in p.epsilons:
            if epsilons is not None and not any(abs(eps - e) < 1e-12 for e in epsilons):
                continue
            out.append((p, eps, CORRECT))
            out += [(p, eps, b) for b in names if p.name in tuple(getattr(bugs[b], "applies", ()))]
    if not out:
        raise ConfigError("gate-power --bugs: no gated DP defense of the suite that a bug applies to")
    return out


def measure_bugs(suite: Any, catalogue: str, *, bugs: Sequence[str] | None = None, seeds: int = 10,
                 defenses: Sequence[str] | None = None, epsilons: Sequence[float] | None = None, workers: int = 2,
                 progress: bool = True) -> dict[str, Any]:
    """Every (defense, epsilon, bug) row over ``seeds`` seeds: runs, how many the gate failed, by which checks."""
    check_positive("--seeds", seeds)
    check_positive("--workers", workers)
    catalogue_bugs = load_catalogue(catalogue)
    names = list(catalogue_bugs) if bugs is None else list(bugs)
    unknown = [b for b in names if b not in catalogue_bugs]
    if unknown:
        raise ConfigError(f"--bug-names: {', '.join(unknown)} not in the catalogue ({', '.join(catalogue_bugs)})")
    family, rows = suite_family(suite), []
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for p, eps, bug in _cells(suite, catalogue_bugs, names, defenses, epsilons):
            jobs = [BugRun(p, eps, s, suite.datasets[0], suite.data_dir, planted_delta(suite, p), suite.device,
                           suite.threads, bug=bug, catalogue=str(Path(catalogue).resolve())) for s in range(seeds)]
            row = _row(pool, jobs, family + planted_comparisons(p.name), suite.gate, catalogue_bugs)
            rows.append(row)
            if progress:
                print(bug_line(row), file=sys.stderr, flush=True)
    return {"suite": suite.name, "catalogue": str(catalogue), "seeds": seeds, "family": family, "rows": rows,
            "errors": sum(len(r["errors"]) for r in rows), "classes": class_rates(rows)}


def _row(pool: ProcessPoolExecutor, jobs: list[BugRun], family: int, config: Any, bugs: dict[str, Any]
         ) -> dict[str, Any]:
    first = jobs[0]
    bug = bugs.get(first.bug)
    row = {"defense": first.planted.label, "epsilon": first.epsilon, "bug": first.bug,
           "class": CORRECT if bug is None else bug.cls, "runs": 0, "caught": 0, "caught_by": {}, "errors": [],
           "reason": None}
    for job, future in [(j, pool.submit(run_bug, j)) for j in jobs]:
        row["runs"] += 1
        try:
            caught, by, reason = judge(future.result(), family, config)
        except (ConfigError, RuntimeError, ValueError) as exc:
            row["errors"].append(f"seed {job.seed}: {type(exc).__name__}: {exc}")
            continue
        row["caught"] += caught
        row["reason"] = row["reason"] or (reason if caught else None)
        for name in by:
            row["caught_by"][name] = row["caught_by"].get(name, 0) + 1
    return row


def class_rates(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per class: the planted runs, how many the gate failed, and the lowest per-row rate (the class's worst
    defense, epsilon and variant)."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        c = out.setdefault(r["class"], {"runs": 0, "caught": 0, "worst": None})
        c["runs"] += r["runs"]
        c["caught"] += r["caught"]
        rate = r["caught"] / r["runs"] if r["runs"] else 0.0
        if r["class"] == CORRECT:
            rate = 1 - rate
        if c["worst"] is None or rate < c["worst"]["rate"]:
            c["worst"] = {"rate": rate, "defense": r["defense"], "epsilon": r["epsilon"], "bug": r["bug"]}
    return out
