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

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from privaudit.audit.gate.judge import GateSettings, gate_settings, judge_run
from privaudit.audit.gate.recompute import family_bound
from privaudit.audit.report import write_report
from privaudit.audit.report.schema import load_report
from privaudit.audit.run.cache import MANIFEST, SENSITIVITY, STEP_AUDIT, cell_record, file_sha256, read_keyed
from privaudit.audit.suite.model import config_hash
from privaudit.core.errors import ConfigError
from privaudit.core.io import read_json, strict

REL_TOL = 1e-9  # recomputation is the same arithmetic on the same inputs: any larger difference is an edit


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
    """A run's gate recomputed from its evidence (``gate``), and ``report``: report.json with its cells,
    sensitivity verdicts and step audits replaced by the evidence's, every verdict and gate recomputed (what
    ``privaudit report`` renders)."""

    report: dict[str, Any]
    gate: dict[str, Any]


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
    problems += [p for cell in cells for p in reaccount(cell) + rebound(out, cell) + recheck_claims(out, cell)]
    problems += [p for r in sensitivity for p in resensitivity(r)] + [p for r in steps for p in restep(r)]
    gate = judge_run(cells, sensitivity, steps, settings, problems)
    claimed = (report.get("gate") or {}).get("status") if isinstance(report.get("gate"), dict) else None
    if claimed != gate["status"]:
        gate["reasons"].append(f"report.json says the gate is {claimed!r}, its evidence says {gate['status']!r}: the "
                               "report was edited or does not belong to this evidence")
        gate["status"] = "fail"
    shown = {**report, "cells": cells, "sensitivity": sensitivity, "gate": gate}
    if settings.step_audit is not None or "step_audit" in report:
        shown["step_audit"] = steps
    return Recomputed(shown, gate)


def _unverified(report: dict[str, Any], problem: str) -> Recomputed:
    """The gate of a report without usable evidence: FAIL, saying why; each cell's gate FAIL (nothing verified)."""
    reason = f"no verdict can be recomputed: {problem}"
    gate = {"status": "fail", "reasons": [reason], "notes": [], "family_wise_error": None, "controls": 0,
            "controls_caught": 0}
    cells = [{**c, "gate": {"status": "fail", "reasons": [reason], "comparisons": []}} for c in report["cells"]]
    return Recomputed({**report, "cells": cells, "gate": gate}, gate)


# -- evidence files ------------------------------------------------------------------------------------
def load_cells(out: Path, grid: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The grid's finished cells' records (cell.json, verified) and errored cells (error.json) in grid order, and
    the problems of those that cannot be trusted; a cell with neither file has no result (the gate says so)."""
    cells, problems = [], []
    root = out.resolve()
    for g in grid:
        cid, directory = g.get("id"), (out / str(g.get("dir"))).resolve()
        if not directory.is_relative_to(root):
            problems.append(f"{MANIFEST}: cell {cid}'s directory lies outside the output directory")
            continue
        saved, problem = read_keyed(directory / "cell.json", str(g.get("key")), out)
        record, problem = cell_record(saved) if saved is not None else (None, problem)
        if record is not None and record.get("id") == cid:
            cells.append(dict(record))
        elif problem or record is not None:
            problems.append(f"cell {cid}: its evidence cannot be trusted: {problem or 'cell.json holds another cell'}")
        elif (directory / "error.json").is_file():
            cells.append(_errored(cid, directory / "error.json"))
    return cells, problems


def _errored(cid: str, path: Path) -> dict[str, Any]:
    """The record of a cell that errored, from its error.json (its hash is checked through the manifest)."""
    try:
        error = str(read_json(path).get("error") or "no error recorded")
    except (OSError, ValueError, AttributeError) as exc:
        error = f"error.json does not parse ({type(exc).__name__})"
    return {"id": cid, "claim": None, "epsilon": {}, "attacks": {}, "details": {"error": error}}


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


def report_differences(report: dict[str, Any], suite: dict[str, Any], cells: Sequence[dict[str, Any]],
                       sensitivity: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]]) -> list[str]:
    """Where report.json differs from the evidence (before anything is recomputed): its suite, cells (gates aside),
    sensitivity verdicts and step audits."""
    problems = []
    if {k: v for k, v in (report.get("suite") or {}).items() if k != "only"} != suite:
        problems.append("report.json's suite differs from the suite the run recorded (run.json)")
    evidence = {c["id"]: c for c in cells}
    for cell in report.get("cells") or []:
        cid = cell.get("id")
        shown = {k: v for k, v in cell.items() if k != "gate"}
        saved = evidence.get(cid)
        if saved is None:
            problems.append(f"report.json's cell {cid} has no evidence")
        elif shown != saved and not (saved["details"].get("error")
                                     and (cell.get("details") or {}).get("error") == saved["details"]["error"]):
            problems.append(f"report.json's cell {cid} differs from its evidence (cell.json): the report was edited")
    if list(report.get("sensitivity") or []) != list(sensitivity):
        problems.append("report.json's sensitivity verdicts differ from their evidence (sensitivity.json)")
    if list(report.get("step_audit") or []) != list(steps):
        problems.append("report.json's step audits differ from their evidence (step_audit/results.json)")
    return problems


# -- recomputation ---------------------------------------------------------------------------------------
def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=1e-12)
    return a == b


def reaccount(cell: dict[str, Any]) -> list[str]:
    """Re-account the cell's saved claim through every accountant; the recomputed epsilons replace the saved ones
    (``epsilon``, ``details.epsilon``). Returns the differences found."""
    from privaudit.accountants import all_epsilons
    from privaudit.accountants.claim import PrivacyClaim

    details = cell.get("details") or {}
    if details.get("error"):
        return []
    try:
        claim = PrivacyClaim.from_dict(details["claim"])
    except (ConfigError, KeyError, TypeError, ValueError) as exc:
        return [f"cell {cell['id']}: its evidence holds no claim to re-account ({type(exc).__name__})"]
    results = strict({name: r.to_dict() for name, r in all_epsilons(claim).items()})
    problems = [f"cell {cell['id']}: accountant {name} re-accounts the claim to {r['epsilon']!r}, the evidence "
                f"says {(cell.get('epsilon') or {}).get(name)!r}"
                for name, r in results.items() if not _same(r["epsilon"], (cell.get("epsilon") or {}).get(name))]
    cell["epsilon"] = {name: r["epsilon"] for name, r in results.items()}
    cell["details"] = {**details, "epsilon": results}
    return problems


def recount(bound: dict[str, Any], scores: np.ndarray, membership: np.ndarray) -> dict[str, Any] | None:
    """The guess counts of ``bound`` re-derived from the scores it was computed on, or None where its guesses are
    not on these scores (pairs drawn from the candidates, a multi-run split, or another m)."""
    from privaudit.attacks.bounds.one_run import one_run_guesses
    from privaudit.attacks.bounds.fdp import one_sided_counts

    c, method = bound.get("counts") or {}, bound.get("method")
    if int(c.get("m", -1)) != scores.size:
        return None
    if method in ("one-run-fdp", "one-run-fdp-mechanism"):
        _, r, v = one_sided_counts(scores, membership, int(c["k_pos"]))
        out = {"r": r, "v": v}
        if c.get("ladder"):  # the mechanism bound's guess ladder: every rung's counts
            out["ladder"] = [dict(zip(("k", "r", "v"), (int(g["k"]),
                                                       *one_sided_counts(scores, membership, int(g["k"]))[1:])))
                             for g in c["ladder"]]
        return out
    if method not in ("one-run", "one-run-paired", "one-run-search", "one-run-best"):
        return None
    guesses = one_run_guesses(scores, int(c["k_pos"]), int(c["k_neg"]))
    out = {"r": int(np.count_nonzero(guesses)),
           "v": int(np.sum((guesses == 1) & membership) + np.sum((guesses == -1) & ~membership))}
    if method == "one-run-best":
        _, out["r_fdp"], out["v_fdp"] = one_sided_counts(scores, membership, int(c["k_fdp"]))
    return out


def rebound(out: Path, cell: dict[str, Any]) -> list[str]:
    """Each attack's AUC and bounds re-derived from its saved scores and counts (module doc, 3); the differences
    found."""
    from privaudit.attacks.metrics import summarize
    from privaudit.core.io import load_npz

    problems = []
    for label, attack in (cell.get("attacks") or {}).items():
        where = f"cell {cell['id']}: {label}"
        details = attack.get("details") or {}
        arrays = load_npz(out / attack["scores"]) if attack.get("scores") else None
        if arrays is not None:  # the AUC a gate's max_auc reads
            auc = summarize(arrays["scores"], arrays["membership"])["auc"]
            if not _same(auc, attack.get("auc")):
                problems.append(f"{where}: its AUC recomputes to {auc:.6g} from the saved scores, the evidence says "
                                f"{attack.get('auc')!r}")
        for field, key in (("eps_lower_bound", "bound"), ("eps_lb_mechanism", "mechanism_bound"),
                           ("eps_lb_trajectory", "trajectory_bound")):
            bound = details.get(key)
            if not bound:
                continue
            if key == "trajectory_bound":
                problems += _trajectory_event(where, bound, cell)
            if arrays is not None:
                counts = recount(bound, np.asarray(arrays["scores"], np.float64),
                                 np.asarray(arrays["membership"], bool))
                problems += [f"{where}: {key}'s {k} recounts to {v} from the saved scores, the evidence says "
                             f"{bound['counts'].get(k)!r}" for k, v in (counts or {}).items()
                             if v != bound["counts"].get(k)]
            value = family_bound(bound, 1) if bound.get("counts") else None
            if value is not None and not _same(value, bound.get("epsilon")):
                problems.append(f"{where}: {key} recomputes to {value:.6g} from its counts, the evidence says "
                                f"{bound.get('epsilon')!r}")
            if attack.get(field) is not None and not _same(attack[field], bound.get("epsilon")):
                problems.append(f"{where}: {field} {attack[field]!r} is not its bound's {bound.get('epsilon')!r}")
    return problems


def _trajectory_event(where: str, bound: dict[str, Any], cell: dict[str, Any]) -> list[str]:
    """The trajectory bound composes its per-step mu_lb over the claim's event: the event its counts record must be
    the cell's claim's. A different one is a difference, and the claim's replaces it (the gate then composes over
    the claim's steps)."""
    from privaudit.accountants.events import event_from_dict, event_to_dict

    claim = ((cell.get("details") or {}).get("claim") or {}).get("event")
    counts = bound.get("counts") or {}
    if claim is None:
        return []
    try:
        same = event_to_dict(event_from_dict(counts["event"])) == event_to_dict(event_from_dict(claim))
    except (ConfigError, KeyError, TypeError, ValueError):
        same = False
    if same:
        return []
    bound["counts"] = {**counts, "event": claim}
    return [f"{where}: trajectory_bound was composed over another event than the cell's claim"]


def recheck_claims(out: Path, cell: dict[str, Any]) -> list[str]:
    """A DP cell's claim checks recomputed from its evidence (its ``claim_checks.json``, hashed in cell.json and
    run.json): the trace check and the step audit's claim (:func:`privaudit.audit.run.claim_checks.recheck`), then each
    step-audit pair's bounds and verdicts (:func:`restep`). The recomputed values replace the record's; returns the
    differences."""
    from privaudit.audit.run.claim_checks import recheck

    checks = cell.get("claim_checks")
    if not checks or (cell.get("details") or {}).get("error"):
        return []
    where, rel = f"cell {cell['id']}", str(checks.get("evidence"))
    path = (out / rel).resolve()
    try:
        if not path.is_relative_to(out.resolve()):
            raise ValueError("it lies outside the output directory")
        evidence = read_json(path)
        problems = recheck(checks, cell["details"]["claim"], evidence)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return [f"{where}: its claim checks' evidence {rel} cannot be read ({type(exc).__name__}: {exc})"]
    audit = checks.get("step_audit")
    problems += restep({**audit, "defense": "the cell's own step"}) if audit else []
    return [f"{where}: {p}" for p in problems]


def resensitivity(result: dict[str, Any]) -> list[str]:
    """A sensitivity verdict recomputed from the saved numbers (:func:`~privaudit.audit.sensitivity.verdict.
    recorded_verdict`); the difference, if any."""
    from privaudit.audit.sensitivity.verdict import recorded_verdict

    again = recorded_verdict(result)
    if again == result.get("verdict"):
        return []
    return [f"sensitivity claim {result.get('claim')}: its saved numbers give {again!r}, the evidence says "
            f"{result.get('verdict')!r}"]


def pair_bound_differences(pair: dict[str, Any]) -> list[str]:
    """A step-audit pair's sound bounds (GDP mu_lb, Clopper-Pearson epsilon_lb) recomputed from their saved counts
    at the pair's own confidence; the differences from the saved values."""
    from privaudit.attacks.step_distinguisher import gdp_mu_recomputed

    b = pair.get("bounds") or {}
    if pair.get("verdict") == "error" or not b:
        return []
    try:
        level = float(b["confidence"])
        again = {"mu_lower": gdp_mu_recomputed(b["gdp"], 1.0 - level),
                 "epsilon_lower": family_bound({"method": "clopper-pearson", "confidence": level,
                                                "delta": float(b["delta"]), "counts": b["clopper_pearson"]}, 1)}
    except (KeyError, TypeError, ValueError) as exc:
        return [f"bounds cannot be recomputed from its counts ({type(exc).__name__}: {exc})"]
    out = [f"{k} recomputes to {v:.6g} from its counts, the evidence says {pair.get(k)!r}"
           for k, v in again.items() if not _same(v, pair.get(k))]
    return out + _support_differences(pair)


def _support_differences(pair: dict[str, Any]) -> list[str]:
    """A release pair's reachability test (:mod:`privaudit.attacks.reachability`) recomputed from its counts: each
    direction's Clopper-Pearson lower bound on the impossible outputs' probability; the differences."""
    from privaudit.attacks.reachability import impossible_fraction_lower

    out = []
    for name, d in (pair.get("support") or {}).items():
        try:
            again = impossible_fraction_lower(int(d["impossible"]), int(d["draws"]), float(d["alpha"]))
        except (KeyError, TypeError, ValueError) as exc:
            out.append(f"reachability test {name} cannot be recomputed from its counts ({type(exc).__name__}: {exc})")
            continue
        if not _same(again, d.get("fraction_lower")):
            out.append(f"reachability test {name}'s fraction_lower recomputes to {again:.6g} from its counts, the "
                       f"evidence says {d.get('fraction_lower')!r}")
    return out


def restep(result: dict[str, Any]) -> list[str]:
    """A step audit's pair and defense verdicts recomputed from the saved bounds and claim; the differences."""
    from privaudit.audit.step.pairs import audit_verdict, recorded_pair_verdict

    name, claim, problems = result.get("defense"), result.get("claim") or {}, []
    pairs = [dict(p) for p in result.get("pairs") or []]
    for p in pairs:
        problems += [f"step audit of {name}: pair {p.get('pair')}'s {d}" for d in pair_bound_differences(p)]
        try:
            again = recorded_pair_verdict(p, claim)
        except (KeyError, TypeError) as exc:
            again = f"unreadable ({type(exc).__name__}: {exc})"
        if again != p.get("verdict"):
            problems.append(f"step audit of {name}: pair {p.get('pair')}'s saved bounds give {again!r}, the evidence "
                            f"says {p.get('verdict')!r}")
    if audit_verdict(pairs) != result.get("verdict"):
        problems.append(f"step audit of {name}: its pairs give {audit_verdict(pairs)!r}, the evidence says "
                        f"{result.get('verdict')!r}")
    return problems


__all__ = ["GateSettings", "Recomputed", "read_run_report", "recompute", "render_report"]
