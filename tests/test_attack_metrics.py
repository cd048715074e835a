"""ROC metrics and the attack result: hand-checked values, FPR resolution, persistence."""

import numpy as np
import pytest

from privaudit.attacks import metrics, roc_plot
from privaudit.attacks.bounds.one_run import one_run_bound
from privaudit.attacks.result import AttackResult
from privaudit.core.errors import ConfigError


def test_metrics_on_a_hand_computed_example():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2])
    membership = np.array([1, 1, 0, 1, 0, 0, 1, 0], dtype=bool)
    # 16 member/non-member pairs, 12 ordered correctly.
    assert metrics.auc(scores, membership) == pytest.approx(12 / 16)
    assert metrics.tpr_at_fpr(scores, membership, 0.0) == pytest.approx(0.5)   # two members before any FP
    assert metrics.tpr_at_fpr(scores, membership, 0.25) == pytest.approx(0.75)
    assert metrics.tpr_at_fpr(scores, membership, 0.2) == pytest.approx(0.5)   # last point with FPR <= target
    assert metrics.balanced_accuracy(scores, membership) == pytest.approx(0.75)


def test_ties_count_half_and_resolution_is_reported():
    scores = np.zeros(6)
    membership = np.array([1, 0, 1, 0, 1, 0], dtype=bool)
    s = metrics.summarize(scores, membership)
    assert s["auc"] == pytest.approx(0.5)
    assert s["fpr_resolution"] == pytest.approx(1 / 3)
    assert s["fpr_resolved"] == {"0.001": False, "0.01": False, "0.1": False}
    assert set(s["tpr_at_fpr"]) == {"0.001", "0.01", "0.1"}


def test_bad_inputs_are_rejected():
    with pytest.raises(ConfigError, match="at least one member and one non-member"):
        metrics.auc(np.ones(3), np.ones(3, dtype=bool))
    with pytest.raises(ConfigError, match="must be finite"):
        metrics.auc(np.array([0.0, np.nan]), np.array([True, False]))


def test_result_round_trips_and_reports_the_shared_keys(tmp_path):
    rng = np.random.default_rng(0)
    membership = rng.random(200) < 0.5
    scores = membership + rng.normal(size=200)
    result = AttackResult("loss", "cross-entropy", scores, membership, index=np.arange(200),
                          config={"k": 1}, counts={"n_queries": 1}, variants={"other": -scores},
                          bound=one_run_bound(scores, membership, k_pos=20, k_neg=20))
    summary = result.summary()
    assert list(summary)[:6] == ["auc", "tpr_at_fpr", "eps_lower_bound", "eps_lb_method", "n_members", "n_nonmembers"]
    assert summary["variants"]["other"]["auc"] == pytest.approx(1 - summary["auc"])
    loaded = AttackResult.load(result.save(tmp_path / "r"))
    assert np.array_equal(loaded.scores, result.scores) and np.array_equal(loaded.membership, membership)
    assert loaded.bound == result.bound and loaded.summary()["auc"] == summary["auc"]
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["result.json", "scores.npz"]


def test_loglog_roc_plot_is_written(tmp_path):
    rng = np.random.default_rng(0)
    membership = rng.random(100) < 0.5
    r = metrics.roc(membership + rng.normal(size=100), membership)
    pts = metrics.loglog_roc(r)
    assert min(pts["fpr"]) > 0 and len(pts["fpr"]) == len(r.fpr)
    path = roc_plot.plot_roc({"a": r}, str(tmp_path / "roc.png"))
    assert (tmp_path / "roc.png").stat().st_size > 1000 and path.endswith(".png")
