"""The run's side checks beside its cells: the sensitivity claims and the step audits, reused from the keyed cache
(``--resume``), submitted to the worker pool with the cells, or run after them in this process; their results
saved without wall-clock fields (those go to ``timings.json``).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from privaudit.audit.failures import failure_line
from privaudit.audit.run.progress import Progress
from privaudit.audit.run.stage_costs import sensitivity_prior, step_audit_prior
from privaudit.core.io import strict
from privaudit.audit.suite.model import SensitivityConfig, Suite, config_hash
from privaudit.audit.run.cache import SENSITIVITY, STEP_AUDIT, read_keyed, recompute_notice, write_keyed
from privaudit.audit.run.plan import RunPlan, log
from privaudit.audit.run.schedule import submit_tracked


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


def sensitivity_key(config: SensitivityConfig) -> str:
    return config_hash({"claims": config.claims, "budget_seconds": config.budget_seconds,
                        "evaluations": config.evaluations, "seed": config.seed})


def step_audit_key(suite: Suite) -> str:
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


def cached_step_audit(suite: Suite, out: Path, notice: bool = True) -> list[dict[str, Any]] | None:
    saved = _read_results(out / STEP_AUDIT, step_audit_key(suite), out, "step audit", notice)
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
        write_keyed(out / STEP_AUDIT, out, step_audit_key(suite), {"results": kept}, files)
    return kept, timings


def cached_sensitivity(config: SensitivityConfig, out: Path, notice: bool = True) -> list[dict[str, Any]] | None:
    saved = _read_results(out / SENSITIVITY, sensitivity_key(config), out, "sensitivity checks", notice)
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
    write_keyed(out / SENSITIVITY, out, sensitivity_key(config), {"results": kept}, witnesses)
    return kept, timings


def run_sensitivity(suite: Suite, out: Path, resume: bool,
                    progress: bool) -> tuple[list[dict[str, Any]], dict[str, Any], str | None]:
    """Run (or reuse) the suite's sensitivity checks: (results, wall-clock timings per claim measured now (none
    when reused), error). Witnesses are written under ``sensitivity/witnesses``."""
    config = suite.sensitivity
    if config is None:
        return [], {}, None
    cached = cached_sensitivity(config, out) if resume else None
    if cached is not None:
        return cached, {}, None
    try:
        results = check_sensitivity_claims(config, out, None, progress)
    except Exception as exc:  # noqa: BLE001 - reported through the gate
        return [], {}, failure_line("sensitivity checks errored", exc)
    return (*finish_sensitivity(config, out, results), None)


@dataclass(frozen=True)
class SideChecks:
    """The sensitivity checks and step audits: reused from the cache, or submitted to the pool beside the cells."""

    cached_sens: list[dict[str, Any]] | None = None
    cached_step: list[dict[str, Any]] | None = None
    sens_futures: list[Future] | None = None
    step_futures: list[Future] | None = None


def submit_side_checks(plan: RunPlan, pool: ProcessPoolExecutor | None, tracker: Progress) -> SideChecks:
    """Reuse the cached sensitivity checks and step audits (``--resume``), or, with a pool, submit them first:
    one task per claim and per defense, so the long searches start early and spread over the workers. Without a
    pool they run after the cells, in this process: the progress line names them as work to come."""
    suite, out = plan.suite, plan.out
    cached_sens = cached_sensitivity(suite.sensitivity, out) if plan.run_sens and plan.resume else None
    sens_futures = None
    if pool is not None and plan.run_sens and cached_sens is None:
        from privaudit.audit.sensitivity import select

        ids = [spec.id for spec in select(None if suite.sensitivity.claims is None
                                          else list(suite.sensitivity.claims))]
        log(f"sensitivity: checking {len(ids)} claims beside the cells ({plan.jobs} processes)", plan.progress)
        sens_futures = [submit_tracked(pool, tracker, f"sensitivity {i}", "sensitivity",
                                        sensitivity_prior(suite.sensitivity), check_sensitivity_claims,
                                        suite.sensitivity, out, [i], False) for i in ids]
    elif plan.run_sens and cached_sens is None:
        from privaudit.audit.sensitivity import select

        claims = select(None if suite.sensitivity.claims is None else list(suite.sensitivity.claims))
        tracker.plan_phase("the sensitivity checks",  # run after the cells, in this process
                           len(claims) * sensitivity_prior(suite.sensitivity))
    cached_step = cached_step_audit(suite, out) if plan.run_step and plan.resume else None
    step_futures = None
    if pool is not None and plan.run_step and cached_step is None:
        from privaudit.audit.step.runs import run_suite_step_audits

        step_futures = [submit_tracked(pool, tracker, f"step audit {name}", "step audit",
                                        step_audit_prior(suite.step_audit, name), run_suite_step_audits,
                                        suite, out, False, [name]) for name in suite.step_audit.defenses]
    elif plan.run_step and cached_step is None:
        tracker.plan_phase("the step audits", sum(step_audit_prior(suite.step_audit, name)
                                                  for name in suite.step_audit.defenses))
    return SideChecks(cached_sens, cached_step, sens_futures, step_futures)


def sensitivity_results(plan: RunPlan, side: SideChecks, timings: dict[str, Any],
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
        log("sensitivity: checking " + ("every registered claim" if config.claims is None
                                         else ", ".join(config.claims)), plan.progress)
        tracker.begin_phase("the sensitivity checks")
        sensitivity, timings["sensitivity_claims"], error = run_sensitivity(plan.suite, out, False, plan.progress)
        tracker.begin_phase(None)
    timings["sensitivity"] = time.perf_counter() - start
    where = " (checked beside the cells)" if side.sens_futures is not None else ""
    log(f"sensitivity: {len(sensitivity)} claims, {timings['sensitivity']:.1f}s after the cells{where}",
         plan.progress)
    return sensitivity, [error] if error else []


def gather_step_audits(futures: list[Future] | None) -> tuple[list[dict[str, Any]], list[str]] | None:
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


def step_audit_results(plan: RunPlan, cached: list[dict[str, Any]] | None,
                        step_raw: tuple[list[dict[str, Any]], list[str]] | None,
                        timings: dict[str, Any], tracker: Progress) -> tuple[list[dict[str, Any]], list[str]]:
    """The step audits' results for the report (cached, gathered from the pool, or run now) and error lines;
    with ``--only`` leaving them out, the finished results."""
    suite, out = plan.suite, plan.out
    if not plan.run_step:
        kept = cached_step_audit(suite, out, notice=False) if suite.step_audit is not None and plan.only else None
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
