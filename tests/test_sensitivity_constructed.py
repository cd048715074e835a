"""Issue 16: constructed parameters that reach the worst case of the clipped gradient sums, the
ascent on the parameters, and witnesses that carry the searched parameters."""

from __future__ import annotations

import math

import pytest
import torch

from privaudit.audit.sensitivity import CLAIMS, Context, Setting
from privaudit.audit.sensitivity.extremal import (chunk_seeds, flip_seeds, logit_seeds, split_flip_angles,
                                                  split_flip_head, split_flip_ratio, split_flip_seeds, spreadout_seeds,
                                                  spreadout_supremum, group_clip_limit, group_clip_seeds,
                                                  group_clip_supremum)
from privaudit.audit.sensitivity.evaluator import Evaluator, Clock
from privaudit.audit.sensitivity.search import gradient_ascent
from privaudit.audit.sensitivity.witness import replay, save_witness
from privaudit.defenses.dp.engine.params import parameter_values


def _target(claim: str, setting: Setting, digits):
    ctx = Context(0)
    ctx.__dict__["data"] = digits
    return CLAIMS[claim].target(setting, ctx)


def _ratios(target, pairs):
    ev = Evaluator(target)
    return [ev.evaluate(p) / target.bound for p in pairs], ev


def test_flip_seeds_turn_every_simclr_view_around(digits):
    """2 (2|B| - 2) C of the 4|B|C are reached by construction: ratio to the paper's 4C near |B| - 1."""
    b = 6
    target = _target("dpcl.simclr-gradient", Setting(b, {"noise_multiplier": 0.01}), digits)
    pairs = flip_seeds(target, torch.Generator().manual_seed(0))
    assert pairs and all(p.params is not None for p in pairs)
    ratios, _ = _ratios(target, pairs)
    assert max(ratios) >= 0.8 * (b - 1), ratios
    assert max(ratios) <= b + 1e-6  # the sound 4|B|C holds


@pytest.mark.parametrize("b", [2, 4, 8])
def test_split_flip_limit_tends_to_the_plain_bound(b):
    """DPCL Sec. 3.2.1's 4|B|C is tight: the split flip's limit ratio tends to 1 as the angles' margin shrinks."""
    angles, limit = split_flip_angles(b, 0.5)
    assert 0.99 <= limit <= 1.0 + 1e-12
    _, exact = split_flip_angles(b, 0.5, margin=0.005, exact=True)
    assert 0.999 <= exact <= 1.0 + 1e-12
    assert limit > (b - 1) / b + 0.2 / b  # beyond the flip construction's (|B| - 1) / |B|
    # the limit is a property of the angles: moving the replaced example's split views together loses it
    joined = torch.tensor([angles], dtype=torch.float64)
    joined[0, 0] = joined[0, 1]
    assert float(split_flip_ratio(joined, b, 0.5)[0]) < 0.9


def test_split_flip_seeds_realise_the_limit_on_the_model(digits):
    """Every view's clipped gradient turns: the model's ratio equals the angles' limit, within the bound."""
    target = _target("dpcl.simclr-gradient-plain", Setting(4), digits)
    pairs = split_flip_seeds(target, torch.Generator().manual_seed(0))
    assert pairs and all(p.params is not None for p in pairs)
    ratios, _ = _ratios(target, pairs)
    _, limit = split_flip_angles(4, float(target.params["tau"]))
    assert max(ratios) == pytest.approx(limit, abs=2e-3), ratios
    assert 0.99 <= max(ratios) <= 1.0 + 1e-6


def test_split_flip_head_refuses_a_fit_the_model_cannot_realise(digits):
    target = _target("dpcl.simclr-gradient-plain", Setting(2), digits)
    gen = torch.Generator().manual_seed(0)
    reps = torch.rand(1, 64, generator=gen, dtype=torch.float64) + 1e-9 * torch.randn(6, 64, generator=gen,
                                                                                       dtype=torch.float64)
    theta = torch.tensor([0.1, 3.0, 3.0, 0.1, 0.1, 0.1], dtype=torch.float64)
    assert split_flip_head(target, reps, theta, 100.0, 1e-6) is None
    good = torch.rand(6, 64, generator=gen, dtype=torch.float64)
    assert split_flip_head(target, good, theta, 100.0, 1e-6) is not None


def test_spreadout_seeds_reach_the_closed_form_supremum_at_n_2(digits):
    """Lemma 4.6 at n = 2: sup = 4C (2/3 of 6C), approached as 4 cos(delta) C by the constructed pair."""
    target = _target("logitdp.spreadout", Setting(1), digits)
    pairs = spreadout_seeds(target, torch.Generator().manual_seed(0))
    assert pairs and all(p.params is not None for p in pairs)
    ratios, ev = _ratios(target, pairs)
    sup = spreadout_supremum(target.params)
    assert sup == 4.0 * target.params["C"] and spreadout_supremum({**target.params, "n": 3}) is None
    best = max(ratios) * target.bound
    assert best == pytest.approx(4 * math.cos(0.04) * target.params["C"], rel=1e-3)
    assert best <= sup * (1 + 1e-6)


def test_group_clip_limit_turns_every_fixed_group_and_reaches_2kc():
    """DP-GCL Eq. 8 with K = 2 fixed groups: the limit is 2K / (2K + 1) of Thm. 1's (2K + 1) C, never above."""
    theta, limit = group_clip_limit((0, 1, 0, 1), 0, 2, 1 / math.sqrt(2))
    assert limit == pytest.approx(0.8, abs=1e-3) and limit <= 0.8 + 1e-9
    assert group_clip_supremum({"B": 4, "S": 2, "C": 1.0}) == 4.0
    assert group_clip_supremum({"B": 8, "S": 2, "C": 0.5}) == 4.0
    assert theta.shape == (15,) and bool(((theta > 0) & (theta < math.pi)).all())


def test_group_clip_seeds_reach_the_supremum_on_the_model(digits):
    target = _target("dpgcl.group-clip", Setting(4, {"group_size": 2, "batch_size": 4}), digits)
    pairs = group_clip_seeds(target, torch.Generator().manual_seed(0))
    assert len(pairs) == 1 and pairs[0].params is not None
    ratios, _ = _ratios(target, pairs)
    sup = group_clip_supremum(target.params) / target.bound
    assert sup == pytest.approx(0.8)
    assert 0.99 * sup <= ratios[0] <= sup + 1e-6, ratios


def test_chunk_seeds_shift_every_group_of_the_chunked_grouping(digits):
    """Homogeneous groups in D, mixed ones in D': ~ (K - 1) C against the paper's 2C."""
    b = 12
    target = _target("dpgcl.group[chunk]", Setting(b, {"group_size": 2, "batch_size": b, "clip": 1e-5}), digits)
    ratios, _ = _ratios(target, chunk_seeds(target, torch.Generator().manual_seed(0)))
    k = b // 2
    assert max(ratios) >= 0.8 * (k - 1) / 2 and max(ratios) > 1.5, ratios


@pytest.mark.parametrize("tau", [1.0, 0.1])
def test_logit_seeds_reach_the_derived_value_and_refute_lemma_4_5(digits, tau):
    target = _target("logitdp.infonce", Setting(1, {"temperature": tau}), digits)
    ratios, _ = _ratios(target, logit_seeds(target, torch.Generator().manual_seed(0)))
    p = 1 / (1 + math.exp(2 * math.cos(0.1) / tau))
    derived = 2 * math.sqrt(2) * (1 - p) / 2  # 2 sqrt(2) (1 - p) C against 2C at n = 2
    assert ratios[0] == pytest.approx(derived, rel=0.02)
    assert ratios[0] > 1.2


def test_parameter_values_equal_a_loaded_state_bit_for_bit(digits):
    target = _target("dpcl.simclr-gradient", Setting(3, {"noise_multiplier": 0.01}), digits)
    params = {k: v + 0.01 * torch.randn(v.shape, generator=torch.Generator().manual_seed(1))
              for k, v in target.parameters().items()}
    x = digits.train.x[:3].float()
    with torch.no_grad():
        given = target.call(x, 5, params)
        state = {k: v.clone() for k, v in target.module.state_dict().items()}
        target.module.load_state_dict({**state, **params})
        loaded = target.fn(x, 5)
        target.module.load_state_dict(state)
        again = target.fn(x, 5)
    assert torch.equal(given, loaded) and not torch.equal(given, again)
    with parameter_values(target.module, params):
        assert torch.equal(target.fn(x, 5), given)


def test_ascent_on_the_parameters_climbs_and_its_witness_replays(digits, tmp_path):
    target = _target("dpcl.simclr-gradient", Setting(3, {"noise_multiplier": 0.01}), digits)
    gen = torch.Generator().manual_seed(0)
    start = flip_seeds(target, gen)[0]
    ev = Evaluator(target)
    first = ev.evaluate(type(start)(start.base, start.new, 0, start.randomness))  # at the model's own parameters
    info: dict = {}
    gradient_ascent(target, ev, [type(start)(start.base, start.new, 0, start.randomness)], Clock(ev, evaluations=8),
                    8, info=info)
    assert info["parameters"] and ev.best.pair.params is not None
    assert ev.best.distance > first
    spec = CLAIMS["dpcl.simclr-gradient"]
    path = save_witness(tmp_path, spec, target, ev.best, {"seed": 0, "dataset": "digits", "data_dir": None},
                        {"bound": target.bound, "observed": ev.best.distance, "tolerance": 0.0,
                         "ratio": ev.best.distance / target.bound, "verdict": "violated"})
    out = replay(path)
    assert out["identical_outputs"], out
