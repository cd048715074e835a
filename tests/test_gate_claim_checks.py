"""The gate on a DP cell's claim checks and white-box trajectory bound: the trajectory bound is the one gated, the
cell's own step-audit pairs join the family and are recomputed at its level, a trace mismatch fails naming the
step, and a control is caught by any of them."""

import numpy as np
import pytest
import torch

from privaudit.accountants.events import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent, event_to_dict
from privaudit.attacks.bounds.mechanism import optimistic_epsilon
from privaudit.attacks.step.step_distinguisher import gaussian_step_scores, gdp_bound, gdp_mu_recomputed
from privaudit.attacks.bounds.trajectory import TrajectoryCounts, trajectory_bound
from privaudit.audit.gate.judge import gate_cells, suite_gate
from privaudit.audit.suite.model import GateConfig

from cell_records import make_attack_record, make_cell_record, make_claim

Z, Q, T, DELTA = 0.8527, 0.344, 6, 1e-5
EVENT = SelfComposedDpEvent(PoissonSampledDpEvent(Q, GaussianDpEvent(Z)), T)


def step_pair(mu_true: float, seed: int = 0) -> dict:
    s0, s1 = gaussian_step_scores([torch.tensor([mu_true])], [1.0], 100000, torch.Generator().manual_seed(seed))
    g = gdp_bound(s0, s1, alpha=0.025)
    return {"pair": "canary", "verdict": "not refuted", "mu_lower": g["mu_lower"], "bounds": {"gdp": g}}


def cell(cid: str, *, trajectory_fp: int = 22128, mismatches=(), mu_true: float = 1 / Z, defense: str = "dp-gcl",
         attack=None, epsilon: float = 8.0, full_claim=None, pairs=None):
    if attack is None:
        counts = TrajectoryCounts(0.65, n0=99349, fp=trajectory_fp, n1=20651, fn=7081)
        tb = trajectory_bound(counts, event=EVENT, claimed_multiplier=Z, relation="add-remove", delta=DELTA, steps=T,
                              canaries=20000).to_dict()
        mech = {"method": "one-run-fdp-mechanism", "relation": "add-remove", "unit": "example", "delta": DELTA,
                "confidence": 0.95, "counts": {}}
        attack = make_attack_record(1.0, mechanism_bound=mech, trajectory_bound=tb, eps_lb_mechanism=4.0,
                                    eps_lb_trajectory=tb["epsilon"])
    steps = {"claim": {"mu": 1 / Z}, "pairs": [step_pair(mu_true)] if pairs is None else pairs}
    return make_cell_record(cid, defense=defense, claim=make_claim(delta=DELTA), epsilon={"pld": epsilon},
                            attacks={"gradient-canary": attack}, full_claim=full_claim,
                            claim_checks={"trace": {"steps": T, "alpha": 1e-6, "mismatches": list(mismatches)},
                                          "step_audit": steps})


def judge(cells, roles=None, **kw):
    gates = gate_cells(cells, GateConfig(), roles or {"dp-gcl": ("gradient-canary", False)}, **kw)
    return gates, suite_gate([c.with_gate(g) for c, g in zip(cells, gates)], [], None, GateConfig())


def test_a_correct_cell_passes_and_the_family_counts_its_step_pairs():
    gates, suite = judge([cell("a"), cell("b")])
    assert [g.status for g in gates] == ["pass", "pass"]
    rows = gates[0].comparisons
    assert [r.method for r in rows] == ["white-box-trajectory", "step-gdp"]
    assert rows[0].eps_lb_mechanism == 4.0 and rows[1].quantity == "mu"
    assert rows[0].gate_confidence == pytest.approx(1 - 0.05 / 4)  # 2 cells x (trajectory + one step pair)
    assert suite.family_wise_error == pytest.approx(0.05 + 2e-6)
    assert "2 training traces checked" in " ".join(suite.notes)


def test_a_step_pair_above_the_per_step_claim_fails_at_the_family_level():
    gates, _ = judge([cell("a", mu_true=1.3 / Z)])
    assert gates[0].status == "fail"
    assert "step audit (canary pair)'s sound lower bound mu_lb" in gates[0].reasons[0]
    pair = cell("x").step_audit["pairs"][0]
    again = gdp_mu_recomputed(pair["bounds"]["gdp"], 0.05 / 10)
    assert again < pair["mu_lower"]


def test_a_trace_mismatch_fails_naming_the_step():
    m = {"step": 7, "field": "steps", "message": "training ran 7 steps; the claim composes 6: steps 7-7 are not "
                                                 "accounted"}
    gates, suite = judge([cell("a", mismatches=[m])])
    assert suite.status == "fail" and "steps 7-7 are not accounted" in gates[0].reasons[0]


def test_a_control_is_caught_by_its_trajectory_its_step_or_its_trace():
    roles = {"ctl": ("gradient-canary", True)}
    leaky = cell("c", trajectory_fp=12000, defense="ctl")  # far fewer false positives: a much larger per-step mu
    gates, suite = judge([leaky], roles)
    assert gates[0].caught and gates[0].caught_by == ("gradient-canary",)
    traced = cell("c", defense="ctl", mismatches=[{"step": 2, "field": "noise_multiplier", "message": "step 2"}])
    gates, suite = judge([traced], roles)
    assert gates[0].caught_by == ("trace",) and "its trace does not match its claim" in " ".join(suite.notes)
    gates, _ = judge([cell("c", defense="ctl")], roles)
    assert gates[0].status == "fail" and "positive control not caught" in gates[0].reasons[0]


def test_a_larger_family_lowers_every_gated_bound():
    alone, _ = judge([cell("a")])
    larger, _ = judge([cell("a")], family=40)
    for a, b in zip(alone[0].comparisons, larger[0].comparisons):
        assert b.gate_eps_lower_bound < a.gate_eps_lower_bound
        assert b.gate_confidence == pytest.approx(1 - 0.05 / 40)
    assert np.isfinite(larger[0].comparisons[0].gate_eps_lower_bound)


def two_release_cell(fp: int, *, z_grad: float = 1.206, steps: int = 6) -> dict:
    """A DPCL-like cell: each step releases the gradient (multiplier z_grad) and a second mechanism with the same
    multiplier, accounted as one Gaussian of z_eff = z_grad / sqrt(2); its canaries see the gradient alone."""
    z_eff = z_grad / np.sqrt(2)
    event = SelfComposedDpEvent(PoissonSampledDpEvent(Q, GaussianDpEvent(z_eff)), steps)
    counts = TrajectoryCounts(0.5, n0=20489, fp=fp, n1=20651, fn=7000)
    tb = trajectory_bound(counts, event=event, claimed_multiplier=z_grad, relation="add-remove", delta=DELTA,
                          steps=steps, canaries=20000).to_dict()
    attack = make_attack_record(1.0, trajectory_bound=tb, eps_lb_mechanism=4.0, eps_lb_trajectory=tb["epsilon"])
    full_claim = {"event": event_to_dict(event),
                  "params": {"noise_multipliers": {"gradient": z_grad, "similarity": z_grad}}}
    return cell("two", attack=attack, epsilon=optimistic_epsilon(event, "add-remove", DELTA), full_claim=full_claim,
                pairs=[])


def test_a_two_release_claim_gates_its_canaries_against_the_gradient_release_alone():
    """The canaries observe the gradient release: the gate compares their bound with that release's own epsilon
    (the claim's steps at z_grad), not the whole claim's, whose second release would hide a gradient under-noised
    by up to sqrt(2). The verdict flips where mu_lb crosses 1 / z_grad (at the gate's level); the whole claim's
    epsilon (the planted weaker comparison) misses a run that the release's catches."""
    from privaudit.attacks.bounds.trajectory import mu_lower

    z_grad = 1.206
    caught = judge([two_release_cell(fp) for fp in (5000, 7000)])[0]
    rows = [g.comparisons[0] for g in caught]
    for fp, row in zip((5000, 7000), rows):
        assert row.claim_epsilon > 1.5 * row.epsilon  # the whole claim's epsilon: the second release's share too
        assert row.accountant.startswith("gradient release alone") and "z = 1.206" in row.accountant
        mu = mu_lower(fp, 20489, 7000, 20651, beta=0.05 / 2)
        assert (row.verdict == "exceeds") == (mu > 1 / z_grad)
        assert row.gate_eps_lower_bound < row.claim_epsilon  # the whole claim's epsilon would not catch either
    assert [r.verdict for r in rows] == ["exceeds", "consistent"]
    assert "the claim's gradient release's epsilon" in caught[0].reasons[0]
