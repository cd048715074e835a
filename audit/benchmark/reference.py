"""A benchmark run's output directory read into the benchmark's reference: what the page and the verdicts use.

:func:`measure` reads ``report.json`` through the one checked reader and ``timings.json`` (wall clock and peak
memory, which the report leaves out), and keeps per cell: its defense and budget, every accountant's epsilon of its
claim, the settings that define the model (architecture, batch, steps, learning rate, clip, group size, users), its
utility (linear probe and k-NN, the defense's own metrics, the classifier's test accuracy), the same of its
untrained init, each test example's correctness packed (:func:`privaudit.defenses.evaluation.utility.pack_correct`), the
ALM's privacy-utility curve, and its training time. Nothing is recomputed: the reference is the run's measurement.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from privaudit.audit.report.schema import load_report
from privaudit.core.errors import ConfigError
from privaudit.core.io import read_json

#: The resolved hyper-parameters the page shows (those a cell has).
SETTINGS = ("encoder", "width", "pool", "rep_dim", "proj_hidden", "proj_dim", "batch_size", "epochs", "lr",
            "optimizer", "clip", "max_grad_norm", "group_size", "temperature", "sensitivity", "rounds",
            "clients_per_round", "users_per_client", "local_steps", "local_batch_size", "examples_per_user",
            "classes_per_user", "client_lr", "head_lr_scale", "server_lr", "clip_norm", "momentum", "mechanism",
            "sensitivity_m", "head_l2", "init", "pretrain")


def measure(run: str | Path) -> dict[str, Any]:
    """The reference of the benchmark run in ``run`` (module docstring); a ConfigError when it is not one."""
    run = Path(run)
    report = load_report(run)
    timings_path = run / "timings.json"
    timings = read_json(timings_path) if timings_path.is_file() else {}
    cells = [_cell(c, timings) for c in report["cells"]]
    if not any(c["correct"] for c in cells):
        raise ConfigError(f"{run}: no cell kept its per-example correctness; run a suite with [utility] "
                          "per_example = true (suites/benchmark-fashion-mnist.toml)")
    peaks = [v for v in (timings.get("peak_rss_mb") or {}).values() if isinstance(v, (int, float))]
    runner = timings.get("peak_rss_mb_runner")
    return {
        "suite": report["suite"]["name"], "commit": report.get("git_commit"), "version": report["version"],
        "device": report["device"], "gate": (report.get("gate") or {}).get("status"),
        "run": {**_wall(timings), "jobs": timings.get("jobs"), "created": timings.get("created"),
                "cells_timed": sum(c["train_seconds"] is not None for c in cells),
                "peak_rss_mb": max(peaks + ([runner] if isinstance(runner, (int, float)) else []), default=None)},
        "cells": cells,
    }


def _wall(timings: Mapping[str, Any]) -> dict[str, Any]:
    """The run's wall time: this run's and, where it resumed earlier ones, theirs added (``runs``: how many)."""
    totals = [e.get("total") for e in timings.get("earlier") or []] + [timings.get("total")]
    if any(not _finite(t) for t in totals):
        return {"wall_seconds": None, "runs": len(totals)}
    return {"wall_seconds": sum(totals), "runs": len(totals)}


def _cell(record: Mapping[str, Any], timings: Mapping[str, Any]) -> dict[str, Any]:
    details = record.get("details") or {}
    utility = dict(record.get("utility") or {})
    panel = utility.pop("panel", None) or {}
    curve = utility.pop("curve", None)
    params = details.get("params") or {}
    stages = (timings.get("cells") or {}).get(record["id"]) or {}
    claim = (details.get("claim") or {}).get("params") or {}
    return {
        "id": record["id"], "label": record["defense"], "defense": details.get("defense_name"),
        "target_epsilon": record.get("target_epsilon"), "delta": record.get("delta"),
        "epsilon": {k: v for k, v in (record.get("epsilon") or {}).items() if _finite(v)},
        "noise_multiplier": _noise(claim), "steps": details.get("steps"), "n_train": details.get("n_train"),
        "settings": {k: params[k] for k in SETTINGS if k in params},
        "utility": {k: v for k, v in utility.items() if _finite(v)},
        "init": panel.get("init"), "vs_init": panel.get("vs_init"), "correct": panel.get("correct"),
        "curve": None if curve is None else curve.get("rows"), "curve_draws": None if curve is None else curve.get(
            "draws"),
        "train_seconds": stages.get("train"), "utility_seconds": stages.get("utility"),
        "stage_seconds": {k: v for k, v in stages.items() if _finite(v)},  # the next run's progress priors
        "error": details.get("error"),
    }


def _noise(claim: Mapping[str, Any]) -> float | None:
    """The claim's noise multiplier (the gradient's, for a DP-SGD-style claim), or None."""
    many = claim.get("noise_multipliers")
    if isinstance(many, Mapping) and many:
        return many.get("gradient", next(iter(many.values())))
    one = claim.get("noise_multiplier")
    return one if _finite(one) else None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
