"""privaudit epsilon / calibrate / claims: flags, JSON shape, agreement with the API, one-line errors."""

import json

import pytest

from privaudit.accountants import epsilon
from privaudit.accountants.sampled_gaussian import sampled_gaussian_claim
from privaudit.audit.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_epsilon_json_matches_the_api(capsys):
    code, out, _ = run_cli(capsys, "epsilon", "--noise-multiplier", "1.1", "--steps", "300", "--delta", "1e-5",
                           "--sample-rate", "0.01", "--json")
    result = json.loads(out)
    assert code == 0 and set(result) == {"rdp", "pld", "prv", "pure", "gaussian", "tree", "last-iterate", "brackets", "notes"}
    claim = sampled_gaussian_claim(1.1, 300, 1e-5, sample_rate=0.01)
    assert result["rdp"] == pytest.approx(epsilon(claim, "rdp").epsilon)
    assert result["pld"] == pytest.approx(epsilon(claim, "pld").epsilon)
    assert result["pure"] is None and result["notes"]["pure"].startswith("not applicable: ")
    assert "balle2020" in result["notes"]["rdp"]


@pytest.mark.slow  # 8 s; the default run accounts without replacement in test_accountants_pld_wor.py and test_accountants_rdp.py
def test_epsilon_without_replacement_and_conversion(capsys):
    args = ["epsilon", "--noise-multiplier", "0.4021", "--steps", "78125", "--delta", "1e-5", "--dataset-size",
            "50000", "--batch-size", "128", "--sampling", "without-replacement", "--mechanisms", "2",
            "--composition", "separate", "--accountant", "rdp", "--json"]
    code, out, _ = run_cli(capsys, *args)
    result = json.loads(out)
    assert code == 0 and set(result) == {"rdp", "brackets", "notes"} and 1000 < result["rdp"] < 1002
    assert "own independent sample" in result["notes"]["composition"]
    _, out, _ = run_cli(capsys, *args[:-1], "--conversion", "mironov", "--json")
    assert json.loads(out)["rdp"] > result["rdp"]
    table_args = [a for a in args[:-3] if a not in ("--composition", "separate")]  # table, default joint
    code, out, _ = run_cli(capsys, *table_args)
    assert code == 0 and "WOR(128/50000)[Gaussian(z=0.4021) + Gaussian(z=0.4021)] x 78125" in out


@pytest.mark.slow  # 6 s of PLD calibrations; the default run calibrates per accountant in test_accountants_calibrate.py
def test_calibrate_json_per_accountant(capsys):
    code, out, _ = run_cli(capsys, "calibrate", "--target-epsilon", "2", "--steps", "100", "--delta", "1e-5",
                           "--dataset-size", "1000", "--batch-size", "20", "--accountant", "rdp", "--json")
    result = json.loads(out)
    claim = sampled_gaussian_claim(result["rdp"], 100, 1e-5, dataset_size=1000, batch_size=20)
    assert code == 0 and epsilon(claim, "rdp").epsilon <= 2.0
    assert epsilon(sampled_gaussian_claim(result["rdp"] * 0.99, 100, 1e-5, dataset_size=1000, batch_size=20),
                   "rdp").epsilon > 2.0
    code, out, _ = run_cli(capsys, "calibrate", "--target-epsilon", "2", "--steps", "10", "--delta", "1e-5",
                           "--dataset-size", "1000", "--batch-size", "20", "--sampling", "without-replacement",
                           "--json")
    result = json.loads(out)
    assert 0 < result["pld"] <= result["rdp"] and result["prv"] is None and "not applicable" in result["notes"]["prv"]


def test_claims_json_for_one_claim(capsys):
    code, out, _ = run_cli(capsys, "claims", "--id", "logit-cor44", "--json")
    (row,) = json.loads(out)
    assert code == 0 and row["id"] == "logit-cor44" and row["checked"]["verdict"] == "optimistic"
    assert row["recipe"]["verdict"] == "not reproduced" and row["epsilon"]["gaussian"]["epsilon"] > 0.7
    code, out, _ = run_cli(capsys, "claims", "--id", "logit-cor44")
    assert code == 0 and "logit-cor44" in out and "verdict" in out and "Dwork & Roth" in out


@pytest.mark.parametrize("argv,message", [
    (["epsilon", "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5"],
     "--sample-rate: give --sample-rate Q, or --dataset-size N and --batch-size B"),
    (["epsilon", "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5", "--sample-rate", "0.1",
      "--dataset-size", "10", "--batch-size", "2"], "not both"),
    (["epsilon", "--noise-multiplier", "0", "--steps", "10", "--delta", "1e-5", "--sample-rate", "0.1"],
     "--noise-multiplier: must be a number > 0, got 0"),
    (["epsilon", "--noise-multiplier", "1", "--steps", "10", "--delta", "2", "--sample-rate", "0.1"],
     "--delta: must be a number in (0, 1), got 2"),
    (["epsilon", "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5", "--sample-rate", "0.1",
      "--sampling", "shuffle"], "--sampling: unknown value 'shuffle'; accepted: poisson, without-replacement"),
    (["epsilon", "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5", "--sample-rate", "0.1",
      "--sampling", "without-replacement"], "needs --dataset-size and --batch-size"),
    (["epsilon", "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5", "--sample-rate", "0.1",
      "--conversion", "abadi"], "--conversion: unknown value 'abadi'; accepted: mironov, balle2020, cks2020"),
    (["epsilon", "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5", "--sample-rate", "0.1",
      "--accountant", "moments"], "--accountant: unknown value 'moments'"),
    (["epsilon", "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5", "--dataset-size", "10",
      "--batch-size", "20"], "--batch-size: must be <= --dataset-size (10), got 20"),
    (["calibrate", "--target-epsilon", "-1", "--steps", "10", "--delta", "1e-5", "--sample-rate", "0.1"],
     "--target-epsilon: must be a number > 0, got -1"),
    (["claims", "--paper", "Nature"], "--paper: unknown value 'Nature'; accepted: DPCL, DP-GCL, DP-FedEmb, Logit-DP"),
    (["claims", "--id", "nope"], "--id: unknown claim 'nope'"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and err.startswith("privaudit: error: ")
    assert message in err


# slow: 10^12 steps make two accountants fail by design (about 15 s)
@pytest.mark.slow
def test_a_failing_accountant_keeps_the_others(capsys, monkeypatch):
    from privaudit.accountants.prv import PrvAccountant

    def out_of_memory(self, claim):
        raise MemoryError("Unable to allocate 2.2 TiB")

    monkeypatch.setattr(PrvAccountant, "_epsilon", out_of_memory)
    code, out, _ = run_cli(capsys, "epsilon", "--noise-multiplier", "1.1", "--steps", "300", "--delta", "1e-5",
                           "--sample-rate", "0.01", "--json")
    result = json.loads(out)
    assert code == 0 and result["prv"] is None and result["notes"]["prv"] == "failed: out of memory"
    assert result["rdp"] > 0 and result["pld"] > 0
    code, out, _ = run_cli(capsys, "calibrate", "--target-epsilon", "2", "--steps", "100", "--delta", "1e-5",
                           "--sample-rate", "0.01", "--json")
    result = json.loads(out)
    assert code == 0 and result["prv"] is None and result["notes"]["prv"] == "failed: out of memory"
    assert result["rdp"] > 0
