"""Where DP training starts (init = public | random | PATH), the pretraining cache, the utility panel."""

from __future__ import annotations

import pytest
import torch

from privaudit.core.datasets import SplitConfig, load_dataset
from privaudit.core.errors import ConfigError
from privaudit.defenses import Budget, make_defense
from privaudit.defenses.training import pretrain
from privaudit.defenses.evaluation.evaluation import gap_closed

SMALL = {"width": 4, "rep_dim": 8, "proj_hidden": 8, "proj_dim": 4, "epochs": 1, "batch_size": 64,
         "pretrain_epochs": 1}
EXAMPLE_LEVEL = ("dpsgd", "dp-clip", "dpcl-simclr", "dpcl-barlow", "dp-gcl", "logit-dp")


@pytest.mark.parametrize("name", EXAMPLE_LEVEL)
def test_every_example_level_method_defaults_to_public_init_and_pld(name):
    cfg = make_defense(name).config
    assert cfg.init == "public" and cfg.accountant == "pld"


def test_bad_init_values_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"init: .*'bogus'.*neither 'public' nor 'random'"):
        make_defense("dpsgd", {"init": "bogus"})
    with pytest.raises(ConfigError, match="init"):
        make_defense("dp-gcl", {"init": str(tmp_path / "absent.safetensors")})
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not safetensors")
    with pytest.raises(ConfigError, match="init: .* not a readable safetensors file"):
        pretrain.file_state(str(junk))


def test_public_init_needs_a_public_split():
    data = load_dataset("digits", seed=0, splits=SplitConfig(public=0.0))
    with pytest.raises(ConfigError, match=r"init: 'public' needs a public split.*splits.public = 0"):
        make_defense("dp-gcl", SMALL).fit(data, Budget(noise_multiplier=1.0), 0, progress=False)


def test_public_init_starts_from_the_cached_pretrained_encoder(digits, tmp_path):
    pretrain._MEMORY.clear()
    defense = make_defense("dpsgd", SMALL)
    with pretrain.cache_in(tmp_path):
        state, record = pretrain.public_state(digits, defense.config, 1)
        assert record["cached"] is None and record["n_public"] == len(digits.public)
        files = list((tmp_path / "pretrained").glob("*.safetensors"))
        assert len(files) == 1  # written to the on-disk cache
        pretrain._MEMORY.clear()
        again, record2 = pretrain.public_state(digits, defense.config, 1)
        assert record2["cached"] == "disk" and all(torch.equal(state[k], again[k]) for k in state)
        _, record3 = pretrain.public_state(digits, defense.config, 1)
        assert record3["cached"] == "memory"
        run = defense.prepare(digits, Budget(noise_multiplier=1.0), 0)
    assert run.extras["init"]["init"] == "public"
    for k, v in run.model.state_dict().items():  # training starts exactly from the pretrained weights
        assert torch.equal(v, state[k]), k
    random = make_defense("dpsgd", {**SMALL, "init": "random"}).prepare(digits, Budget(noise_multiplier=1.0), 0)
    assert any(not torch.equal(v, state[k]) for k, v in random.model.state_dict().items())


def test_path_init_loads_a_saved_model_and_rejects_another_architecture(digits, tmp_path):
    trained = make_defense("dp-gcl", {**SMALL, "init": "random"}).fit(digits, Budget(noise_multiplier=1.0), 0,
                                                                         progress=False)
    path = trained.save(tmp_path / "ckpt") / "model.safetensors"
    run = make_defense("dp-gcl", {**SMALL, "init": str(path)}).prepare(digits, Budget(noise_multiplier=1.0), 1)
    for k, v in run.model.state_dict().items():
        assert torch.equal(v, trained.model.state_dict()[k]), k
    wider = make_defense("dp-gcl", {**SMALL, "width": 8, "init": str(path)})
    with pytest.raises(ConfigError, match="init: .* does not fit the encoder"):
        wider.prepare(digits, Budget(noise_multiplier=1.0), 0)


def test_pld_calibration_spends_the_whole_target():
    from privaudit.defenses.dp.accounting import claim_epsilon

    data = load_dataset("digits", seed=0)
    for accountant in ("pld", "rdp"):
        d = make_defense("dp-gcl", {**SMALL, "epochs": 2, "accountant": accountant, "init": "random"})
        plan = d.plan(len(data.train))
        mech = d.mechanisms(plan)
        z = d.calibrate(plan, mech, Budget(target_epsilon=8.0), 1e-5)
        eps = claim_epsilon(d.claim_for(plan, mech, z, 1e-5), "pld")
        if accountant == "pld":
            assert 7.9 <= eps <= 8.0 + 1e-6, eps  # sound (upper PLD bound) and nothing paid for nothing
            z_pld = z
        else:
            assert eps < 7.8 and z > z_pld  # RDP over-noises: its claim is tighter than needed


def test_pld_calibration_reaches_the_target_without_replacement_too():
    """RDP over-states DPCL's (without-replacement, replace-one) epsilon more than 2x at epsilon 1: the PLD search
    must look far below the RDP answer, not just in [z_rdp / 2, z_rdp]."""
    from privaudit.defenses.dp.accounting import claim_epsilon

    d = make_defense("dpcl-simclr", {**SMALL, "epochs": 2})
    plan = d.plan(372)
    mech = d.mechanisms(plan)
    z = d.calibrate(plan, mech, Budget(target_epsilon=1.0), 1e-5)
    assert 0.99 <= claim_epsilon(d.claim_for(plan, mech, z, 1e-5), "pld") <= 1.0 + 1e-6


def test_gap_closed_closed_form():
    assert gap_closed(0.8, 0.7, 0.9) == pytest.approx(0.5)
    assert gap_closed(0.6, 0.7, 0.9) == pytest.approx(-0.5)
    assert gap_closed(0.9, 0.7, 0.7) is None


def test_utility_panel_reports_init_random_and_a_same_steps_reference(digits):
    from privaudit.defenses.evaluation.utility import utility_panel

    trained = make_defense("dp-gcl", {**SMALL, "epochs": 2}).fit(digits, Budget(noise_multiplier=1.0), 0,
                                                                   progress=False)
    panel = utility_panel(trained, digits)
    for key in ("trained", "init", "random", "nonprivate"):
        assert 0.0 <= panel[key]["linear_probe_accuracy"] <= 1.0
    assert panel["reference"]["steps"] == len(trained.history["step"]) and panel["reference"]["init"] == "public"
    lp = {k: panel[k]["linear_probe_accuracy"] for k in ("trained", "random", "nonprivate")}
    expect = gap_closed(lp["trained"], lp["random"], lp["nonprivate"])
    assert panel["gap_closed"]["linear_probe_accuracy"] == (pytest.approx(expect) if expect is not None else None)
    n_test = len(digits.test)
    for metric in ("linear_probe_accuracy", "knn_accuracy"):
        c = panel["vs_init"][metric]
        assert c["n"] == n_test and 0.0 <= c["p_drop"] <= 1.0
        assert c["delta"] == pytest.approx(panel["trained"][metric] - panel["init"][metric], abs=1e-6)


def test_paired_change_is_the_exact_mcnemar_test():
    from scipy import stats

    from privaudit.defenses.evaluation.evaluation import paired_change

    base = torch.tensor([True] * 60 + [False] * 40)
    worse = base.clone()
    worse[:9] = False  # 9 lost
    worse[60:61] = True  # 1 gained
    c = paired_change(worse, base)
    assert (c["gained"], c["lost"], c["n"]) == (1, 9, 100) and c["delta"] == pytest.approx(-0.08)
    assert c["p_drop"] == pytest.approx(stats.binomtest(9, 10, 0.5, alternative="greater").pvalue)
    assert c["p_drop"] < 0.05
    assert paired_change(base, base)["p_drop"] == 1.0
    one = base.clone()
    one[0] = False  # one test example: no evidence of a drop
    assert paired_change(one, base)["p_drop"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="equal-length"):
        paired_change(base, base[:10])


def test_report_shows_utility_beside_leakage():
    from privaudit.audit.report import markdown
    from privaudit.audit.report import summary as s

    panel = {k: {"linear_probe_accuracy": v, "knn_accuracy": v} for k, v in
             (("trained", 0.9), ("init", 0.88), ("random", 0.7), ("nonprivate", 0.95))}
    panel["gap_closed"] = {"linear_probe_accuracy": 0.8, "knn_accuracy": 0.8}
    panel["vs_init"] = {m: {"delta": -1 / 270, "gained": 2, "lost": 3, "n": 270, "p_drop": 0.5}
                        for m in ("linear_probe_accuracy", "knn_accuracy")}
    report = {"cells": [{"defense": "dp-gcl", "target_epsilon": 8.0, "utility": {"panel": panel},
                         "details": {"init": {"init": "public"}}},
                        {"defense": "alm", "target_epsilon": 8.0, "utility": {}, "details": {}}]}
    rows = s.panel_rows(report)
    assert len(rows) == 1 and len(rows[0]) == len(s.PANEL_HEADERS)
    assert rows[0][:5] == ["dp-gcl", "8", "public", "0.9", "0.88"] and rows[0][7] == "0.8"
    assert rows[0][-1] == "probe -1/270 (p 0.5), k-NN -1/270 (p 0.5)"
    assert "gap closed" in markdown.table(s.PANEL_HEADERS, rows)
