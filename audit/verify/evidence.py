"""The gate of a finished run recomputed from its evidence: what ``privaudit gate`` and ``privaudit report`` show.

``report.json`` is a rendering of the run, not evidence: no verdict, bound, epsilon or status in it is trusted.
The evidence is what the runner saved, each file a keyed artifact (:func:`privaudit.audit.run.cache.write_keyed`:
schema version, key, a SHA-256 digest of its content and the SHA-256 of every file it references)::

    run.json                   the manifest: the resolved suite, its grid (each cell's id, key and directory), the
                               side checks' keys, and the SHA-256 of every evidence file below
    cells/<dir>/cell.json      a finished cell: its record (the claim in full, with its event), the hashes of its
                               attacks' scores.npz and result.json
    cells/<dir>/error.json     a cell that errored, with its error
    cells/<dir>/claim_checks.json  a DP cell's claim and training trace (:mod:`privaudit.audit.run.claim_checks`)
    sensitivity.json           the sensitivity verdicts, the hashes of their witnesses
    step_audit/results.json    the step audits, the hashes of their witnesses

:func:`recompute` reads them and recomputes every verdict:

1. every evidence file is checked against its hash and digest; a missing, torn or edited one is a reason;
2. each cell's epsilons are re-accounted from its saved claim through every accountant
   (:func:`privaudit.accountants.all_epsilons`);
3. each attack's AUC is recomputed from its saved scores, and its guess counts where the guesses are on those
   scores (one-run, f-DP, best-of and mechanism bounds on canaries or candidates; not the replace-one pairs a
   black-box attack draws from its candidates, nor a multi-run split); each bound is recomputed from its counts
   (:func:`privaudit.audit.gate.recompute.family_bound` at the bound's own confidence), the white-box trajectory bound
   from its trial counts over the cell's claim's event (the per-step observations themselves are not kept);
   each DP cell's claim checks: the trace check re-run on its saved trace against its claim, its own step audit's
   per-step claim re-derived from the two, and each of its pairs' bounds recomputed from their counts (the gate
   then recomputes each pair's mu_lb at the family-wise level);
4. each sensitivity verdict is recomputed from its observed distance, bound, tolerance, closed form and
   coverage, and each step-audit pair's bounds from their counts and its verdict from them and the claim;
5. the gate is :func:`privaudit.audit.gate.judge.judge_run` (the runner's own) on that evidence; every discrepancy
   found above, every difference between ``report.json`` and the evidence, and a ``report.json`` status that
   differs from the recomputed one is a reason to fail.

So a status edited to "pass", a hand-written report, an edited bound or verdict, or a run of part of the suite
cannot pass. Digests detect edits and corruption, not a forger who recomputes them: they are not signatures.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from privaudit.audit.gate.judge import GateSettings, gate_settings, judge_run
from privaudit.audit.report import write_report
from privaudit.audit.report.records import CellGate, CellRecord, SuiteGate
from privaudit.audit.report.schema import load_report
from privaudit.audit.run.cache import MANIFEST, SENSITIVITY, STEP_AUDIT, cell_record, file_sha256, read_keyed
from privaudit.audit.suite.model import config_hash
from privaudit.core.errors import ConfigError
from privaudit.core.io import read_json
from privaudit.audit.verify.recheck import recheck_cell, resensitivity, restep


def read_run_report(out: str | Path) -> dict[str, Any]:
    """``out/report.json``: the one place the gate and ``privaudit report`` read it (a one-line ConfigError when it
    is not a report)."""
    return load_report(out)


def render_report(out: str | Path) -> dict[str, Path]:
    """Regenerate the Markdown, HTML and plots of the run in ``out``: report.json's content with every verdict and
    gate recomputed from the run's evidence (:func:`recompute`; without evidence the gate is FAIL, saying why).
    report.json itself is not rewritten."""
    return write_report(out, recompute(out).report, with_json=False)


def read_manifest(out: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``run.json`` when intact (its key is the hash of the suite it holds and its digest matches its content; the
    evidence files it lists are checked by :func:`changed_evidence`), or (None, why not)."""
    path = out / MANIFEST
    if not path.is_file():
        return None, f"{MANIFEST} is missing: there is no evidence of what ran in {out} (run the suite into it)"
    try:
        key = config_hash(read_json(path)["suite"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"{MANIFEST} is not a run manifest ({type(exc).__name__})"
    saved, problem = read_keyed(path, key, out)
    if saved is None:
        return None, f"{MANIFEST}: {problem}"
    if not all(isinstance(saved.get(k), t) for k, t in (("grid", list), ("keys", dict), ("evidence", dict))):
        return None, f"{MANIFEST} holds no grid"
    return saved, None


def changed_evidence(out: Path, manifest: dict[str, Any]) -> list[str]:
    """The evidence files (cell.json, error.json, the side checks' results) removed or changed since the run wrote
    its manifest."""
    problems = []
    for rel, sha in manifest["evidence"].items():
        path = (out / rel).resolve()
        if not path.is_relative_to(out.resolve()) or not path.is_file():
            problems.append(f"{rel} is missing since the run (or lies outside the output directory)")
        elif file_sha256(path) != sha:
            problems.append(f"{rel} was changed since the run (sha256 mismatch)")
    return problems


@dataclass(frozen=True)
class Recomputed:
    """A run's gate recomputed from its evidence (``gate``), and ``report``: report.json's data with its cells,
    sensitivity verdicts and step audits replaced by the evidence's, every verdict and gate recomputed (what
    ``privaudit report`` renders)."""

    report: dict[str, Any]
    gate: SuiteGate


def recompute(out: str | Path) -> Recomputed:
    """Recompute the gate of the run in ``out`` from its evidence (module doc)."""
    out = Path(out)
    report = read_run_report(out)
    manifest, problem = read_manifest(out)
    if manifest is None:
        return _unverified(report, problem)
    try:
        settings = gate_settings(manifest["suite"], [g["id"] for g in manifest["grid"]])
    except (ConfigError, KeyError, TypeError, ValueError) as exc:
        return _unverified(report, f"{MANIFEST}: the suite's gate settings do not parse ({type(exc).__name__}: {exc})")
    cells, problems = load_cells(out, manifest["grid"])
    problems = changed_evidence(out, manifest) + problems
    sensitivity, s_problems = side_results(out, SENSITIVITY, manifest["keys"].get("sensitivity"),
                                           settings.sensitivity is not None, "sensitivity checks")
    steps, t_problems = side_results(out, STEP_AUDIT, manifest["keys"].get("step_audit"),
                                     settings.step_audit is not None, "step audits")
    problems += s_problems + t_problems
    problems += report_differences(report, manifest["suite"], cells, sensitivity, steps)
    rechecked = [recheck_cell(out, cell) for cell in cells]
    cells = [cell for cell, _ in rechecked]
    problems += [p for _, found in rechecked for p in found]
    problems += [p for r in sensitivity for p in resensitivity(r)] + [p for r in steps for p in restep(r)]
    judged = judge_run(cells, sensitivity, steps, settings, problems)
    gate = judged.gate
    claimed = (report.get("gate") or {}).get("status") if isinstance(report.get("gate"), dict) else None
    if claimed != gate.status:
        gate = gate.with_reasons([f"report.json says the gate is {claimed!r}, its evidence says {gate.status!r}: the "
                                  "report was edited or does not belong to this evidence"])
    shown = {**report, "cells": [c.to_dict() for c in judged.cells], "sensitivity": sensitivity,
             "gate": gate.to_dict()}
    if settings.step_audit is not None or "step_audit" in report:
        shown["step_audit"] = steps
    return Recomputed(shown, gate)


def _unverified(report: dict[str, Any], problem: str) -> Recomputed:
    """The gate of a report without usable evidence: FAIL, saying why; each cell's gate FAIL (nothing verified)."""
    reason = f"no verdict can be recomputed: {problem}"
    gate = SuiteGate(status="fail", reasons=[reason], notes=[], family_wise_error=None, controls=0, controls_caught=0)
    cell_gate = CellGate(status="fail", reasons=[reason], comparisons=()).to_dict()
    cells = [{**c, "gate": cell_gate} for c in report["cells"]]
    return Recomputed({**report, "cells": cells, "gate": gate.to_dict()}, gate)


# -- evidence files ------------------------------------------------------------------------------------
def load_cells(out: Path, grid: Sequence[dict[str, Any]]) -> tuple[list[CellRecord], list[str]]:
    """The grid's finished cells' records (cell.json, verified and read through the schema) and errored cells
    (error.json) in grid order, and the problems of those that cannot be trusted; a cell with neither file has no
    result (the gate says so)."""
    cells, problems = [], []
    root = out.resolve()
    for g in grid:
        cid, directory = g.get("id"), (out / str(g.get("dir"))).resolve()
        if not directory.is_relative_to(root):
            problems.append(f"{MANIFEST}: cell {cid}'s directory lies outside the output directory")
            continue
        saved, problem = read_keyed(directory / "cell.json", str(g.get("key")), out)
        record, problem = cell_record(saved) if saved is not None else (None, problem)
        if record is not None and record.id == cid:
            cells.append(record)
        elif problem or record is not None:
            problems.append(f"cell {cid}: its evidence cannot be trusted: {problem or 'cell.json holds another cell'}")
        elif (directory / "error.json").is_file():
            cells.append(_errored(cid, directory / "error.json"))
    return cells, problems


def _errored(cid: str, path: Path) -> CellRecord:
    """The record of a cell that errored, from its error.json (its hash is checked through the manifest): its id,
    its error and empty results."""
    try:
        error = str(read_json(path).get("error") or "no error recorded")
    except (OSError, ValueError, AttributeError) as exc:
        error = f"error.json does not parse ({type(exc).__name__})"
    return CellRecord(id=cid, claim=None, epsilon={}, attacks={}, details={"error": error})


def side_results(out: Path, rel: str, key: str | None, configured: bool,
                 what: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The verified results of a side check (sensitivity, step audits) when the suite has it, and the problems."""
    if not configured:
        return [], []
    if key is None:
        return [], [f"{MANIFEST} records no key for the {what}"]
    saved, problem = read_keyed(out / rel, key, out)
    if saved is None or not isinstance(saved.get("results"), list):
        why = problem or ("missing" if saved is None else "it holds no results")
        return [], [f"the {what} left no evidence that can be trusted ({rel}: {why})"]
    return [dict(r) for r in saved["results"]], []


def report_differences(report: dict[str, Any], suite: dict[str, Any], cells: Sequence[CellRecord],
                       sensitivity: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]]) -> list[str]:
    """Where report.json differs from the evidence (before anything is recomputed): its suite, cells (gates aside),
    sensitivity verdicts and step audits."""
    problems = []
    if {k: v for k, v in (report.get("suite") or {}).items() if k != "only"} != suite:
        problems.append("report.json's suite differs from the suite the run recorded (run.json)")
    evidence = {c.id: c for c in cells}
    for cell in report.get("cells") or []:
        cid = cell.get("id")
        shown = {k: v for k, v in cell.items() if k != "gate"}
        saved = evidence.get(cid)
        if saved is None:
            problems.append(f"report.json's cell {cid} has no evidence")
        elif shown != saved.to_dict() and not (saved.error and (cell.get("details") or {}).get("error") == saved.error):
            problems.append(f"report.json's cell {cid} differs from its evidence (cell.json): the report was edited")
    if list(report.get("sensitivity") or []) != list(sensitivity):
        problems.append("report.json's sensitivity verdicts differ from their evidence (sensitivity.json)")
    if list(report.get("step_audit") or []) != list(steps):
        problems.append("report.json's step audits differ from their evidence (step_audit/results.json)")
    return problems


__all__ = ["GateSettings", "Recomputed", "read_run_report", "recompute", "render_report"]
