"""The CLI: one-line errors with exit status 2, JSON output, and the train command end to end."""

import json

import pytest

from privaudit.audit.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv,message", [
    (["train", "--dataset", "nope"], "dataset: unknown value 'nope'; accepted: digits, mnist"),
    (["train", "--defense", "magic"], "defense: unknown value 'magic'; accepted: nonprivate"),
    (["train", "--epochs", "-3"], "epochs: must be > 0, got -3"),
    (["train", "--dataset", "mnist", "--data-dir", "/nonexistent"], "is missing train-images-idx3-ubyte"),
    (["train", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["train", "--param", "epochs"], "--param: expected KEY=VALUE"),
    (["train", "--device", "tpu"], "device: unknown value 'tpu'"),
    (["train", "--target-epsilon", "1"], "defense 'nonprivate' is not private"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("privaudit: error: ")
    assert message in err


def test_datasets_json(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "datasets", "--json", "--data-dir", str(tmp_path))
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and rows["digits"]["available"] and not rows["cifar10"]["available"]
    assert any("data_batch_1" in m for m in rows["cifar10"]["missing"])


def test_train_json_and_checkpoint(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "train", "--epochs", "3", "--json", "--out", str(tmp_path / "ck"))
    result = json.loads(out)
    assert code == 0
    assert set(result["utility"]) == {"knn_accuracy", "linear_probe_accuracy"}
    assert 0 <= result["utility"]["knn_accuracy"] <= 1
    assert result["epsilon"]["rdp"]["infinite"] is True
    assert (tmp_path / "ck" / "model.safetensors").exists()


def test_param_values_are_typed(capsys):
    from privaudit.audit.commands.common import parse_params

    assert parse_params(["width=8", "loss=barlow", "lr=1e-3", "normalize=true"]) == {
        "width": 8, "loss": "barlow", "lr": 1e-3, "normalize": True}
