"""``privaudit audit-training`` at the precision the code ran in, and every noisy release of the code composed into
the release it checks: a float32 recipe's rounding is stated, not refuted; a float64 shortfall of 1e-4 is refuted;
an adaptive clip's count query is composed with the gradient and a claim that accounts less is refuted, naming it."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples"))

from training_audit_helpers import audit_recipe  # noqa: E402

pytestmark = pytest.mark.usefixtures("short_recipe", "opacus_rdp_memo")


def audit(members: Path, train: str, **kw):
    return audit_recipe("opacus_recipe:make_net", members, train, **kw)


def test_a_float32_recipe_is_not_refuted_and_its_rounding_is_stated(members, tmp_path):
    """The clip a float32 tensor (0.3), the multiplier 1.1547005...: the std Opacus draws with is z * C rounded in
    float32, 5.8e-8 below it. The command exits 0 and its report states the rounding and the epsilon it costs."""
    import opacus_plants

    from privaudit.audit.cli import main

    z, c = opacus_plants.FLOAT32_Z, torch.tensor(opacus_plants.FLOAT32_CLIP)
    assert float(z * c) < z * float(c)  # the precondition: the float32 std lies below sigma * C
    out = tmp_path / "out"
    code = main(["audit-training", "--factory", "opacus_recipe:make_net", "--train-fn",
                 "opacus_plants:train_float32_clip", "--members", str(members), "--delta", "1e-5", "--size-radius",
                 "1", "--out", str(out)])
    report = json.loads((out / "report.json").read_text())
    trace = json.loads((out / "trace.json").read_text())
    assert code == 0 and report["verdict"] == "not refuted" and not report["findings"], report["findings"]
    assert trace["precision"]["noise"] == "float32" and trace["precision"]["sample_rate"] == "float64"
    [note] = trace["rounding"]
    says = note["message"]
    assert note["check"] == "trace: noise_multiplier" and "within float32 rounding (tolerance 4.8e-07)" in says
    assert "noise multiplier 1.154700472 " in says and "claimed 1.154700538 by 5.77e-08 relative" in says, says
    assert "at the rounded values the claim's epsilon by rdp is" in says and "rounding, not a refutation" in says
    assert "rounding (trace: noise_multiplier)" in (out / "report.md").read_text()


def test_a_float64_shortfall_of_one_in_ten_thousand_is_refuted(members):
    """The noise drawn at 1/1.0001 of the multiplier the accountant records, in float64: 1e-4 is far beyond
    float64's rounding (8.9e-16), so every step is refuted, its message showing the two values apart."""
    a = audit(members, "opacus_plants:train_float64_shortfall")
    found = [f for f in a.findings if f["check"] == "trace: noise_multiplier"]
    assert a.verdict.verdict == "refuted" and len(found) == len(a.trace["batch_size"]), a.findings
    assert "by 0.0001 relative, beyond float64 rounding (tolerance 8.9e-16)" in found[0]["message"], found[0]
    assert not a.trace.get("rounding")


@pytest.mark.parametrize("plant, says", [
    ("adaclip_gradient_only", "the claim leaves out AdaClipDPOptimizer.unclipped_num"),
    ("adaclip_opacus_accounting", "the claim accounts AdaClipDPOptimizer.unclipped_num at 0.5 of the sensitivity")])
def test_an_adaptive_clip_accounted_for_less_than_its_count_is_refuted_naming_the_count(members, plant, says):
    """The count of unclipped units AdaClipDPOptimizer noises (std 3.2, one unit moves it by 1) composed with the
    gradient (z_g = 1.0124): 1 / z^2 = 1 / z_g^2 + 1 / 3.2^2 at the probe just below the clip, z = 0.9661. An
    accountant told the gradient's z alone leaves the count out; Opacus 1.6's own (z = 1, Andrew et al.'s Theorem 1
    for a centred count of sensitivity 1/2) accounts it at half the sensitivity its uncentred count has."""
    import opacus_plants

    a = audit(members, f"opacus_plants:train_{plant}")
    found = [f for f in a.findings if f["check"] == "trace: noise_multiplier"]
    assert a.verdict.verdict == "refuted" and found, a.findings
    assert all(says in f["message"] for f in found), found
    gradient, composed = opacus_plants.adaclip_multipliers(type("O", (), {"noise_multiplier": 1.0,
                                                                          "unclipped_num_std": 3.2})())
    near = ((1 - 2 ** -10) ** 2 / gradient ** 2 + 1 / 3.2 ** 2) ** -0.5  # the probe unit just below the clip
    assert min(a.trace["multiplier"]) == pytest.approx(near, rel=1e-6) and composed < near < 1.0 < gradient


def test_andrew_et_als_centred_count_is_not_refuted_under_opacus_accounting(members):
    """The count Andrew et al. (2021) analyse, each unit's bit less 1/2: one unit moves it by 1/2, and the nominal z
    Opacus accounts is exactly the gradient and that count composed: not refuted, the count measured at 1/2."""
    a = audit(members, "opacus_plants:train_adaclip_centred")
    assert a.verdict.verdict == "not refuted" and not a.findings, a.findings
    assert {q["sensitivity"] for q in a.trace["other_queries"]} == {0.5}
    assert min(a.trace["multiplier"]) >= 1.0 * (1 - 4.8e-7)


def test_the_watch_leaves_an_adaptive_clips_count_as_the_batchs(members):
    """The clipping probe runs the code's clipping on one unit alone, which adds to AdaClip's count and sample size;
    the watch restores them after each probe, so the watched run's clips are the unwatched run's, bit for bit."""
    import opacus_recipe
    import opacus_plants

    from privaudit.defenses.watch.opacus_watch import OpacusWatch

    data = np.load(members)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    clips = []
    for watched in (False, True):
        model = opacus_recipe.make_net()
        private, opt, loader, _ = opacus_plants._adaclip_parts(model, x, y, 0, 0.9)
        seen = []
        step = opt.step

        def stepped(*args, _step=step, _opt=opt, _seen=seen, **kwargs):
            out = _step(*args, **kwargs)
            _seen.append(float(_opt.max_grad_norm))
            return out
        opt.step = stepped
        if watched:
            with OpacusWatch(len(x)):
                opacus_recipe.fit(private, opt, loader)
        else:
            opacus_recipe.fit(private, opt, loader)
        private._close()
        clips.append(seen)
    assert clips[0] == clips[1] and len(clips[0]) == 14 and clips[0][-1] != clips[0][0]


def test_the_composition_is_a_probe_units_sensitivity_in_units_of_the_noise():
    """:func:`compose`: per probe unit mu^2 = (min(nu, C) / sigma_g)^2 + sum (Delta / (c sigma))^2, the release's
    multiplier 1 / sqrt(max((C / sigma_g)^2, max mu^2)); a query no attribute received is not judged, a probe that
    moves no query leaves the gradient's alone, and a count that received no noise makes the multiplier 0."""
    from privaudit.defenses.watch.opacus_queries import Probe, Query, compose

    def query(name, scale=1.0):
        return Query(3.2, 1, "float64", {}, torch.zeros(1), name=name, scale=scale, owner="Opt")

    probes = [Probe(2.5, {}), Probe(0.999, {"count": 1.0}), Probe(0.6, {"count": 1.0})]
    z = compose(1.0, 1.1, probes, [query("count"), query(None)])
    assert z == pytest.approx((0.999 ** 2 / 1.1 ** 2 + 1 / 3.2 ** 2) ** -0.5)
    assert compose(1.0, 1.1, [Probe(2.5, {})], [query("count")]) == pytest.approx(1.1)
    assert compose(1.0, 1.1, probes, [query("count", scale=0.0)]) == 0.0
    assert compose(1.0, 1.1, [], [query("count")]) == pytest.approx(1.1)  # no probe: nothing judged
    assert math.isclose(compose(1.0, 1.1, probes, [query("count", scale=0.5)]),
                        (0.999 ** 2 / 1.1 ** 2 + 1 / 1.6 ** 2) ** -0.5)
