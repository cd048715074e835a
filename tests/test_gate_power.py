"""A gate with power: primary statistics only, positive controls that must be caught, a stated and checked
family-wise error rate (``privaudit gate`` on a real run's evidence: tests/test_gate_evidence.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from privaudit.attacks.bounds.one_run import one_run_bound
from privaudit.audit.cli import main
from privaudit.audit.gate.judge import gate_cells, suite_gate
from privaudit.audit.suite.model import GateConfig

from cell_records import make_attack_record, make_cell_record


def _cell(cid, defense, eps, attacks):
    return make_cell_record(cid, defense=defense, epsilon={"rdp": eps},
                            attacks={label: make_attack_record(b["epsilon"], bound=b) for label, b in attacks.items()})


def _rr_bound(eps_true: float, rng: np.random.Generator, m: int = 1000, k: int = 100) -> dict:
    """One-run bound of m randomized-response canaries (each in with probability 1/2) at true epsilon eps_true:
    the score says "in" correctly with probability e^eps / (1 + e^eps), the tightest eps_true-DP test."""
    member = rng.random(m) < 0.5
    p = np.exp(eps_true) / (1 + np.exp(eps_true))
    says_in = np.where(rng.random(m) < p, member, ~member)
    scores = says_in + 1e-3 * rng.random(m)  # ties broken at random
    return one_run_bound(scores, member, k_pos=k, k_neg=k, delta=1e-5).to_dict()


def test_only_primary_bounds_are_gated_and_counted():
    rng = np.random.default_rng(0)
    strong, weak = _rr_bound(4.0, rng), _rr_bound(0.1, rng)
    cells = [_cell("a", "dp", 1.0, {"white": strong, "black": weak})]
    everything = gate_cells(cells, GateConfig())[0].comparisons
    primary = gate_cells(cells, GateConfig(), {"dp": ("white", False)})[0].comparisons
    assert [c.verdict for c in primary] == ["exceeds", "secondary"]
    assert "primary statistic for this defense is 'white'" in primary[1].reason
    # one gated test instead of two: the primary bound is recomputed at 97.5%, not 98.75%
    assert primary[0].gate_confidence == pytest.approx(0.95)
    assert everything[0].gate_confidence == pytest.approx(0.975)
    assert primary[0].gate_eps_lower_bound > everything[0].gate_eps_lower_bound


def test_positive_control_must_be_caught():
    rng = np.random.default_rng(1)
    leaky = _cell("ctl", "control", 1.0, {"canary": _rr_bound(5.0, rng)})
    honest_control = _cell("ctl", "control", 1.0, {"canary": _rr_bound(1.0, rng)})
    real = _cell("real", "dp", 8.0, {"canary": _rr_bound(1.0, rng)})
    roles = {"control": ("canary", True), "dp": ("canary", False)}
    for cells, status, caught in (([real, leaky], "pass", True), ([real, honest_control], "fail", False)):
        gates = gate_cells(cells, GateConfig(), roles)
        report_gate = suite_gate([c.with_gate(g) for c, g in zip(cells, gates)], [], None, GateConfig())
        assert report_gate.status == status and report_gate.controls_caught == int(caught)
        assert gates[0].status == "pass"  # the real claim is consistent either way
        if caught:
            assert gates[1].comparisons[0].verdict == "caught"
            assert any("positive control ctl caught, as expected" in n for n in report_gate.notes)
        else:
            assert "positive control not caught" in report_gate.reasons[0]
        assert report_gate.family_wise_error == pytest.approx(0.05)


@pytest.mark.parametrize("family", [1, 5])
def test_family_wise_error_rate_on_known_mechanisms(family):
    """Every claim true (randomized response at exactly its claimed epsilon): the gate fails in at most 5% of
    suites (one-sided binomial test at 1%), with the Bonferroni correction over ``family`` gated cells."""
    rng = np.random.default_rng(family)
    suites, failures = 120, 0
    for _ in range(suites):
        cells = [_cell(f"c{i}", "dp", 2.0, {"canary": _rr_bound(2.0, rng)}) for i in range(family)]
        gates = gate_cells(cells, GateConfig(), {"dp": ("canary", False)})
        failures += any(g.status == "fail" for g in gates)
    assert stats.binomtest(failures, suites, 0.05, alternative="greater").pvalue > 0.01, failures


def test_heartbeat_prints_in_a_ci_log():
    import io
    import time as _time

    from privaudit.audit.run.progress import CELL_STAGES, Progress
    from privaudit.audit.run.heartbeat import Heartbeat

    progress = Progress(jobs=2)
    for seed in range(4):
        progress.add(f"digits/dp-gcl/eps=8/seed={seed}", "cell", "dp-gcl", (*CELL_STAGES, "lira"))
    progress.finish("digits/dp-gcl/eps=8/seed=1", {"train": 1.0, "lira": 1.0})
    progress.enter_stage("digits/dp-gcl/eps=8/seed=0", "lira")
    stream = io.StringIO()  # not a terminal
    with Heartbeat(progress, interval=0.05, stream=stream):
        _time.sleep(0.3)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("[privaudit +") for line in lines)
    assert "1/4 cells done; running digits/dp-gcl/eps=8/seed=0: lira" in lines[-1]
    quiet = io.StringIO()
    with Heartbeat(progress, interval=0.05, stream=quiet, enabled=False):
        _time.sleep(0.15)
    assert quiet.getvalue() == ""

def test_local_executor_prints_a_line_per_model_in_a_log(capsys):
    from privaudit.attacks.executor import LocalExecutor

    assert LocalExecutor(progress=True, desc="reference models").map(abs, [-1, -2, -3]) == [1, 2, 3]
    err = capsys.readouterr().err  # captured: not a terminal
    assert "reference models: 1/3 done" in err and "reference models: 3/3 done" in err
    assert LocalExecutor(progress=False).map(abs, [-1]) == [1] and capsys.readouterr().err == ""
