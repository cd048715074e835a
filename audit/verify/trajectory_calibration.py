"""Is the white-box trajectory bound calibrated on this engine? Its per-step estimates against the claim, over runs.

The trajectory bound (:mod:`privaudit.attacks.bounds.trajectory`) is exact under one assumption the data can
contradict: given the auditor's labels, each step's canary observation is an independent draw of the claim's
Gaussian step, N(label, z^2) in units of the hypotheses' mean difference. Then, on a correct defense, each cell's
per-step estimates deviate from the claim's mu = 1 / z by draws of about N(0, 1) in units of their standard error:

* the Gaussian-moment estimate (mean difference over the pooled std), standard error
  sqrt(1 / n0 + 1 / n1 + mu^2 / (2 (n0 + n1)));
* the threshold estimate Phi^-1(1 - FP / n0) - Phi^-1(FN / n1), standard error by the delta method,
  sqrt(sum over the two rates of p (1 - p) / n / phi(Phi^-1(p))^2).

Pooled over the correct cells of one or more runs, a mean away from 0 says the canaries enter other than designed
(a bias); a sum of squares above chi-square(k) says the trials are not independent (over-dispersion: a component
shared by many trials, which shrinks the bound's effective sample and makes it anti-conservative). Cells of one
dataset, defense and seed at other epsilons share their noise draws (the same standard normals, scaled): only the
first of them counts as a realisation. What it cannot see: a dependence that leaves the first two moments of the
estimates unchanged, and anything on cells it is not given (give it correct cells only: a planted bug moves the
estimates by design).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from scipy import stats

from privaudit.core.errors import ConfigError

#: One-sided quantile the exceedance count is read at (its expected share is its level).
LEVEL = 0.05


def estimate_deviations(counts: dict[str, Any]) -> dict[str, float | None]:
    """The moment and threshold estimates' deviations from the claim's per-step mu, in standard errors (module
    docstring), from a trajectory bound's saved counts (None where an estimate is missing or a rate is 0 or 1)."""
    n0, n1, mu = int(counts["n0"]), int(counts["n1"]), float(counts["mu_claim"])
    estimates = counts.get("estimates") or {}
    moment = (estimates.get("gaussian_moments") or {}).get("mu_step")
    point = (estimates.get("per_step_point") or {}).get("mu_step")
    out: dict[str, float | None] = {"mu_claim": mu, "moment_z": None, "point_z": None}
    if min(n0, n1) < 2:
        return out
    if moment is not None:
        out["moment_z"] = (moment - mu) / math.sqrt(1 / n0 + 1 / n1 + mu * mu / (2 * (n0 + n1)))
    rates = ((int(counts["fp"]), n0), (int(counts["fn"]), n1))
    if point is not None and all(0 < k < n for k, n in rates):
        var = sum((k / n) * (1 - k / n) / n / stats.norm.pdf(stats.norm.ppf(k / n)) ** 2 for k, n in rates)
        out["point_z"] = (point - mu) / math.sqrt(var)
    return out


def summarise(z: Sequence[float], level: float = LEVEL) -> dict[str, Any]:
    """Mean, std, largest; the bias test (mean sqrt(k) against N(0, 1), two-sided p), the dispersion test (sum of
    squares against chi-square(k), upper p) and the count beyond the one-sided ``level`` quantile with its expectation."""
    z = np.asarray([v for v in z if v is not None and math.isfinite(v)], dtype=np.float64)
    k = int(z.size)
    if k < 2:
        raise ConfigError(f"trajectory calibration: needs at least 2 estimates, got {k}")
    return {"count": k, "mean": float(z.mean()), "std": float(z.std(ddof=1)), "max": float(z.max()),
            "bias_p": float(2 * stats.norm.sf(abs(z.mean()) * math.sqrt(k))),
            "dispersion_p": float(stats.chi2.sf(float((z ** 2).sum()), k)),
            "beyond": int((z > stats.norm.isf(level)).sum()), "beyond_expected": level * k}


def _report_cells(path: Path) -> list[dict[str, Any]]:
    """The cells of a run's report (``path``: the run's output directory or its report.json)."""
    report = path / "report.json" if path.is_dir() else path
    try:
        return list(json.loads(report.read_text())["cells"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"runs: {str(report)!r} is not a privaudit report.json ({type(exc).__name__})") from exc


def cell_deviations(runs: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every attack's trajectory-bound deviations in the runs' cells, the first cell of a dataset, defense and seed
    only (the others share its noise draws); each with its cell id and attack."""
    rows, seen = [], set()
    for run in runs:
        for cell in _report_cells(Path(run)):
            for name, attack in sorted((cell.get("attacks") or {}).items()):
                counts = (((attack or {}).get("details") or {}).get("trajectory_bound") or {}).get("counts")
                key = (cell.get("dataset"), cell.get("defense"), cell.get("seed"), name)
                if not counts or key in seen:
                    continue
                seen.add(key)
                rows.append({"cell": cell.get("id"), "defense": cell.get("defense"), "seed": cell.get("seed"),
                             "attack": name, "rejected": bool(float(counts["mu_lower"]) > float(counts["mu_claim"])),
                             **estimate_deviations(counts)})
    if not rows:
        raise ConfigError("runs: no cell holds a trajectory bound (gradient-canary or user-canary with trajectory on)")
    return rows


def _summary(rows: list[dict[str, Any]], level: float) -> dict[str, Any]:
    return {"moment": summarise([r["moment_z"] for r in rows], level),
            "point": summarise([r["point_z"] for r in rows], level),
            "rejected": sum(r["rejected"] for r in rows), "cells": len(rows)}


def calibration(runs: Iterable[str | Path], level: float = LEVEL) -> dict[str, Any]:
    """The cells' deviations, and :func:`summarise` of each estimate with the bound's rejections, per defense and over
    all the cells."""
    rows = cell_deviations(runs)
    defenses = sorted({str(r["defense"]) for r in rows})
    return {"cells": rows, "level": level, "all": _summary(rows, level),
            "defenses": {d: _summary([r for r in rows if str(r["defense"]) == d], level) for d in defenses}}
