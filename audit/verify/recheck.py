"""Each piece of a run's evidence recomputed and compared with what it says: a cell's epsilons re-accounted from
its claim, its attacks' AUC, guess counts and bounds from their saved scores and counts, its claim checks re-run
(:func:`recheck_cell`: on a copy of the cell record's JSON data, which the recomputed values replace), and each
sensitivity verdict and step-audit pair re-derived; every function returns the differences it found
(:func:`privaudit.audit.verify.evidence.recompute` gathers them).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from privaudit.audit.gate.recompute import family_bound
from privaudit.audit.report.records import CellRecord
from privaudit.core.errors import ConfigError
from privaudit.core.io import read_json, strict


REL_TOL = 1e-9  # recomputation is the same arithmetic on the same inputs: any larger difference is an edit


# -- recomputation ---------------------------------------------------------------------------------------
def same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=1e-12)
    return a == b


def recheck_cell(out: Path, cell: CellRecord) -> tuple[CellRecord, list[str]]:
    """A cell's record with its epsilons re-accounted (:func:`reaccount`), its attacks' bounds recomputed
    (:func:`rebound`) and its claim checks re-run (:func:`recheck_claims`) from its evidence, the recomputed values
    in place of the saved ones; and the differences found. A cell that errored has nothing to recheck."""
    if cell.error:
        return cell, []
    data = cell.to_dict()
    problems = reaccount(data) + rebound(out, data) + recheck_claims(out, data)
    return CellRecord.from_dict(data, f"cell {cell.id}"), problems


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
                for name, r in results.items() if not same(r["epsilon"], (cell.get("epsilon") or {}).get(name))]
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
            if not same(auc, attack.get("auc")):
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
            if value is not None and not same(value, bound.get("epsilon")):
                problems.append(f"{where}: {key} recomputes to {value:.6g} from its counts, the evidence says "
                                f"{bound.get('epsilon')!r}")
            if attack.get(field) is not None and not same(attack[field], bound.get("epsilon")):
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
    from privaudit.attacks.step.step_distinguisher import gdp_mu_recomputed

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
           for k, v in again.items() if not same(v, pair.get(k))]
    return out + _support_differences(pair)


def _support_differences(pair: dict[str, Any]) -> list[str]:
    """A release pair's reachability test (:mod:`privaudit.attacks.step.reachability`) recomputed from its counts: each
    direction's Clopper-Pearson lower bound on the impossible outputs' probability; the differences."""
    from privaudit.attacks.step.reachability import impossible_fraction_lower

    out = []
    for name, d in (pair.get("support") or {}).items():
        try:
            again = impossible_fraction_lower(int(d["impossible"]), int(d["draws"]), float(d["alpha"]))
        except (KeyError, TypeError, ValueError) as exc:
            out.append(f"reachability test {name} cannot be recomputed from its counts ({type(exc).__name__}: {exc})")
            continue
        if not same(again, d.get("fraction_lower")):
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
