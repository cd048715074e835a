"""The trajectory bound's calibration check (privaudit.audit.verify.trajectory_calibration): calibrated trials pass it,
a planted bias and a planted dependence between trials fail it; runs are read from their report.json; the committed
page is the reference's render."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from privaudit.attacks.bounds.trajectory import TrajectoryCounts, mu_point
from privaudit.audit.verify.trajectory_calibration import (calibration, cell_deviations, estimate_deviations,
                                                           summarise)
from privaudit.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def cell_counts(rng: np.random.Generator, *, mu: float = 0.4, n0: int = 6000, n1: int = 2000, scale: float = 1.0,
                shared: float = 0.0) -> dict:
    """A cell's saved trajectory counts from trials x ~ N(label, z^2), z = 1 / mu, through the real counter; the
    canary enters at ``scale`` times its design and the present trials share one offset of std ``shared``."""
    z = 1.0 / mu
    counts = TrajectoryCounts(threshold=0.5)
    offset = rng.normal(0.0, shared) if shared else 0.0
    counts.add(rng.normal(0.0, z, n0), rng.normal(scale + offset, z, n1))
    lower = 0.0  # the bound itself is not what these tests read
    return {**counts.to_dict(), "mu_claim": mu, "mu_lower": lower,
            "estimates": {"gaussian_moments": {"mu_step": counts.moment_mu()},
                          "per_step_point": {"mu_step": mu_point(counts.fp, counts.n0, counts.fn, counts.n1)}}}


def deviations(seed: int, cells: int = 300, **kw) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    rows = [estimate_deviations(cell_counts(rng, **kw)) for _ in range(cells)]
    return summarise([r["moment_z"] for r in rows]), summarise([r["point_z"] for r in rows])


def test_calibrated_trials_sit_near_standard_normal():
    moment, point = deviations(0)
    for s in (moment, point):
        assert abs(s["mean"]) < 4 / np.sqrt(s["count"])
        assert 0.85 < s["std"] < 1.15
        assert s["bias_p"] > 1e-3 and s["dispersion_p"] > 1e-3


def test_a_canary_entering_above_its_design_is_a_bias():
    moment, point = deviations(1, scale=1.1)  # 0.1 D: about 1.5 standard errors of one cell's moment estimate
    assert moment["mean"] > 1.2 and moment["bias_p"] < 1e-6
    assert point["mean"] > 1.0 and point["bias_p"] < 1e-6


def test_trials_sharing_a_component_are_over_dispersed():
    moment, point = deviations(2, shared=0.15)
    assert moment["std"] > 1.5 and moment["dispersion_p"] < 1e-6
    assert point["std"] > 1.3 and point["dispersion_p"] < 1e-6
    assert abs(moment["mean"]) < 0.5  # no bias: only the spread gives it away


def test_the_standard_errors_are_the_closed_forms():
    counts = {"n0": 100, "n1": 100, "fp": 40, "fn": 40, "mu_claim": 0.5,
              "estimates": {"gaussian_moments": {"mu_step": 0.6}, "per_step_point": {"mu_step": 0.6}}}
    out = estimate_deviations(counts)
    assert out["moment_z"] == pytest.approx(0.1 / np.sqrt(0.02 + 0.25 / 400))
    from scipy import stats

    one = 0.4 * 0.6 / 100 / stats.norm.pdf(stats.norm.ppf(0.4)) ** 2
    assert out["point_z"] == pytest.approx(0.1 / np.sqrt(2 * one))
    assert estimate_deviations({**counts, "fp": 0})["point_z"] is None


def write_report(directory: Path, cells: list[dict]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps({"suite": {"name": "t"}, "git_commit": "abc", "cells": cells}))
    return directory


def report_cell(defense: str, seed: int, eps: float, counts: dict | None) -> dict:
    attacks = {"gradient-canary": {"details": {"trajectory_bound": {"counts": counts}} if counts else {}}}
    return {"id": f"digits/{defense}/eps={eps:g}/seed={seed}", "dataset": "digits", "defense": defense, "seed": seed,
            "attacks": attacks}


def test_runs_count_one_cell_per_seed_and_name_a_bad_path(tmp_path):
    rng = np.random.default_rng(3)
    cells = [report_cell(d, s, e, cell_counts(rng)) for d in ("dp-gcl", "logit-dp") for s in range(3) for e in (1, 8)]
    cells[0]["attacks"]["gradient-canary"]["details"]["trajectory_bound"]["counts"]["mu_lower"] = 9.0
    run = write_report(tmp_path / "run", cells + [report_cell("dpcl-simclr", 0, 1, None)])
    rows = cell_deviations([run])
    assert [(r["defense"], r["seed"]) for r in rows] == [(d, s) for d in ("dp-gcl", "logit-dp") for s in range(3)]
    result = calibration([run])
    assert result["all"]["cells"] == 6 and result["all"]["rejected"] == 1
    assert set(result["defenses"]) == {"dp-gcl", "logit-dp"} and result["defenses"]["dp-gcl"]["rejected"] == 1
    with pytest.raises(ConfigError, match="no cell holds a trajectory bound"):
        cell_deviations([write_report(tmp_path / "empty", [report_cell("dp-gcl", 0, 1, None)])])
    with pytest.raises(ConfigError, match=r"missing.*is not a privaudit report.json"):
        cell_deviations([tmp_path / "missing"])
    with pytest.raises(ConfigError, match="at least 2 estimates"):
        summarise([1.0])


def test_the_page_is_the_references_render():
    """docs/trajectory-calibration.md comes from reports/reference/trajectory-calibration/calibration.json; the
    measurement (suites/trajectory-calibration.toml) finds the bound calibrated on every gated engine."""
    done = subprocess.run([sys.executable, "scripts/render_trajectory_calibration.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((ROOT / "reports/reference/trajectory-calibration/calibration.json").read_text())
    assert set(result["defenses"]) == {"dp-fedemb", "dp-gcl", "dpcl-simclr", "logit-dp"}
    assert all(s["cells"] == 50 for s in result["defenses"].values())
    moment = result["all"]["moment"]
    assert abs(moment["mean"]) * np.sqrt(moment["count"]) < 3 and 0.8 < moment["std"] < 1.2
    assert result["all"]["rejected"] <= 0.05 * result["all"]["cells"] + 3 * np.sqrt(0.05 * result["all"]["cells"])


def test_a_stale_page_fails_the_check_and_nothing_is_written(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    from rendered_page import write_or_check

    page = tmp_path / "docs" / "p.md"
    page.parent.mkdir()
    assert write_or_check(page, "new\n", check=True) == 1 and not page.exists()
    assert "docs/p.md is stale: run the script" in capsys.readouterr().out
    assert write_or_check(page, "new\n", check=False) == 0 and page.read_text() == "new\n"
    assert write_or_check(page, "new\n", check=True) == 0
