"""The CLI for the ALM and DP-FedEmb defenses: train, alm-curve, and one-line errors."""

import json

import pytest

from privaudit.audit.cli import main

ALM_TINY = ["--param", "epochs=1", "--param", "width=8", "--param", "sensitivity_m=20", "--param",
            "exhaustive_pairs=false"]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_train_alm_at_a_target_epsilon(capsys):
    code, out, _ = run_cli(capsys, "train", "--defense", "alm", "--dataset", "digits", "--target-epsilon", "2",
                           "--no-save", "--json", *ALM_TINY)
    result = json.loads(out)
    assert code == 0
    event = result["claim"]["event"]  # released on a grid: s = (Delta_1 + d Lambda) / eps, the grid's cost stated
    assert event["type"] == "LogisticDpEvent" and 0 < event["overhead"] < 1e-8
    assert event["noise_multiplier"] == pytest.approx(0.5, rel=1e-8)
    assert 1 / event["noise_multiplier"] + event["overhead"] == pytest.approx(2.0, rel=1e-11)  # at most 2
    assert result["claim"]["params"]["m"] == 20 and "SAMPLED" in result["claim"]["notes"][0]
    assert {"head_accuracy_clean", "head_accuracy_released", "utility_loss"} <= set(result["utility"])


def test_alm_curve_table(capsys):
    code, out, _ = run_cli(capsys, "alm-curve", "--dataset", "digits", "--epsilons", "1,10", "--draws", "2",
                           *ALM_TINY)
    assert code == 0
    assert "sampled sensitivity (ALM Algorithm 2: max over remove-one pairs, m=20): L1 = " in out
    assert "logistic (scale: loss)" in out and "gaussian-classical (scale: loss)" in out
    code, out, _ = run_cli(capsys, "alm-curve", "--epsilons", "1,10", "--draws", "2", "--json", *ALM_TINY)
    rows = json.loads(out)["curve"]["rows"]
    assert len(rows) == 8 and {r["epsilon"] for r in rows} == {1.0, 10.0}


def test_train_fedemb_at_a_fixed_noise_multiplier(capsys):
    code, out, _ = run_cli(capsys, "train", "--defense", "dp-fedemb", "--noise-multiplier", "0.5", "--no-save",
                           "--param", "pretrain=false", "--param", "rounds=2", "--param", "width=8")
    assert code == 0
    assert "recall_at_far" in out and "claim: WOR(16/" in out and "(replace-one, per user," in out
    assert "event's noise multiplier is 0.25 (sigma/2)" in out


@pytest.mark.parametrize("argv,message", [
    (["alm-curve", "--epsilons", "0,1"], "--epsilons: every epsilon must be > 0"),
    (["train", "--defense", "alm", "--param", "mechanism=cauchy"], "mechanism: unknown value 'cauchy'"),
    (["train", "--defense", "dp-fedemb", "--param", "users_per_client=500", "--param", "pretrain=false"],
     "users per round exceed the"),
])
def test_bad_input_exits_2(capsys, argv, message):
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and message in err
