"""Planted noise bugs in DP-SGD, through the gradient-canary audit and the gate: a noise generator re-created with the
same seed at every step (reused noise: epsilon is infinite, yet its variance is the claimed one) and noise missing on
the biases only or on one weight tensor. Each is caught by the check of :mod:`privaudit.attacks.noise.noise_structure`
that the gate names, with the tensor; the correct release passes. The plants are fixtures here, not product code:
they wrap the engine's noise (``release``'s generator, ``gaussian``'s draw) for the length of one test. Each test
trains DP-SGD (about 7 s on an idle core, more on a shared one): slow. The same bugs on the idealised mechanism run
in the default tests (tests/test_noise_structure.py)."""

import numpy as np
import pytest
import torch

import privaudit.defenses.dp.base as dp_base
import privaudit.defenses.dp.release.step as dp_step
from privaudit.attacks.base import Target
from privaudit.attacks.registry import make_attack
from privaudit.audit.gate.judge import gate_cells
from privaudit.audit.report.records import CellGate
from privaudit.audit.suite.model import GateConfig
from privaudit.defenses import Budget
from privaudit.defenses.registry import make_defense
from privaudit.defenses.training.seeding import torch_generator

from cell_records import make_attack_record, make_cell_record, make_claim

pytestmark = pytest.mark.slow

PARAMS = {"epochs": 1}
BUDGET = Budget(target_epsilon=1.0)
WEIGHT = "encoder.net.12.weight"  # one weight tensor of the default encoder


@pytest.fixture(scope="module")
def layout(digits):
    """(names, sizes) of DP-SGD's trainable tensors in the flat layout."""
    dp = make_defense("dpsgd", PARAMS).prepare(digits, BUDGET, 0).extras["dp"]
    return list(dp["param_names"]), list(dp["param_numels"])


def reuse_noise(monkeypatch):
    """The bug: every step's noise comes from a generator re-created with one seed."""
    release = dp_base.release
    monkeypatch.setattr(dp_base, "release",
                        lambda total, std, generator, **kw: release(total, std, torch_generator(0, "reused"), **kw))


def drop_noise(monkeypatch, layout, unnoised):
    """The bug: no noise on the flat coordinates of the tensors ``unnoised(name)`` selects."""
    names, numels = layout
    keep = torch.cat([torch.full((k,), 0.0 if unnoised(n) else 1.0) for n, k in zip(names, numels)])
    gaussian = dp_step.gaussian

    def planted(shape, std, generator, **kw):
        draw = gaussian(shape, std, generator, **kw)
        return draw * keep.to(draw.device, draw.dtype) if draw.numel() == keep.numel() else draw

    monkeypatch.setattr(dp_step, "gaussian", planted)


def audited_gate(digits) -> CellGate:
    """DP-SGD audited by 3,000 gradient canaries, judged by the gate as a one-cell suite."""
    target = Target(None, digits, "dpsgd", PARAMS, BUDGET, seed=0)
    s = make_attack("gradient-canary", canaries=3000, mechanism=False).run(target).summary()
    delta = s["trajectory_bound"]["delta"]
    claim = {"event": s["trajectory_bound"]["counts"]["event"], "params": {}, "relation": "add-remove",
             "unit": "example", "delta": delta}
    attack = make_attack_record(s["eps_lower_bound"], bound=s["bound"], trajectory_bound=s["trajectory_bound"],
                                eps_lb_trajectory=s["eps_lb_trajectory"])
    cell = make_cell_record("digits/dpsgd/eps=1/seed=0", defense="dpsgd", claim=make_claim(delta=delta),
                            epsilon={"pld": 1.0}, full_claim=claim, attacks={"gradient-canary": attack})
    return gate_cells([cell], GateConfig())[0]


def test_the_correct_release_passes_every_noise_check(digits):
    gate = audited_gate(digits)
    noise = gate.released_noise[0]
    assert gate.status == "pass" and not noise["independence"]["rejected"] and not noise["tensors"]["rejected"]
    assert not noise["coordinates"]["rejected"]
    assert not noise["tensors"]["uncovered"]  # stratified: every tensor holds canaries


def test_reused_noise_is_caught_across_steps(digits, monkeypatch):
    reuse_noise(monkeypatch)
    gate = audited_gate(digits)
    noise = gate.released_noise[0]
    assert noise["independence"]["rejected"] and noise["independence"]["std_ratio"] < 0.01
    assert any("noise independence across steps" in r for r in gate.reasons)


@pytest.mark.parametrize("where", ["biases", "weight"])
def test_missing_noise_on_a_tensor_is_caught_and_named(digits, layout, monkeypatch, where):
    unnoised = (lambda n: n.endswith(".bias")) if where == "biases" else (lambda n: n == WEIGHT)
    drop_noise(monkeypatch, layout, unnoised)
    gate = audited_gate(digits)
    tensors = gate.released_noise[0]["tensors"]
    expected = sorted(n for n in layout[0] if unnoised(n))
    assert tensors["rejected"] == expected and expected
    assert all(any("noise per tensor" in r and f"tensor {n!r} (" in r for r in gate.reasons) for n in expected)
    if where == "biases":
        share = sum(k for n, k in zip(*layout) if unnoised(n)) / sum(layout[1])
        assert share < 0.02 and not gate.released_noise[0]["rejected"]  # the pooled check alone misses it


def test_noise_broadcast_over_each_tensor_is_caught_across_coordinates_only(digits):
    """One draw per tensor broadcast over it (tests/bug_plants.py): every coordinate's variance as claimed, fresh at
    every step; the coordinate test rejects by a wide margin and the gate names it (the checks that sum squares over
    coordinates also see it, by chance, from how few independent values the tensors hold)."""
    from bug_plants import BUGS

    with BUGS["broadcast-noise"].plant("dpsgd", PARAMS):
        gate = audited_gate(digits)
    noise = gate.released_noise[0]
    assert noise["coordinates"]["rejected"] and noise["coordinates"]["std_ratio"] > 10
    assert any("noise independence across coordinates" in r for r in gate.reasons)
