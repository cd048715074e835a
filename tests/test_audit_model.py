"""``audit_model`` / ``privaudit audit-model``: a user's classifier audited on the user's own split (small sizes)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from privaudit.attacks.bounds.multi_run import multi_run_ceiling
from privaudit.attacks.bounds.one_run import one_run_epsilon
from privaudit.audit.cli import main
from privaudit.audit.user.model.model_audit import audit_model
from privaudit.core.errors import ConfigError
from privaudit.core.io import atomic_save_tensors

import user_classifier
from junit_check import read_junit


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """The user's own split of digits (a fair coin per example among 1,200, the rest a population), as .npz and
    CSV, and the user's model trained by the user's own code on the members."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
    inside = np.random.default_rng(1).random(1200) < 0.5
    d = tmp_path_factory.mktemp("user")
    parts = {"members": (x[:1200][inside], y[:1200][inside]), "nonmembers": (x[:1200][~inside], y[:1200][~inside]),
             "population": (x[1200:], y[1200:])}
    for name, (xs, ys) in parts.items():
        np.savez(d / f"{name}.npz", x=xs, y=ys)
        header = ",".join([f"f{i}" for i in range(64)] + ["label"])
        rows = [",".join([*map(str, row), str(label)]) for row, label in zip(xs.tolist(), ys.tolist())]
        (d / f"{name}.csv").write_text(header + "\n" + "\n".join(rows) + "\n")
    torch.manual_seed(0)
    net = user_classifier.make_net()
    user_classifier.train(net, torch.from_numpy(parts["members"][0]), torch.from_numpy(parts["members"][1]), seed=0)
    atomic_save_tensors(d / "net.safetensors", net.state_dict())
    torch.save(net.state_dict(), d / "net.pt")
    return d


def test_audits_a_user_model_on_the_users_own_split(user, tmp_path):
    torch.set_num_threads(1)
    out = tmp_path / "audit"
    a = audit_model("user_classifier:make_net", user / "net.safetensors", members=user / "members.npz",
                    nonmembers=user / "nonmembers.npz", population=user / "population.npz",
                    train_fn="user_classifier:train", reference_models=4, canary_runs=4, claimed_epsilon=1.0,
                    delta=1e-5, out=out)
    assert set(a.attacks) == {"loss", "lira", "rmia", "canary"}  # the default with a population and a train_fn
    for name in ("loss", "lira", "rmia"):
        s = a.attacks[name]
        assert s["n_members"] == int(np.load(user / "members.npz")["y"].size)  # the user's members, not ours
        assert 0.5 < s["auc"] <= 1.0, (name, s["auc"])  # an overfit MLP leaks its own training set
        assert abs(s["advantage"] - (2 * s["balanced_accuracy"] - 1)) < 1e-12
        c = s["bound"]["counts"]
        # one-run bounds at 90% of beta: the fair-coin test of the split's counts spends the rest
        assert s["ceiling"] == pytest.approx(one_run_epsilon(c["m"], c["r"], c["r"], beta=0.045, delta=1e-5))
        assert 0 <= s["eps_lower_bound"] <= s["ceiling"]
    canary = a.attacks["canary"]
    assert canary["counts"]["n_training_runs"] == 8 and canary["ceiling"] == multi_run_ceiling(4, 4, delta=1e-5)
    assert a.canary["coordinate"] == 0 and a.canary["value"] == pytest.approx(4.0)  # pixel 0 of digits is always 0
    assert a.verdict_attack == "canary" and a.verdict.verdict == "not refuted" and not a.verdict.refutable
    assert "cannot refute: ceiling" in a.verdict.statement
    assert {"report.html", "report.md", "report.json", "roc.png", "histogram.png", "canary/scores.npz",
            "lira/result.json"} <= {str(p.relative_to(out)) for p in out.rglob("*")}
    md = (out / "report.md").read_text()
    assert "advantage (max TPR - FPR)" in md and "balanced accuracy" in md and "cannot refute: ceiling" in md
    assert json.loads((out / "report.json").read_text())["verdict"] == "not refuted"


def test_the_canary_runs_separate_a_non_private_recipe(user):
    """Full-batch Adam memorises the canary: with it every run scores above every run without."""
    a = audit_model("user_classifier:make_net", user / "net.pt", members=user / "members.npz",
                    nonmembers=user / "nonmembers.npz", train_fn="user_classifier:train", attacks=["canary"],
                    canary_runs=6)
    result = a.results["canary"]
    inside = result.scores[result.membership]
    assert inside.min() > result.scores[~result.membership].max() and a.attacks["canary"]["auc"] == 1.0


def test_tabular_csv_through_the_cli(user, capsys):
    code = main(["audit-model", "--factory", "user_classifier:make_net", "--weights", str(user / "net.pt"),
                 "--members", str(user / "members.csv"), "--nonmembers", str(user / "nonmembers.csv"), "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert list(d["attacks"]) == ["loss"] and d["verdict"] is None
    assert d["attacks"]["loss"]["auc"] > 0.5 and d["inputs"]["members"].endswith("members.csv")


def test_the_canary_audit_needs_a_training_function(user):
    with pytest.raises(ConfigError, match="canary audits your training function; pass --train-fn"):
        audit_model("user_classifier:make_net", user / "net.pt", members=user / "members.npz",
                    nonmembers=user / "nonmembers.npz", attacks=["canary"])


@pytest.mark.parametrize("args, message", [
    (["--factory", "user_classifier:nope"], "cannot load factory"),
    (["--factory", "user_classifier:make_net", "--weights", "missing.pt"], "no such file"),
    (["--factory", "torch.nn:Identity"], "do not fit the factory's model"),
    (["--factory", "user_classifier:make_small_net"], "do not fit the factory's model"),
])
def test_bad_input_is_one_line(user, capsys, args, message):
    argv = ["audit-model", "--weights", str(user / "net.safetensors"), "--members", str(user / "members.npz"),
            "--nonmembers", str(user / "nonmembers.npz"), *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_exit_status_is_1_when_the_claim_is_refuted(user, capsys):
    """The overfit model's LOSS bound exceeds a claim of 0.01: the verdict is refuted and the exit status 1."""
    argv = ["audit-model", "--factory", "user_classifier:make_net", "--weights", str(user / "net.pt"),
            "--members", str(user / "members.npz"), "--nonmembers", str(user / "nonmembers.npz"), "--delta", "1e-5"]
    junit = user / "junit.xml"
    assert main([*argv, "--claimed-epsilon", "0.01", "--junit", str(junit)]) == 1
    assert "verdict (loss): refuted" in capsys.readouterr().out
    totals, (case,) = read_junit(junit)  # the verdict's test, one case per attack: a failing suite
    assert totals["failures"] == 1 and (case.classname, case.name, case.outcome) == ("audit-model", "loss", "failed")
    assert case.message.startswith("refuted at 95% confidence: epsilon >= ") and "claim: epsilon 0.01" in case.text
    assert main([*argv, "--claimed-epsilon", "8", "--json", "--junit", str(junit)]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "not refuted"
    totals, (case,) = read_junit(junit)  # and a passing one
    assert totals["failures"] == 0 and case.outcome == "passed" and "not refuted" in case.out
