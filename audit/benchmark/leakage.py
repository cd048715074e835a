"""A leakage run's output directory read into the leakage reference: every attack's ROC figures, from its scores.

The leakage suite (``suites/benchmark-fashion-mnist-leakage.toml``) attacks the benchmark's models with members a
random half of the audit pool. :func:`measure_leakage` reads each cell's record (``report.json``, through the one
checked reader: its claim, the tightest accountant's epsilon, its gate verdicts) and each attack's saved result
(``cells/*/attacks/<label>/``: scores, membership, variants, bound), and keeps per attack and test variant the AUC
and, at FPR 0.1% and 1%, the members caught (the TPR's numerator: its exact interval is the page's, see
:func:`tpr_interval`), for the tests the page shows (:func:`page_scores`). The figures come from those scores rounded
to float32 by :mod:`privaudit.attacks.metrics`, the code every report uses; :func:`export_scores` writes the same
float32 scores beside the reference (half the size), so every AUC and TPR of the page recomputes from them exactly
(the sound epsilon bounds are the attacks' own, from the float64 scores of the run's ``cells/*/attacks/``).
:func:`merge_cells` puts the cells a later run of some of them re-measured into a full run's reference, each naming
its own commit.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from privaudit.attacks import metrics
from privaudit.attacks.result import AttackResult
from privaudit.audit.benchmark.stats import accuracy_interval
from privaudit.audit.report.schema import load_report
from privaudit.core.errors import ConfigError
from privaudit.core.io import read_json

#: The FPRs the page reads the TPR at (RMIA's Table 2 and LiRA's low-FPR regime).
FPRS = (0.001, 0.01)
#: The tests the page shows besides each attack's primary: LiRA's fixed-variance tests, RMIA's two modes.
PAGE_TESTS = {"lira": ("online-fixed", "offline-fixed"), "rmia": ("online", "offline")}
#: What the reference keeps of each gate comparison of a cell.
COMPARISON_KEYS = ("attack", "eps_lower_bound", "epsilon", "accountant", "verdict", "method")


def attack_dirs(run: Path, record: Mapping[str, Any]) -> dict[str, Path]:
    """Each attack's saved result of a report's cell, by label: the directory of the ``scores`` file its summary
    names (the run's own cell, never a stale one a changed suite left beside it)."""
    out = {}
    for label, summary in (record.get("attacks") or {}).items():
        scores = (summary or {}).get("scores")
        if scores and (run / scores).parent.joinpath("result.json").is_file():
            out[label] = (run / scores).parent
    return out


def cell_stages(run: Path, record: Mapping[str, Any], timings: Mapping[str, Any]) -> dict[str, float]:
    """A cell's measured seconds per stage: its own ``timings.json`` (beside its attacks; a cell an earlier run left
    to a resumed one keeps it), else the run's."""
    stages = (timings.get("cells") or {}).get(record["id"]) or {}
    for d in attack_dirs(run, record).values():
        own = d.parent.parent / "timings.json"
        if own.is_file():
            stages = read_json(own)
            break
    return {k: float(v) for k, v in stages.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def roc_row(scores: np.ndarray, membership: np.ndarray) -> dict[str, Any]:
    """AUC and, at each FPR of :data:`FPRS`, the members caught (``tp``) out of ``n_members``."""
    m = np.asarray(membership, dtype=bool)
    row: dict[str, Any] = {"auc": metrics.auc(scores, m), "n_members": int(m.sum()), "n_nonmembers": int((~m).sum())}
    row["tp"] = {metrics.fpr_key(t): int(round(metrics.tpr_at_fpr(scores, m, t) * row["n_members"])) for t in FPRS}
    return row


def page_scores(result: AttackResult, private: bool = False) -> dict[str, np.ndarray]:
    """The scores of the tests the page shows, rounded to float32: the primary, then (for a non-private target)
    :data:`PAGE_TESTS`; the DP cells' table shows the primary alone."""
    scores = {result.variant: result.scores}
    if not private:
        scores.update({t: result.variants[t] for t in PAGE_TESTS.get(result.attack, ()) if t in result.variants})
    return {t: np.asarray(s, dtype=np.float32) for t, s in scores.items()}


def attack_entry(result: AttackResult, private: bool = False) -> dict[str, Any]:
    """One attack's reference entry: its page tests (:func:`roc_row` of :func:`page_scores`), its sound bound."""
    tests = {t: roc_row(s, result.membership) for t, s in page_scores(result, private).items()}
    return {"attack": result.attack, "primary": result.variant, "tests": tests,
            "statistic": result.config.get("statistic"), "a": result.extras.get("a"),
            "a_fitted": result.extras.get("a_fitted"),
            "eps_lower_bound": None if result.bound is None else result.bound.epsilon,
            "eps_lb_method": None if result.bound is None else result.bound.label,
            "counts": {k: v for k, v in result.counts.items() if k in (
                "n_reference_models", "n_references_trained", "n_in_per_candidate", "n_shadow_models",
                "release_probes")}}


def load_result(d: Path, loaded: dict[Path, AttackResult] | None = None) -> AttackResult:
    """The attack result saved in ``d``, read once per ``loaded`` (a caller's cache: the reference and the scores'
    export read the same results)."""
    if loaded is None:
        return AttackResult.load(d)
    if d not in loaded:
        loaded[d] = AttackResult.load(d)
    return loaded[d]


def measure_leakage(run: str | Path, loaded: dict[Path, AttackResult] | None = None) -> dict[str, Any]:
    """The leakage reference of the run in ``run`` (module docstring); a ConfigError when it has no attack."""
    run = Path(run)
    report = load_report(run)
    timings = read_json(run / "timings.json") if (run / "timings.json").is_file() else {}
    cells = []
    for record in report["cells"]:
        private = record.get("target_epsilon") is not None
        attacks = {label: attack_entry(load_result(d, loaded), private)
                   for label, d in attack_dirs(run, record).items()}
        gate = record.get("gate") or {}
        cells.append({"id": record["id"], "label": record["defense"], "target_epsilon": record.get("target_epsilon"),
                      "epsilon": {k: v for k, v in (record.get("epsilon") or {}).items() if v is not None},
                      "utility": record.get("utility") or {}, "gate": gate.get("status"),
                      "steps": (record.get("details") or {}).get("steps"),
                      "comparisons": [{k: c.get(k) for k in COMPARISON_KEYS} for c in gate.get("comparisons") or []],
                      "attacks": attacks,
                      # the next run's progress priors (the suite's `timings` names this reference)
                      "stage_seconds": cell_stages(run, record, timings)})
    if not any(c["attacks"] for c in cells):
        raise ConfigError(f"{run}: no attack result under cells/*/attacks; run suites/benchmark-fashion-mnist-"
                          "leakage.toml")
    return {"suite": report["suite"]["name"], "commit": report.get("git_commit"), "version": report["version"],
            "device": report["device"], "gate": (report.get("gate") or {}).get("status"),
            "gate_reasons": list((report.get("gate") or {}).get("reasons") or []),
            "run": {"wall_seconds": timings.get("total"), "jobs": timings.get("jobs")}, "cells": cells}


def export_scores(run: str | Path, loaded: dict[Path, AttackResult] | None = None) -> dict[str, bytes]:
    """One compressed ``.npz`` per cell (by a file name made from its id): ``membership``, ``index`` and, for each
    attack label, ``<label>/<test>`` for each of its :func:`page_scores` (float32)."""
    run = Path(run)
    out = {}
    for record in load_report(run)["cells"]:
        arrays: dict[str, np.ndarray] = {}
        for label, d in attack_dirs(run, record).items():
            result = load_result(d, loaded)
            arrays.setdefault("membership", np.asarray(result.membership, dtype=bool))
            if result.index is not None:
                arrays.setdefault("index", np.asarray(result.index))
            private = record.get("target_epsilon") is not None
            arrays.update({f"{label}/{t}": s for t, s in page_scores(result, private).items()})
        if arrays:
            buffer = io.BytesIO()
            np.savez_compressed(buffer, **arrays)
            out[record["id"].replace("/", "__") + ".npz"] = buffer.getvalue()
    return out


def tpr_interval(row: Mapping[str, Any], fpr: float, level: float = 0.95) -> tuple[float, float, float]:
    """The TPR at ``fpr`` and its exact (Clopper-Pearson) interval over the members: the threshold is set on the
    non-members alone, so given it the members caught are Binomial(n_members, TPR)."""
    tp, n = int(row["tp"][metrics.fpr_key(fpr)]), int(row["n_members"])
    low, high = accuracy_interval(tp, n, level)
    return tp / n, low, high


def merge_cells(reference: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``reference`` (a full run's) with the cells a later run of some of its cells (``--only``: ``update``, its
    :func:`measure_leakage`) re-measured in their place. Each replaced cell names that run's commit (``commit``);
    the reference keeps its full run's commit and gate, and lists each update under ``updates``: its commit, the
    cells it replaced, their own gates and the update run's gate reasons other than the cells it did not run. A cell
    the reference lacks, or an update that ran none, is a ConfigError (an update re-measures, it does not extend)."""
    ran = [c for c in update["cells"] if c["attacks"]]
    known = {c["id"] for c in reference["cells"]}
    if not ran:
        raise ConfigError("the update run has no cell with an attack result")
    extra = sorted(c["id"] for c in ran if c["id"] not in known)
    if extra:
        raise ConfigError(f"the update run's cells {extra} are not in the reference: re-measure its cells only")
    new = {c["id"]: {**c, "commit": update.get("commit")} for c in ran}
    cells = [new.get(c["id"], c) for c in reference["cells"]]
    reasons = [r for r in update.get("gate_reasons") or []
               if not ("no result" in r and r.split(":")[0].removeprefix("cell ") not in new)]
    record = {"commit": update.get("commit"), "cells": sorted(new), "cell_gates": {i: c["gate"] for i, c in new.items()},
              "gate_reasons": reasons, "wall_seconds": (update.get("run") or {}).get("wall_seconds")}
    earlier = [{**u, "cells": [i for i in u["cells"] if i not in new],
                "cell_gates": {i: g for i, g in u["cell_gates"].items() if i not in new}}
               for u in reference.get("updates") or []]
    return {**reference, "cells": cells, "updates": [u for u in earlier if u["cells"]] + [record]}
