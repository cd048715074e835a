"""``privaudit gate-power``: which defenses are planted, the family size, the early stop, the statements, and one
small planted run through the real gate."""

import json

import pytest

from privaudit.audit.cli import main
from privaudit.audit.verify.gate_power import NEEDED, FactorRow
from privaudit.audit.verify.planted import PLANTED_COMPARISONS, plantable, suite_family
from privaudit.audit.verify.power_gate import judge_as_control
from privaudit.audit.verify.power_render import statements
from privaudit.audit.suite.model import GateConfig
from privaudit.audit.suite.load import load_suite

from cell_records import planted_record

SUITE = """
name = "power"
description = "gate-power test"
datasets = ["digits"]
seeds = [0]
epsilons = [8.0]
delta = 1e-5

[[defenses]]
name = "dp-gcl"
attacks = ["gradient-canary"]
primary = "gradient-canary"
params = { epochs = 1, batch_size = 128, init = "random" }  # no public pretraining: a planted run costs less

[[defenses]]
name = "alm"
attacks = ["loss"]
primary = "loss"
params = { epochs = 1 }

[[defenses]]
name = "nonprivate"
attacks = ["loss"]
params = { epochs = 1 }

[[attacks]]
name = "gradient-canary"
params = { canaries = 2000 }

[[attacks]]
name = "loss"
"""


@pytest.fixture()
def suite_file(tmp_path):
    path = tmp_path / "power.toml"
    path.write_text(f'out = "{tmp_path / "out"}"\n' + SUITE)
    return path


def test_plantable_defenses_and_the_family(suite_file):
    suite = load_suite(str(suite_file))
    planted, skipped = plantable(suite)
    assert [(p.label, p.control, p.attack.label) for p in planted] == [("dp-gcl", "control-undernoised",
                                                                         "gradient-canary")]
    assert any("alm" in s and "no planted control" in s for s in skipped)
    assert suite_family(suite) == 3 + 1  # dp-gcl: its primary and two step pairs; alm: its primary
    assert PLANTED_COMPARISONS == 3


def test_statements_say_the_largest_smallest_caught_factor():
    smallest = [{"defense": "a", "epsilon": 8.0, "plant": "noise", "smallest_caught": 1.25},
                {"defense": "b", "epsilon": 8.0, "plant": "claim", "smallest_caught": 1.1},
                {"defense": "a", "epsilon": 1.0, "plant": "noise", "smallest_caught": None}]
    out = statements(smallest, [1.1, 1.25, 3.0], 10, NEEDED)
    assert out[0].startswith("at epsilon 1 this gate misses a noise shortfall of up to 3x in a (noise)")
    assert out[1].startswith("this gate detects a noise shortfall of 1.25x or more at epsilon 8")


def test_a_planted_record_is_judged_as_a_control_at_the_family_size():
    record = planted_record("noise_multiplier", "step 2: noise multiplier 0.5 is below 1")
    assert judge_as_control(record, 20, GateConfig()) == (True, ["trace"])
    assert judge_as_control(planted_record(None), 20, GateConfig()) == (False, [])
    row = FactorRow("dp-gcl", 8.0, "noise", 1.25, runs=2, caught=1, caught_by={"trace": 1})
    assert row.to_dict()["caught_by"] == {"trace": 1}


def test_one_small_planted_run_end_to_end(suite_file, tmp_path, capsys):
    out = tmp_path / "gp"
    code = main(["gate-power", str(suite_file), "--plants", "claim", "--factors", "3", "--seeds", "1", "--needed",
                 "1", "--workers", "1", "--out", str(out), "--quiet"])
    assert code == 0
    result = json.loads((out / "gate_power.json").read_text())
    assert result["rows"][0]["caught"] == 1 and "trace" in result["rows"][0]["caught_by"]
    assert "this gate detects a noise shortfall of 3x or more at epsilon 8" in capsys.readouterr().out
    assert (out / "gate_power.md").read_text().startswith("# Gate power: power")


def test_bad_arguments_are_one_line(suite_file):
    from privaudit.core.errors import ConfigError
    from privaudit.audit.verify.gate_power import measure

    suite = load_suite(str(suite_file))
    with pytest.raises(ConfigError, match="--factors: every factor must be > 1"):
        measure(suite, factors=[0.5])
    with pytest.raises(ConfigError, match="--plants"):
        measure(suite, plants=["nope"])
    with pytest.raises(ConfigError, match="--needed"):
        measure(suite, seeds=3, needed=4)


@pytest.mark.slow  # 8 s end to end; the default run judges a two-release cell on records (test_gate_claim_checks.py)
def test_a_planted_two_release_cell_is_judged_against_its_gradient_release(suite_file):
    """A planted record carries its whole claim as a suite's cell does, so the gate compares a multi-release
    claim's canaries with its gradient release (DPCL: gradient and similarity matrix), not with the whole claim,
    whose other release would hide the planted gradient shortfall."""
    from privaudit.audit.gate.judge import compare
    from privaudit.audit.verify.gate_power import Planted, PlantedRun, run_planted

    attack = next(a for a in load_suite(suite_file).attacks if a.name == "gradient-canary")
    planted = Planted("dpcl-simclr", "dpcl-simclr", "control-dpcl-simclr", {"epochs": 1}, (8.0,), attack)
    record = run_planted(PlantedRun(planted, 8.0, 0, "digits", None, 1e-5, "cpu", 1, plant="noise", factor=2.0))
    assert set(record.claim_in_full["params"]["noise_multipliers"]) == {"gradient", "similarity"}
    row = compare(record, "gradient-canary", record.attacks["gradient-canary"], 0.0, "gradient-canary")
    assert row.accountant.startswith("gradient release alone") and row.epsilon < 0.75 * row.claim_epsilon


FEDERATED = """
name = "power-fed"
datasets = ["digits"]
seeds = [0]
epsilons = [8.0]
delta = 1e-5

[[defenses]]
name = "dp-fedemb"
attacks = ["user-canary"]
primary = "user-canary"
params = { epochs = 1, rounds = 4 }

[[attacks]]
name = "user-canary"
"""


def test_a_federated_control_is_planted_and_caught_by_its_released_noise(tmp_path):
    """DP-FedEmb has a control (its rounds add 1/f of the claimed noise; no trace records it): planted at 1.25x, the
    gate catches it by the canary users' released-noise check, at a family with its primary bound alone."""
    from privaudit.audit.verify.gate_power import PlantedRun, run_planted

    path = tmp_path / "fed.toml"
    path.write_text(f'out = "{tmp_path / "out"}"\n' + FEDERATED)
    suite = load_suite(str(path))
    (planted,), skipped = plantable(suite)
    assert (planted.control, skipped, suite_family(suite)) == ("control-dp-fedemb", [], 1)
    record = run_planted(PlantedRun(planted, 8.0, 0, "digits", None, 1e-5, "cpu", 1, plant="noise", factor=1.25))
    caught, by = judge_as_control(record, 2, GateConfig())
    assert caught and "released noise" in by
    from privaudit.audit.gate.judge import gate_cells

    (gate,) = gate_cells([record], GateConfig(), {"dp-fedemb": ("user-canary", True)})
    assert gate.released_noise[0]["std_ratio"] == pytest.approx(1 / 1.25, rel=0.02)


def test_a_federated_control_offers_the_claim_and_noise_plants_only():
    from privaudit.attacks.membership.shadow_models import resolve_defense
    from privaudit.core.errors import ConfigError

    assert resolve_defense("control-dp-fedavg", {"plant": "noise", "control_factor": 2.0}).config.control_factor == 2.0
    with pytest.raises(ConfigError, match="plant.*'step'.*claim, noise"):
        resolve_defense("control-dp-fedemb", {"plant": "step"})
