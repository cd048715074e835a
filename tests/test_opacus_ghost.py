"""Opacus' fast gradient (ghost) clipping watched as it ran (``defenses/watch/opacus_ghost.py``): the clipped norm of
each release's largest unit measured through the code's own coefficients, the honest recipe under ghost clipping not
refuted, and the float32 rounding the check's slack allows for measured on long sequences."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples"))

from training_audit_helpers import audit_recipe  # noqa: E402


pytestmark = pytest.mark.usefixtures("short_recipe", "opacus_rdp_memo")


def _watched(plant: str, members: Path):
    import opacus_plants

    from privaudit.defenses.watch.opacus_watch import OpacusWatch

    data = np.load(members)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    with OpacusWatch(len(x)) as watch:
        getattr(opacus_plants, f"train_{plant}")(opacus_plants.make_net(), x, y, seed=0)
    return watch


@pytest.mark.parametrize("plant", ["ghost", "ghost_virtual_steps"])
def test_every_ghost_clipped_release_records_its_units_and_clipped_norm(members, plant):
    """One backward pass per release, or several (virtual steps): each release counts every unit its passes clipped."""
    from opacus.utils.fast_gradient_clipping_utils import DPTensorFastGradientClipping

    from privaudit.defenses.watch.opacus_ghost import GHOST_SLACK

    backward = DPTensorFastGradientClipping.__dict__["backward"]
    watch = _watched(plant, members)
    trace = watch.trace(1 / 14)
    assert len(watch.steps) == 14
    assert trace.columns["units"] == trace.columns["batch_size"] and min(trace.columns["units"]) > 0
    # the code clips the largest unit to C / (norm + 1e-6) * norm: within the slack of the clip, not above it
    assert all(0.999 < v <= 1.0 + 1e-5 for v in trace.columns["unit_norm_max"]), trace.columns["unit_norm_max"]
    assert trace.columns["unit_norm_slack"] == [GHOST_SLACK] * 14
    assert DPTensorFastGradientClipping.__dict__["backward"] is backward  # the watch restored Opacus on exit


def test_the_probe_leaves_the_modules_norms_as_the_batchs():
    """The probe asks the code for one rescaled unit's coefficient: the batch's per-sample norms (the property Opacus
    reads again) and every parameter's norms are restored, and the measured norm is the clip's."""
    from opacus.grad_sample import GradSampleModuleFastGradientClipping

    from privaudit.defenses.watch.opacus_ghost import ghost_probe

    torch.manual_seed(0)
    module = GradSampleModuleFastGradientClipping(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)),
                                                  max_grad_norm=0.01)
    losses = nn.functional.cross_entropy(module(torch.randn(5, 8)), torch.randint(0, 3, (5,)), reduction="none")
    losses.mean().backward(retain_graph=True)
    coef = module.get_clipping_coef()
    before = module.per_sample_gradient_norms.clone(), [p._norm_sample.clone() for p in module.trainable_parameters]
    original = type(module).get_clipping_coef
    seen = ghost_probe(module, losses, coef, original, 0.01, 3, list(module.parameters()))
    assert seen.units == 5 and 0.01 * (1 - 1e-4) < seen.unit_norm_max <= 0.01 * (1 + 1e-5)
    assert torch.equal(module.per_sample_gradient_norms, before[0])
    assert all(torch.equal(p._norm_sample, b) for p, b in zip(module.trainable_parameters, before[1]))


@pytest.mark.parametrize("plant, low, high", [("ghost_clip_mismatch", 1.99, 2.0 + 1e-5),
                                              ("ghost_norm_missing_layer", 1.01, 1.5)])
def test_the_probe_measures_a_planted_ghost_clipping_bug_at_every_release(members, plant, low, high):
    """Twice the clip (every release's largest unit enters at 2C), or the output bias's norm left out of the code's
    norms (the unit the code clips to C enters above it: the true gradient has the bias's share too)."""
    norms = _watched(plant, members).trace(1 / 14).columns["unit_norm_max"]
    assert all(low < v < high for v in norms), norms


@pytest.mark.parametrize("mode", ["hooks", "functorch", "ew", "ghost"])
def test_every_grad_sample_mode_of_make_private_has_its_clipping_observed(members, mode):
    """make_private's per-sample modes (hooks, functorch, expanded weights) and fast clipping: every release counts its
    units and measures a clipped unit between C/2 (the per-sample probe's drawn norm may lie below the clip) and the
    clip, at the clip on most releases (the data's largest gradients are far above it)."""
    import opacus_plants

    from privaudit.defenses.watch.opacus_watch import OpacusWatch

    data = np.load(members)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    with OpacusWatch(len(x)) as watch:
        opacus_plants.make_private_epoch(opacus_plants.make_net(), x, y, seed=0, mode=mode)
    trace = watch.trace(1 / 14)
    assert len(watch.steps) == 14 and trace.columns["units"] == trace.columns["batch_size"]
    norms = trace.columns["unit_norm_max"]
    assert all(0.5 - 1e-6 <= v <= 1.0 + 1e-5 for v in norms) and sum(v > 0.999 for v in norms) >= 7, norms
    assert ("unit_norm_slack" in trace.columns) == (mode == "ghost")


def test_the_honest_recipe_under_ghost_clipping_is_not_refuted(members):
    from privaudit.audit.user.training.training_report import notes

    a = audit_recipe("opacus_recipe:make_net", members, "opacus_plants:train_ghost")
    assert a.verdict.verdict == "not refuted" and not a.findings, a.findings
    assert ("clipping as applied: observed on 14 of 14 releases (fast gradient clipping: through the code's "
            "coefficients, relative slack 0.001)") in "\n".join(notes(a))
    assert a.release_replay["judged"] and 0.99 < a.release_replay["ratio"] <= 1.0 + 1e-5


@pytest.mark.parametrize("tokens", [16, 256, 1024])
def test_ghost_norms_of_a_sequence_model_agree_with_autograd_within_a_tenth_of_the_slack(tokens):
    """The slack's basis (GHOST_SLACK's comment): Opacus' ghost norms of an embedding-and-linear sequence model
    against each unit's autograd gradient."""
    from opacus.grad_sample import GradSampleModuleFastGradientClipping

    from privaudit.defenses.watch.opacus_ghost import GHOST_SLACK

    torch.manual_seed(0)
    net = nn.Sequential(nn.Embedding(1000, 64), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10))
    module = GradSampleModuleFastGradientClipping(net, max_grad_norm=1.0)
    x, y = torch.randint(0, 1000, (4, tokens)), torch.randint(0, 10, (4, tokens))
    losses = nn.functional.cross_entropy(module(x).reshape(-1, 10), y.reshape(-1), reduction="none")
    losses = losses.view(4, tokens).mean(1)
    losses.mean().backward(retain_graph=True)
    reported = module.get_norm_sample().double()
    module.disable_hooks()
    for i in range(4):
        grads = torch.autograd.grad(losses[i], list(module.parameters()), retain_graph=True)
        true = torch.sqrt(sum(g.double().pow(2).sum() for g in grads))
        assert abs(float(reported[i] - true)) <= GHOST_SLACK / 10 * float(true)
