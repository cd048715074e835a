"""The suite runner: expand a suite into cells, run them (cached, resumable), check sensitivity claims,
write the report and return the gate's exit code.

Layout of the output directory::

    report.json  report.md  report.html  plots/*.png      the report (generated from report.json)
    run.json                                              the manifest of the evidence (privaudit gate recomputes
                                                          every verdict from it: privaudit.audit.verify.evidence)
    timings.json                                          wall time per cell, stage and claim (not in the report)
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

Cached artifacts (``cell.json``, ``sensitivity.json``) are trusted only when :func:`read_keyed` verifies them:
schema version :data:`CACHE_SCHEMA`, the cell's key, a SHA-256 digest of their own content, and the SHA-256 of
every file they reference (``scores.npz`` and ``result.json`` of each attack, the witnesses). A torn, corrupt or
edited cache is recomputed, and one line on stderr says which and why. ``--only`` runs the selected cells and
merges every other finished cell into the report, so a partial report never replaces a whole one.

``--jobs N`` runs cells and side checks in worker processes that never outlive the run and never write after it
(:mod:`privaudit.audit.run.workers`): a run stopped early (SIGTERM, Ctrl-C, a full disk) terminates and reaps them
before it releases the output directory's lock, and a killed run's workers die with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from privaudit.audit.run.cell import CellOutcome, ExecutorSpec, base_record, run_cell
from privaudit.audit.run.claim_checks import EVIDENCE_FILE as CLAIM_EVIDENCE
from privaudit.audit.failures import failure_line
from privaudit.core.errors import ConfigError, one_of
from privaudit.audit.gate.judge import gate_settings, judge_run
from privaudit.audit.run.lock import output_lock
from privaudit.audit.run.progress import (CELL_STAGES, Heartbeat, Progress, StageReporter, Tracked, attach,
                                      round_robin)
from privaudit.audit.run.stage_costs import cell_priors, sensitivity_prior, step_audit_prior
from privaudit.audit.run.workers import worker_pool
from privaudit.core.io import TEMP_GLOB, atomic_write_json, check_output_dir, read_json, strict, to_json
from privaudit.audit.suite.model import CellSpec, SensitivityConfig, Suite, config_hash

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


def _log(message: str, progress: bool) -> None:
    if progress:
        from tqdm.auto import tqdm

        tqdm.write(message)


def clean_temporaries(out: Path) -> int:
    """Remove temporary files a killed run left behind: only privaudit's own (:data:`privaudit.core.io.TEMP_GLOB`),
    and only under the output directory, whose lock this run holds (so no other run's in-flight file is touched)."""
    removed = 0
    if out.is_dir():
        for tmp in out.rglob(TEMP_GLOB):
            if tmp.is_file() and not tmp.is_symlink():
                tmp.unlink(missing_ok=True)
                removed += 1
    return removed


def cell_dir(out: Path, spec: CellSpec) -> Path:
    return out / "cells" / spec.slug


#: Version of the cached artifacts' layout (cell.json, sensitivity.json, step_audit/results.json); a cache of another
#: version is recomputed. 4: no wall-clock time in any of them (the init's pretraining seconds, the sensitivity
#: claims' seconds), step audits in strict JSON. 5: a DP cell's record holds its claim checks (its
#: claim_checks.json beside it).
CACHE_SCHEMA = 5


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a cached artifact's content (everything but the digest itself)."""
    body = {k: v for k, v in payload.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
                          .encode()).hexdigest()


def write_keyed(path: Path, out: Path, key: str, content: dict[str, Any], files: Sequence[Path]) -> None:
    """Write a cached artifact: its schema version, key, content, the SHA-256 of every file it references
    (paths relative to ``out``) and a digest of all that, so an edit or a torn file is seen on ``--resume``."""
    payload = {"schema": CACHE_SCHEMA, "key": key, **content,
               "files": {f.relative_to(out).as_posix(): file_sha256(f) for f in files}}
    payload = json.loads(to_json(payload, indent=None))  # the digest is of what is read back
    atomic_write_json(path, {**payload, "digest": _digest(payload)})


def read_keyed(path: Path, key: str, out: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The one reader for key-checked cached artifacts: ``(content, None)`` when ``path`` parses, has this
    schema version and ``key``, its digest matches its content and every file it references is unchanged;
    ``(None, None)`` when there is no cache; ``(None, why)`` when there is one that must not be trusted."""
    if not path.exists():
        return None, None
    try:
        saved = read_json(path)
    except (OSError, ValueError) as exc:
        return None, f"{path.name} does not parse ({type(exc).__name__})"
    if not isinstance(saved, dict):
        return None, f"{path.name} is not a JSON object"
    if saved.get("schema") != CACHE_SCHEMA:
        return None, f"{path.name} has schema {saved.get('schema')!r}, not {CACHE_SCHEMA}"
    if saved.get("key") != key:
        return None, f"{path.name} was written for another configuration"
    if saved.get("digest") != _digest(saved):
        return None, f"{path.name} was edited or is corrupt (digest mismatch)"
    files = saved.get("files")
    if not isinstance(files, dict):
        return None, f"{path.name} lists no file hashes"
    root = out.resolve()
    for rel, sha in files.items():
        target = (out / rel).resolve()
        if not target.is_relative_to(root):
            return None, f"{path.name} references {rel!r} outside the output directory"
        if not target.is_file():
            return None, f"{rel} is missing"
        if file_sha256(target) != sha:
            return None, f"{rel} was changed or is corrupt (sha256 mismatch)"
    return saved, None


def load_cached(out: Path, spec: CellSpec) -> tuple[dict[str, Any] | None, str | None]:
    """A finished cell's record (and None) when its cache is intact (:func:`read_keyed`) and names a score file
    for every attack; else (None, why it is recomputed) or (None, None) when it never finished."""
    saved, problem = read_keyed(cell_dir(out, spec) / "cell.json", spec.key, out)
    if saved is None:
        return None, problem
    if saved.get("resolved") != strict(spec.resolved()):
        return None, "cell.json was written for another configuration"
    return cell_record(saved)


def cell_record(saved: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The record of a verified cell.json (:func:`read_keyed`) when it holds one whose every attack's score file is
    among the files it holds a hash of; else (None, why)."""
    record = saved.get("record")
    if not isinstance(record, dict):
        return None, "cell.json holds no record"
    for attack in (record.get("attacks") or {}).values():
        if not isinstance(attack, dict) or not attack.get("scores") or attack["scores"] not in saved["files"]:
            return None, "cell.json names a score file it holds no hash of"
    return record, None


def persist(out: Path, outcome: CellOutcome) -> dict[str, Any]:
    """Write a finished cell's scores, then its record (the commit point); return the record as JSON data."""
    spec = outcome.spec
    directory = cell_dir(out, spec)
    record = outcome.record
    atomic_write_json(directory / "timings.json", outcome.timings)
    if outcome.error is not None:
        atomic_write_json(directory / "error.json", {"id": spec.id, "error": outcome.error,
                                                      "traceback": record["details"].get("traceback")})
        record["details"].pop("traceback", None)
        return strict(record)
    files = []
    if outcome.evidence is not None:  # the claim checks' evidence, for the gate to recompute them
        atomic_write_json(directory / CLAIM_EVIDENCE, outcome.evidence)
        record["claim_checks"]["evidence"] = (directory / CLAIM_EVIDENCE).relative_to(out).as_posix()
        files.append(directory / CLAIM_EVIDENCE)
    for label, result in outcome.results.items():
        result.save(directory / "attacks" / label)
        scores = directory / "attacks" / label / "scores.npz"
        record["attacks"][label]["scores"] = scores.relative_to(out).as_posix()
        files += [scores, scores.with_name("result.json")]
    record = strict(record)
    write_keyed(directory / "cell.json", out, spec.key, {"resolved": strict(spec.resolved()), "record": record},
                files)
    (directory / "error.json").unlink(missing_ok=True)
    return record


#: The run's manifest and its side checks' results (the evidence :mod:`privaudit.audit.verify.evidence` recomputes from).
MANIFEST, SENSITIVITY, STEP_AUDIT = "run.json", "sensitivity.json", "step_audit/results.json"


def write_manifest(out: Path, suite: Suite, sensitivity_key: str | None, step_key: str | None) -> None:
    """Write ``run.json``, the manifest of the run's evidence (:mod:`privaudit.audit.verify.evidence`): the resolved suite,
    the grid, the side checks' keys and the SHA-256 of the evidence files present (each cell's record, error and
    claim checks' evidence, the side checks' results)."""
    suite_dict = strict(suite.to_dict())
    grid, files = [], []
    for spec in suite.cells():
        directory = cell_dir(out, spec)
        grid.append({"id": spec.id, "key": spec.key, "dir": directory.relative_to(out).as_posix()})
        files += [directory / name for name in ("cell.json", "error.json", CLAIM_EVIDENCE)
                  if (directory / name).is_file()]
    files += [out / rel for rel in (SENSITIVITY, STEP_AUDIT) if (out / rel).is_file()]
    evidence = {f.relative_to(out).as_posix(): file_sha256(f) for f in files}
    write_keyed(out / MANIFEST, out, config_hash(suite_dict),
                {"suite": suite_dict, "grid": grid, "keys": {"sensitivity": sensitivity_key, "step_audit": step_key},
                 "evidence": evidence}, [])


def _stage_line(spec: CellSpec, outcome: CellOutcome, index: int, total: int) -> str:
    stages = "  ".join(f"{name} {seconds:.1f}s" for name, seconds in outcome.timings.items())
    status = f"ERROR {outcome.error}" if outcome.error else "done"
    return f"[{index}/{total}] {spec.id}: {stages}  {status}"


def _track_cells(cells: Sequence[CellSpec], tracker: Progress) -> None:
    """Register the cells with the progress tracker: each runs train, utility, epsilon, then its attacks."""
    for spec in cells:
        tracker.add(spec.id, "cell", spec.defense.label, (*CELL_STAGES, *(a.label for a in spec.attacks)),
                    cell_priors(spec))


def _run_local(cells: Sequence[CellSpec], progress: bool, bar, tracker: Progress) -> Iterator[CellOutcome]:
    for spec in cells:
        def stage(name: str, spec: CellSpec = spec) -> None:
            bar.set_postfix_str(f"{spec.id}: {name}", refresh=True)
            tracker.enter_stage(spec.id, name)

        yield run_cell(spec, ExecutorSpec("local"), progress, on_stage=stage)


def _run_pool(cells: Sequence[CellSpec], pool: ProcessPoolExecutor) -> Iterator[CellOutcome]:
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


def _run_ray(cells: Sequence[CellSpec], suite: Suite) -> Iterator[CellOutcome]:
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


WALL_CLOCK_KEYS = ("seconds", "setup_seconds", "search_seconds")


def split_wall_clock(result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A sensitivity result without its wall-clock fields (so that reruns with the same seed give the same
    report), and those fields apart (they go to ``timings.json``)."""
    config = dict(result.get("config") or {})
    timing = {k: config.pop(k) for k in WALL_CLOCK_KEYS if k in config}
    if isinstance(config.get("settings"), list):
        config["settings"], timing["settings"] = _pop_seconds(config["settings"])
    growth = config.get("growth")
    if isinstance(growth, dict) and isinstance(growth.get("rows"), list):
        rows, timing["growth"] = _pop_seconds(growth["rows"])
        config["growth"] = {**growth, "rows": rows}
    return {**result, "config": config}, timing


def _pop_seconds(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Any]]:
    """Copies of ``rows`` without their ``seconds`` field, and those seconds in order (None where absent)."""
    kept = [dict(r) for r in rows]
    return kept, [r.pop("seconds", None) for r in kept]


def _sensitivity_key(config: SensitivityConfig) -> str:
    return config_hash({"claims": config.claims, "budget_seconds": config.budget_seconds,
                        "evaluations": config.evaluations, "seed": config.seed})


def _step_audit_key(suite: Suite) -> str:
    cfg = suite.step_audit
    return config_hash({"step_audit": asdict(cfg), "dataset": suite.datasets[0], "data_dir": suite.data_dir,
                        "params": {d.name: d.params for d in suite.defenses if d.name in cfg.defenses},
                        "delta": [d.delta for d in suite.defenses]})


def _read_results(path: Path, key: str, out: Path, what: str, notice: bool) -> dict[str, Any] | None:
    """A cached side check's content (:func:`read_keyed`) when it holds a list of results; else None, and with
    ``notice`` the line that says why it is recomputed."""
    saved, problem = read_keyed(path, key, out)
    if saved is not None and not isinstance(saved.get("results"), list):
        saved, problem = None, f"{path.name} holds no results"
    if problem and notice:
        recompute_notice(what, problem)
    return saved


def _cached_step_audit(suite: Suite, out: Path, notice: bool = True) -> list[dict[str, Any]] | None:
    saved = _read_results(out / STEP_AUDIT, _step_audit_key(suite), out, "step audit", notice)
    return None if saved is None else saved["results"]


def finish_step_audit(suite: Suite, out: Path, results: list[dict[str, Any]],
                      errors: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Results in the suite's order, strict JSON (a non-finite bound is null, as in report.json, which the one
    checked reader refuses otherwise) without wall-clock fields (those go to timings.json); saved for ``--resume``
    (and as evidence) when every defense was audited."""
    order = {name: i for i, name in enumerate(suite.step_audit.defenses)}
    kept = sorted(strict([dict(r) for r in results]), key=lambda r: order.get(r.get("defense"), len(order)))
    timings = {}
    for r in kept:
        seconds = r.pop("seconds", None)
        pair_seconds: list[Any] = []
        if isinstance(r.get("pairs"), list):
            r["pairs"], pair_seconds = _pop_seconds(r["pairs"])
        timings[r.get("defense")] = {"seconds": seconds, "pairs": pair_seconds}
    if not errors:
        files = [out / p["witness"] for r in kept for p in r.get("pairs", []) if p.get("witness")]
        write_keyed(out / STEP_AUDIT, out, _step_audit_key(suite), {"results": kept}, files)
    return kept, timings


def recompute_notice(what: str, why: str) -> None:
    """The one line that says a cache was not trusted (on stderr, even with --quiet: it changes what runs)."""
    print(f"privaudit: resume: {what}: {why}; recomputing", file=sys.stderr, flush=True)


def _cached_sensitivity(config: SensitivityConfig, out: Path, notice: bool = True) -> list[dict[str, Any]] | None:
    saved = _read_results(out / SENSITIVITY, _sensitivity_key(config), out, "sensitivity checks", notice)
    return None if saved is None else saved["results"]


def check_sensitivity_claims(config: SensitivityConfig, out: Path, claim_ids: list[str] | None,
                             progress: bool) -> list[dict[str, Any]]:
    """The raw results of ``claim_ids`` (None: the config's claims). Each claim's search is seeded by the claim
    alone, so checking claims one by one (in parallel workers) gives the numbers a single pass gives."""
    from privaudit.audit.sensitivity import check_claims

    ids = claim_ids if claim_ids is not None else (None if config.claims is None else list(config.claims))
    return [r.to_dict() for r in check_claims(ids, budget_seconds=config.budget_seconds,
                                              evaluations=config.evaluations, seed=config.seed, progress=progress,
                                              witness_dir=out / "sensitivity" / "witnesses")]


def finish_sensitivity(config: SensitivityConfig, out: Path,
                       results: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Results without wall-clock fields, witnesses relative to ``out``; saved for ``--resume`` (and as evidence,
    whose digest is in ``run.json``: so ``sensitivity.json`` holds no time, which goes to ``timings.json`` only)."""
    kept, timings = [], {}
    for r in strict([dict(r) for r in results]):
        r, timings[r["claim"]] = split_wall_clock(r)
        witness = r.get("witness")
        if witness and Path(witness).is_file():
            r["witness"] = Path(witness).resolve().relative_to(out.resolve()).as_posix()
        kept.append(r)
    witnesses = [out / r["witness"] for r in kept if r.get("witness") and (out / r["witness"]).is_file()]
    write_keyed(out / SENSITIVITY, out, _sensitivity_key(config), {"results": kept}, witnesses)
    return kept, timings


def run_sensitivity(suite: Suite, out: Path, resume: bool,
                    progress: bool) -> tuple[list[dict[str, Any]], dict[str, Any], str | None]:
    """Run (or reuse) the suite's sensitivity checks: (results, wall-clock timings per claim measured now (none
    when reused), error). Witnesses are written under ``sensitivity/witnesses``."""
    config = suite.sensitivity
    if config is None:
        return [], {}, None
    cached = _cached_sensitivity(config, out) if resume else None
    if cached is not None:
        return cached, {}, None
    try:
        results = check_sensitivity_claims(config, out, None, progress)
    except Exception as exc:  # noqa: BLE001 - reported through the gate
        return [], {}, failure_line("sensitivity checks errored", exc)
    return (*finish_sensitivity(config, out, results), None)


def _selected(only: Sequence[str], what: str) -> bool:
    """Whether ``--only`` (empty: everything) selects the suite's ``what`` (``sensitivity``, ``step_audit``)."""
    return not only or any(p in (what, "*") for p in only)


@dataclass(frozen=True)
class _RunPlan:
    """One run's settings, fixed before the output directory is locked."""

    suite: Suite
    out: Path
    cells: list[CellSpec]  # the cells --only selects (every cell without it)
    only: list[str]
    run_sens: bool  # the sensitivity checks run (or are reused) in this run
    run_step: bool  # the step audits run (or are reused) in this run
    resume: bool
    executor: str
    progress: bool
    started: float
    jobs: int


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
    run_sens = suite.sensitivity is not None and _selected(only, "sensitivity")
    run_step = suite.step_audit is not None and _selected(only, "step_audit")
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
    from privaudit.defenses.pretrain import cache_in

    plan = _RunPlan(suite, out, cells, only, run_sens, run_step, resume, executor, progress, started, jobs)
    # public-pretrained encoders are cached in OUT/cache/pretrained (shared by cells, workers and --resume)
    with output_lock(out) as lock, cache_in(out / "cache"):
        return _run_locked(plan, lock.fd)


@dataclass(frozen=True)
class _Finished:
    """The finished cells a run starts from (reused, or kept outside --only) and the cells it still runs."""

    records: dict[str, dict[str, Any]]
    reused: list[str]
    pending: list[CellSpec]


@dataclass(frozen=True)
class _SideChecks:
    """The sensitivity checks and step audits: reused from the cache, or submitted to the pool beside the cells."""

    cached_sens: list[dict[str, Any]] | None = None
    cached_step: list[dict[str, Any]] | None = None
    sens_futures: list[Future] | None = None
    step_futures: list[Future] | None = None


@dataclass(frozen=True)
class _Ran:
    """What the run computed under its progress display: the cells' records, the sensitivity results, the
    step audits gathered from the pool (None: not run there) and the error lines for the gate."""

    records: dict[str, dict[str, Any]]
    ran: list[str]
    sensitivity: list[dict[str, Any]]
    errors: list[str]
    step_raw: tuple[list[dict[str, Any]], list[str]] | None


def _run_locked(plan: _RunPlan, lock_fd: int) -> RunResult:
    """The run itself, under the output directory's lock (``lock_fd``, which worker processes hold with the
    run): cells, side checks, gate, report, exit code."""
    clean_temporaries(plan.out)
    finished = _finished_cells(plan)
    timings: dict[str, Any] = {"created": utc_now(), "executor": plan.executor, "jobs": plan.jobs, "cells": {}}
    parallel = plan.executor == "local" and plan.jobs > 1 and (len(finished.pending) + plan.run_sens) > 1
    tracker = Progress(jobs=plan.jobs if parallel else 1)
    with Heartbeat(tracker, enabled=plan.progress) as heartbeat, \
            worker_pool(plan.jobs, lock_fd, attach, (heartbeat.events,)) if parallel else contextlib.nullcontext() \
            as pool:
        side = _submit_side_checks(plan, pool, tracker)
        ran = _run_with_progress(plan, finished.pending, side, pool, timings, tracker)
        step_results, step_errors = _step_audit_results(plan, side.cached_step, ran.step_raw, timings, tracker)
    sensitivity = ran.sensitivity
    if not plan.run_sens and plan.suite.sensitivity is not None and plan.only:  # --only left them out: keep them
        cached = _cached_sensitivity(plan.suite.sensitivity, plan.out, notice=False)
        sensitivity = cached if cached is not None else []
    errors = ran.errors + step_errors
    ordered, gate = _judge(plan, {**finished.records, **ran.records}, sensitivity, step_results, errors)
    report = _write_run_report(plan, ordered, sensitivity, gate, step_results, timings)
    return RunResult(report, _exit_code(ordered, errors, gate), plan.out, ran.ran, finished.reused, timings)


def _finished_cells(plan: _RunPlan) -> _Finished:
    """Split the selected cells into those ``--resume`` reuses and those still to run (a cache that is not
    trusted says why on stderr); with ``--only``, add the finished cells outside the selection."""
    records: dict[str, dict[str, Any]] = {}
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
        _log(f"--only: {kept} finished cells outside the selection kept in the report", plan.progress)
    if reused:
        _log(f"resume: {len(reused)} finished cells reused, {len(pending)} to run", plan.progress)
    return _Finished(records, reused, pending)


def _keep_unselected(plan: _RunPlan, records: dict[str, dict[str, Any]]) -> int:
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


def _submit_tracked(pool: ProcessPoolExecutor, tracker: Progress, task_id: str, kind: str, prior: float,
                    fn: Any, *args: Any) -> Future:
    """Submit ``fn(*args)`` to the pool as a task the progress tracker follows (start, finish; ``prior``: its
    planned seconds)."""
    tracker.add(task_id, kind, priors={kind: prior})
    future = pool.submit(Tracked(task_id, fn), *args)
    future.add_done_callback(lambda _: tracker.finish(task_id))
    return future


def _submit_side_checks(plan: _RunPlan, pool: ProcessPoolExecutor | None, tracker: Progress) -> _SideChecks:
    """Reuse the cached sensitivity checks and step audits (``--resume``), or, with a pool, submit them first:
    one task per claim and per defense, so the long searches start early and spread over the workers. Without a
    pool they run after the cells, in this process: the progress line names them as work to come."""
    suite, out = plan.suite, plan.out
    cached_sens = _cached_sensitivity(suite.sensitivity, out) if plan.run_sens and plan.resume else None
    sens_futures = None
    if pool is not None and plan.run_sens and cached_sens is None:
        from privaudit.audit.sensitivity import select

        ids = [spec.id for spec in select(None if suite.sensitivity.claims is None
                                          else list(suite.sensitivity.claims))]
        _log(f"sensitivity: checking {len(ids)} claims beside the cells ({plan.jobs} processes)", plan.progress)
        sens_futures = [_submit_tracked(pool, tracker, f"sensitivity {i}", "sensitivity",
                                        sensitivity_prior(suite.sensitivity), check_sensitivity_claims,
                                        suite.sensitivity, out, [i], False) for i in ids]
    elif plan.run_sens and cached_sens is None:
        from privaudit.audit.sensitivity import select

        claims = select(None if suite.sensitivity.claims is None else list(suite.sensitivity.claims))
        tracker.plan_phase("the sensitivity checks",  # run after the cells, in this process
                           len(claims) * sensitivity_prior(suite.sensitivity))
    cached_step = _cached_step_audit(suite, out) if plan.run_step and plan.resume else None
    step_futures = None
    if pool is not None and plan.run_step and cached_step is None:
        from privaudit.audit.step.runs import run_suite_step_audits

        step_futures = [_submit_tracked(pool, tracker, f"step audit {name}", "step audit",
                                        step_audit_prior(suite.step_audit, name), run_suite_step_audits,
                                        suite, out, False, [name]) for name in suite.step_audit.defenses]
    elif plan.run_step and cached_step is None:
        tracker.plan_phase("the step audits", sum(step_audit_prior(suite.step_audit, name)
                                                  for name in suite.step_audit.defenses))
    return _SideChecks(cached_sens, cached_step, sens_futures, step_futures)


def _run_with_progress(plan: _RunPlan, pending: list[CellSpec], side: _SideChecks, pool: ProcessPoolExecutor | None,
                       timings: dict[str, Any], tracker: Progress) -> _Ran:
    """Run the pending cells, then finish the sensitivity checks and gather the pool's step audits, under a
    progress bar (the heartbeat runs around this; before the pool shuts down: that cancels what has not started)."""
    from tqdm.auto import tqdm

    pending = round_robin(pending, lambda spec: spec.defense.label)  # the report keeps the suite's order
    _track_cells(pending, tracker)
    with tqdm(total=len(pending), desc=f"cells ({plan.suite.name})", disable=None if plan.progress else True,
              dynamic_ncols=True) as bar:
        if plan.executor == "ray":
            outcomes = _run_ray(pending, plan.suite)
        elif pool is not None:
            outcomes = _run_pool(pending, pool)
        else:
            outcomes = _run_local(pending, plan.progress, bar, tracker)
        with contextlib.closing(outcomes):  # closed at once when the run stops early (Ray cancels its tasks)
            records, ran = _persist_outcomes(plan, outcomes, len(pending), timings, bar, tracker)
        sensitivity, errors = _sensitivity_results(plan, side, timings, tracker)
        step_raw = _gather_step_audits(side.step_futures)
    return _Ran(records, ran, sensitivity, errors, step_raw)


def _persist_outcomes(plan: _RunPlan, outcomes: Iterator[CellOutcome], total: int, timings: dict[str, Any], bar,
                      tracker: Progress) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Persist each cell as it finishes (:func:`persist`); its record by id, and the ids in finishing order."""
    records: dict[str, dict[str, Any]] = {}
    ran: list[str] = []
    for i, outcome in enumerate(outcomes, 1):
        records[outcome.spec.id] = persist(plan.out, outcome)
        ran.append(outcome.spec.id)
        timings["cells"][outcome.spec.id] = outcome.timings
        tracker.finish(outcome.spec.id, outcome.timings)
        if plan.progress:
            bar.write(_stage_line(outcome.spec, outcome, i, total))
        bar.update(1)
    return records, ran


def _sensitivity_results(plan: _RunPlan, side: _SideChecks, timings: dict[str, Any],
                         tracker: Progress) -> tuple[list[dict[str, Any]], list[str]]:
    """The sensitivity results (from the pool, the cache, or checked now) and their error line, if any."""
    if not plan.run_sens:
        return [], []
    config, out = plan.suite.sensitivity, plan.out
    start = time.perf_counter()
    if side.sens_futures is not None:
        try:
            raw = [r for f in side.sens_futures for r in f.result()]
            sensitivity, timings["sensitivity_claims"] = finish_sensitivity(config, out, raw)
            error = None
        except Exception as exc:  # noqa: BLE001 - reported through the gate
            sensitivity, error = [], failure_line("sensitivity checks errored", exc)
    elif side.cached_sens is not None:
        sensitivity, error = side.cached_sens, None
    else:
        _log("sensitivity: checking " + ("every registered claim" if config.claims is None
                                         else ", ".join(config.claims)), plan.progress)
        tracker.begin_phase("the sensitivity checks")
        sensitivity, timings["sensitivity_claims"], error = run_sensitivity(plan.suite, out, False, plan.progress)
        tracker.begin_phase(None)
    timings["sensitivity"] = time.perf_counter() - start
    where = " (checked beside the cells)" if side.sens_futures is not None else ""
    _log(f"sensitivity: {len(sensitivity)} claims, {timings['sensitivity']:.1f}s after the cells{where}",
         plan.progress)
    return sensitivity, [error] if error else []


def _gather_step_audits(futures: list[Future] | None) -> tuple[list[dict[str, Any]], list[str]] | None:
    """The step audits the pool ran (results and error lines), or None when none were submitted."""
    if futures is None:
        return None
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    for future in futures:
        try:
            part, part_errors = future.result()
        except Exception as exc:  # noqa: BLE001 - reported through the gate
            part, part_errors = [], [failure_line("step audit errored", exc)]
        results.extend(part)
        errors.extend(part_errors)
    return results, errors


def _step_audit_results(plan: _RunPlan, cached: list[dict[str, Any]] | None,
                        step_raw: tuple[list[dict[str, Any]], list[str]] | None,
                        timings: dict[str, Any], tracker: Progress) -> tuple[list[dict[str, Any]], list[str]]:
    """The step audits' results for the report (cached, gathered from the pool, or run now) and error lines;
    with ``--only`` leaving them out, the finished results."""
    suite, out = plan.suite, plan.out
    if not plan.run_step:
        kept = _cached_step_audit(suite, out, notice=False) if suite.step_audit is not None and plan.only else None
        return kept or [], []
    start = time.perf_counter()
    errors: list[str] = []
    if cached is not None:
        results = cached
    else:
        if step_raw is not None:
            raw, errors = step_raw
        else:
            from privaudit.audit.step.runs import run_suite_step_audits

            tracker.begin_phase("the step audits")
            raw, errors = run_suite_step_audits(suite, out, plan.progress)
            tracker.begin_phase(None)
        results, timings["step_audit_defenses"] = finish_step_audit(suite, out, raw, errors)
    timings["step_audit"] = time.perf_counter() - start
    return results, errors


def _judge(plan: _RunPlan, records: dict[str, dict[str, Any]], sensitivity: list[dict[str, Any]],
           step_results: list[dict[str, Any]], errors: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The cells' records in the suite's order, each with its gate, and the suite's gate (:func:`judge_run`, from
    the resolved suite as the report records it: the gate ``privaudit gate`` recomputes is this one)."""
    suite = plan.suite
    grid = [spec.id for spec in suite.cells()]
    ordered = [dict(records[cid]) for cid in grid if cid in records]
    gate = judge_run(ordered, sensitivity, step_results, gate_settings(strict(suite.to_dict()), grid), errors)
    return ordered, gate


def _write_run_report(plan: _RunPlan, ordered: list[dict[str, Any]], sensitivity: list[dict[str, Any]],
                      gate: dict[str, Any], step_results: list[dict[str, Any]],
                      timings: dict[str, Any]) -> dict[str, Any]:
    """Build and write the report, then ``timings.json``; return the report."""
    from privaudit.audit.report import build_report, write_report

    start = time.perf_counter()
    report = build_report(plan.suite, ordered, sensitivity, gate, only=plan.only or None)
    if step_results or plan.run_step:
        report["step_audit"] = step_results
    write_manifest(plan.out, plan.suite, _sensitivity_key(plan.suite.sensitivity) if plan.suite.sensitivity else None,
                   _step_audit_key(plan.suite) if plan.suite.step_audit else None)
    write_report(plan.out, report)
    timings["report"] = time.perf_counter() - start
    timings["total"] = time.perf_counter() - plan.started
    atomic_write_json(plan.out / "timings.json", timings)
    return report


def _exit_code(ordered: list[dict[str, Any]], errors: list[str], gate: dict[str, Any]) -> int:
    """3 when a cell or a side check errored, else 1 when the gate failed, else 0."""
    if errors or any((c.get("details") or {}).get("error") for c in ordered):
        return EXIT_RUN_ERROR
    return EXIT_GATE_FAILED if gate["status"] == "fail" else EXIT_OK
