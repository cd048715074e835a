"""The extension guide's examples (docs/extending.md) run: the example defense and attack, both ``module:Class``
plugins, in the guide's suite, with the DP cell's claim checks; plugin attacks behind ``allow_plugins`` as plugin
defenses are; the example defense's sensitivity bound holds on a neighbouring pair."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from privaudit.audit.cli import main
from privaudit.core.errors import ConfigError
from privaudit.core.io import read_json

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SUITE = EXAMPLES / "extending.toml"


@pytest.fixture
def examples_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def test_the_guide_suite_runs_both_plugins_with_the_claim_checks(examples_on_path, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["run", str(SUITE), "--out", str(out), "--jobs", "1", "--quiet"])
    assert code == 0, capsys.readouterr().err
    report = read_json(out / "report.json")
    (cell,) = report["cells"]
    assert cell["id"] == "digits/alignment/eps=8/seed=0" and cell["claim"]["relation"] == "add-remove"
    assert cell["epsilon"]["pld"] == pytest.approx(8.0, rel=0.01)  # calibrated by the base class
    stability = cell["attacks"]["stability"]
    assert 0 <= stability["auc"] <= 1 and stability["n_members"] + stability["n_nonmembers"] > 50
    assert math.isfinite(stability["eps_lower_bound"]) and stability["eps_lower_bound"] >= 0
    (saved,) = (out / "cells").glob("*/cell.json")
    checks = read_json(saved)["record"]["claim_checks"]  # the record the gate recomputes them from
    assert checks["trace"]["steps"] >= 1 and checks["trace"]["mismatches"] == []  # the trace the base class records
    assert [p["pair"] for p in checks["step_audit"]["pairs"]] == ["canary", "extreme"]  # the step as it ran
    compared = [c["attack"] for c in cell["gate"]["comparisons"]]
    assert compared == ["stability", "loss", "step audit (canary pair)", "step audit (extreme pair)"]
    assert report["gate"]["status"] == "pass"


@pytest.mark.parametrize("flag, message", [
    ("", "attacks[0].name: 'my_attack:StabilityAttack' is a plugin: importing it runs its code; set allow_plugins"),
    ("allow_plugins = true\n", None),
])
def test_a_plugin_attack_needs_allow_plugins(examples_on_path, tmp_path, capsys, flag, message):
    suite = tmp_path / "s.toml"
    suite.write_text(f'name = "p"\n{flag}[[defenses]]\nname = "nonprivate"\n[[attacks]]\n'
                     'name = "my_attack:StabilityAttack"\n')
    code = main(["validate", str(suite)])
    err = capsys.readouterr().err
    if message is None:
        assert code == 0, err
    else:
        assert code == 2 and message in err


def test_a_plugin_attack_must_be_an_attack_and_the_cli_needs_the_flag(examples_on_path):
    from privaudit.attacks.registry import attack_class
    from privaudit.audit.commands.common import check_attack_plugin

    assert attack_class("my_attack:StabilityAttack").__name__ == "StabilityAttack"
    with pytest.raises(ConfigError, match="plugin attack 'my_defense:AlignmentDPSGD' is not an Attack subclass"):
        attack_class("my_defense:AlignmentDPSGD")
    with pytest.raises(ConfigError, match="attack: unknown value 'telepathy'; accepted: loss"):
        attack_class("telepathy")
    with pytest.raises(ConfigError, match="--attack: 'my_attack:StabilityAttack' is a plugin"):
        check_attack_plugin("my_attack:StabilityAttack", allow_plugins=False)
    check_attack_plugin("my_attack:StabilityAttack", allow_plugins=True)
    check_attack_plugin("loss", allow_plugins=False)


def test_the_example_defense_sensitivity_is_its_clip_norm(examples_on_path, digits):
    """Removing one example from a batch moves the clipped sum by at most C (the claimed bound) and by exactly its
    own clipped unit (a unit's gradient reads only its own views): the bound is what the claim calibrates to."""
    from my_defense import AlignmentDPSGD

    defense = AlignmentDPSGD({"init": "random", "clip": 0.5})
    (q,) = defense.privatized_quantities(digits)
    batch = digits.train.x[:9]
    full, less = q.fn(batch, 7), q.fn(batch[:8], 7)
    moved = float(torch.linalg.vector_norm(full - less))
    assert q.bound(q.params) == 0.5 and 0 < moved <= 0.5 + 1e-6
    assert moved == pytest.approx(0.5, rel=1e-4)  # an untrained model's unit gradient exceeds C: clipped to C
