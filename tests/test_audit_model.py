"""``audit_model`` / ``privaudit audit-model``: a user-defined classifier audited end to end (small sizes)."""

from __future__ import annotations

import json

import pytest
import torch

from privaudit.audit.cli import main
from privaudit.audit.model_audit import audit_model
from privaudit.core.datasets import load_dataset
from privaudit.core.errors import ConfigError
from privaudit.core.io import atomic_save_tensors

import user_classifier


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """The user's model, trained by the user's own code on the members of privaudit's split (seed 0)."""
    data = load_dataset("digits", seed=0)
    torch.manual_seed(0)
    net = user_classifier.make_net()
    user_classifier.train(net, data.train.x, data.train.y, seed=0)
    d = tmp_path_factory.mktemp("user")
    atomic_save_tensors(d / "net.safetensors", net.state_dict())
    torch.save(net.state_dict(), d / "net.pt")
    return d


def test_audits_a_user_model_end_to_end(weights, tmp_path):
    torch.set_num_threads(1)
    out = tmp_path / "audit"
    results = audit_model("user_classifier:make_net", weights / "net.safetensors", dataset="digits",
                          train_fn="user_classifier:train", reference_models=4, out=out).attacks
    assert set(results) == {"loss", "lira", "rmia", "canary"}  # the default with a training function
    for name, s in results.items():
        assert 0.5 < s["auc"] <= 1.0, (name, s["auc"])   # an overfit MLP leaks membership
        assert s["eps_lower_bound"] is not None and s["eps_lower_bound"] >= 0
        assert "one-run" in s["eps_lb_method"]
    assert results["lira"]["counts"]["n_reference_models"] == 4
    assert results["rmia"]["counts"]["n_reference_models"] == 4
    assert results["lira"]["eps_lower_bound"] > 0  # measured 0.66 (LiRA AUC 0.62, LOSS AUC 0.55) on digits, seed 0
    # RMIA ranks the same target by the same 4 references (shared); its AUC lies near LiRA's.
    assert abs(results["rmia"]["auc"] - results["lira"]["auc"]) < 0.1
    # Canary audit of the training function: 200 mislabelled canaries, each inserted by a fair coin, one run.
    canary = results["canary"]
    assert canary["counts"]["n_canaries"] == 200 and canary["counts"]["n_training_runs"] == 1
    assert canary["n_members"] + canary["n_nonmembers"] == 200 and 70 < canary["n_members"] < 130
    assert canary["auc"] > 0.9 and canary["eps_lower_bound"] > 1.0  # memorised mislabelled canaries
    assert "not the given weights" in canary["audited"]
    assert (out / "lira" / "scores.npz").is_file() and (out / "canary" / "scores.npz").is_file()
    assert set(json.loads((out / "audit.json").read_text())["attacks"]) == set(results)


def test_the_canary_audit_needs_a_training_function(weights):
    with pytest.raises(ConfigError, match="canary audits the user's training function; pass --train-fn"):
        audit_model("user_classifier:make_net", weights / "net.pt", attacks=["canary"])


def test_cli_with_pt_weights_and_the_default_sgd_loop(weights, capsys):
    code = main(["audit-model", "--factory", "user_classifier:make_net", "--weights", str(weights / "net.pt"),
                 "--attacks", "loss", "--json"])
    assert code == 0
    s = json.loads(capsys.readouterr().out)["loss"]
    assert s["auc"] > 0.5 and s["n_members"] + s["n_nonmembers"] > 100


@pytest.mark.parametrize("args, message", [
    (["--factory", "user_classifier:nope"], "cannot load factory"),
    (["--factory", "user_classifier:make_net", "--weights", "missing.pt"], "no such file"),
    (["--factory", "torch.nn:Identity"], "do not fit the factory's model"),
])
def test_bad_input_is_one_line(weights, capsys, args, message):
    argv = ["audit-model", "--weights", str(weights / "net.safetensors"), *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
