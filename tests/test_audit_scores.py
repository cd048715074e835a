"""``privaudit audit-scores`` / ``audit_scores``: closed-form AUC, a sound and positive bound, every input
layout, and bad arrays rejected with one line and nothing written."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from privaudit.attacks.bounds.gdp import gdp_epsilon
from privaudit.audit.cli import main
from privaudit.audit.user.scores.score_audit import audit_scores
from privaudit.core.errors import ConfigError

from junit_check import read_junit


def fair_coin_scores(mu: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One-run design: each of m examples included by a fair coin; members' scores N(mu, 1), others N(0, 1)."""
    rng = np.random.default_rng(seed)
    inside = rng.random(m) < 0.5
    scores = rng.normal(mu * inside, 1.0)
    return scores[inside], scores[~inside]


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0])
def test_auc_matches_closed_form(mu):
    mem, non = fair_coin_scores(mu, 4000, seed=1)
    a = audit_scores(mem, non)
    expected = stats.norm.cdf(mu / math.sqrt(2))  # P[N(mu,1) > N(0,1)]
    se = math.sqrt(expected * (1 - expected) / min(mem.size, non.size))  # a generous (Hanley-McNeil-like) scale
    assert abs(a.auc - expected) < 4 * se + 0.005, (a.auc, expected)
    assert set(a.tpr_at_fpr) == {"0.001", "0.01", "0.1"}
    # TPR at 10% FPR of a Gaussian shift: 1 - Phi(Phi^-1(0.9) - mu)
    assert abs(a.tpr_at_fpr["0.1"] - stats.norm.sf(stats.norm.isf(0.1) - mu)) < 0.05


def test_bound_is_sound_and_positive_for_a_large_shift():
    delta = 1e-5
    # per example, a score shifted by mu is the Gaussian mechanism: mu-GDP, whose epsilon at delta is exact
    for mu in (1.0, 4.0):
        true_eps = gdp_epsilon(mu, delta)
        bounds = [audit_scores(*fair_coin_scores(mu, 2000, seed), delta=delta).eps_lower_bound for seed in range(5)]
        assert max(bounds) <= true_eps, (mu, bounds, true_eps)
    assert min(bounds) > 2.0, bounds  # mu = 4: almost every top guess is right
    a = audit_scores(*fair_coin_scores(4.0, 2000, 0), delta=delta)
    # the fair-coin test of the counts spends 10% of beta; the bound the rest, so the two together hold at 95%
    assert a.bound.confidence == pytest.approx(1 - 0.9 * 0.05) and a.bound.delta == delta
    assert any("binomial" in n for n in a.bound.notes)
    assert "fair coin" in a.assumption and a.bound.method == "one-run-search"


def test_tied_scores_give_no_bound():
    # members listed first: ties must not be resolved in their favour (a constant attack knows nothing)
    a = audit_scores(np.zeros(1000), np.zeros(1000), delta=0.0)
    assert a.auc == 0.5 and a.eps_lower_bound == 0.0


def test_multi_run_design_is_sound():
    rng = np.random.default_rng(3)
    mu = 3.0
    a = audit_scores(rng.normal(mu, 1, 400), rng.normal(0, 1, 400), design="multi-run", delta=1e-5)
    assert 0 < a.eps_lower_bound <= gdp_epsilon(mu, 1e-5)
    assert a.bound.method == "clopper-pearson" and "independent training run" in a.assumption


def test_losses_logits_csv_and_tf_privacy_layouts(tmp_path):
    rng = np.random.default_rng(0)
    n, c = 300, 5
    labels_m, labels_n = rng.integers(0, c, n), rng.integers(0, c, n)
    logits_m = rng.normal(0, 1, (n, c))
    logits_m[np.arange(n), labels_m] += 3.0  # members: confident on their label
    logits_n = rng.normal(0, 1, (n, c))

    def ce(z, y):
        return -(z[np.arange(len(y)), y] - np.log(np.exp(z).sum(1)))

    loss_m, loss_n = ce(logits_m, labels_m), ce(logits_n, labels_n)
    ref = audit_scores(-loss_m, -loss_n)
    np.save(tmp_path / "lm.npy", loss_m)
    np.save(tmp_path / "ln.npy", loss_n)
    assert audit_scores(tmp_path / "lm.npy", tmp_path / "ln.npy", kind="loss").auc == pytest.approx(ref.auc)
    (tmp_path / "lm.csv").write_text("loss\n" + "\n".join(map(str, loss_m.tolist())) + "\n")
    (tmp_path / "ln.csv").write_text("loss\n" + "\n".join(map(str, loss_n.tolist())) + "\n")
    assert audit_scores(tmp_path / "lm.csv", tmp_path / "ln.csv").auc == pytest.approx(ref.auc)
    np.savez(tmp_path / "m.npz", logits=logits_m, labels=labels_m)
    np.savez(tmp_path / "n.npz", logits=logits_n, labels=labels_n)
    from_logits = audit_scores(tmp_path / "m.npz", tmp_path / "n.npz")
    assert from_logits.inputs["kind"] == "logits" and from_logits.auc > 0.9
    np.savez(tmp_path / "tfp.npz", logits_train=logits_m, logits_test=logits_n, labels_train=labels_m,
             labels_test=labels_n, loss_train=loss_m, loss_test=loss_n)
    tfp = audit_scores(tf_privacy=tmp_path / "tfp.npz")
    assert tfp.auc == pytest.approx(from_logits.auc)  # logits preferred over losses
    np.savez(tmp_path / "tfp_loss.npz", loss_train=loss_m, loss_test=loss_n)
    assert audit_scores(tf_privacy=tmp_path / "tfp_loss.npz").auc == pytest.approx(ref.auc)


def test_cli_writes_the_report(tmp_path, capsys):
    mem, non = fair_coin_scores(3.0, 1000, 0)
    np.save(tmp_path / "m.npy", mem)
    np.save(tmp_path / "n.npy", non)
    out = tmp_path / "out"
    assert main(["audit-scores", "--members", str(tmp_path / "m.npy"), "--nonmembers", str(tmp_path / "n.npy"),
                 "--out", str(out), "--json", "--junit", str(tmp_path / "junit.xml")]) == 0
    printed = json.loads(capsys.readouterr().out)
    _, (case,) = read_junit(tmp_path / "junit.xml")  # no claim: nothing judged, said
    assert case.outcome == "skipped" and case.message.startswith("no claim given") and "bound: " in case.out
    assert printed["auc"] > 0.95 and printed["eps_lower_bound"] > 1 and printed["design"] == "one-run"
    assert sorted(p.name for p in out.iterdir()) == [".privaudit-manifest.json", "histogram.png", "report.html",
                                                   "report.json", "report.md", "roc.png", "scores.npz"]
    saved = json.loads((out / "report.json").read_text())
    assert saved["eps_lower_bound"] == printed["eps_lower_bound"] and "fair coin" in saved["assumption"]
    assert "ε lower bound" in (out / "report.md").read_text()


@pytest.mark.parametrize("members, nonmembers, message", [
    (np.array([]), np.array([0.1, 0.2]), "empty array"),
    (np.array([0.1, np.nan]), np.array([0.1, 0.2]), "NaN or infinite"),
    (np.array([0.1, np.inf]), np.array([0.1, 0.2]), "NaN or infinite"),
])
def test_cli_rejects_bad_arrays_writing_nothing(tmp_path, capsys, members, nonmembers, message):
    np.save(tmp_path / "m.npy", members)
    np.save(tmp_path / "n.npy", nonmembers)
    out = tmp_path / "out"
    code = main(["audit-scores", "--members", str(tmp_path / "m.npy"), "--nonmembers", str(tmp_path / "n.npy"),
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_rejects_mismatched_pairs_and_wrong_keys(tmp_path, capsys):
    np.savez(tmp_path / "m.npz", logits=np.zeros((4, 3)), labels=np.zeros(5))
    np.savez(tmp_path / "n.npz", logits=np.zeros((4, 3)), labels=np.zeros(4))
    with pytest.raises(ConfigError, match="5 labels for 4 rows"):
        audit_scores(tmp_path / "m.npz", tmp_path / "n.npz")
    np.savez(tmp_path / "w.npz", weights=np.zeros(4))
    with pytest.raises(ConfigError, match="no key of"):
        audit_scores(tmp_path / "w.npz", tmp_path / "n.npz")
    np.savez(tmp_path / "t.npz", loss_train=np.zeros(4))
    code = main(["audit-scores", "--tf-privacy", str(tmp_path / "t.npz"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "loss_test" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("claim, code", [("1", 1), ("8", 0)])
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_exit_status_is_1_when_the_claim_is_refuted(tmp_path, capsys, claim, code, json_flag):
    """A pipeline acts on the exit status: 1 when the verdict is "refuted", 0 when not (table or JSON alike)."""
    mem, non = fair_coin_scores(4.0, 2000, 0)
    np.save(tmp_path / "m.npy", mem)
    np.save(tmp_path / "n.npy", non)
    argv = ["audit-scores", "--members", str(tmp_path / "m.npy"), "--nonmembers", str(tmp_path / "n.npy"),
            "--claimed-epsilon", claim, "--delta", "1e-5", *json_flag, "--junit", str(tmp_path / "junit.xml")]
    assert main(argv) == code
    out = capsys.readouterr().out
    assert ("refuted" if code else "not refuted") in out
    totals, (case,) = read_junit(tmp_path / "junit.xml")  # the JUnit file: the bound against the claim, one case
    assert (case.classname, case.name, totals["tests"], totals["failures"]) == ("audit-scores", "one-run bound", 1, code)
    assert case.outcome == ("failed" if code else "passed")
    assert case.message.startswith("refuted at 95% confidence: epsilon >= ") if code else "not refuted" in case.out
