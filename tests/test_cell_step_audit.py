"""Each run's own step audited: its trace's noise, its claim's per-step mu, its trained parameters; a planted
under-noising of 1.25x shows, a correct run does not; the GDP bound recomputes from its saved counts."""

import numpy as np
import pytest

from privaudit.attacks.step.step_distinguisher import gaussian_step_scores, gdp_bound, gdp_mu_recomputed
from privaudit.audit.step.audit import audit_trained_step, trained_multipliers
from privaudit.core.errors import ConfigError
from privaudit.defenses import Budget
from privaudit.defenses.registry import make_defense

FAST = {"epochs": 2, "batch_size": 64}


def trained_audit(digits, name, **params):
    params = {**FAST, **params}
    trained = make_defense(name, params).fit(digits, Budget(target_epsilon=8.0, delta=1e-5), 0, progress=False)
    return trained, audit_trained_step(name, params, trained, digits, target_epsilon=8.0, delta=1e-5, draws=20000)


def test_a_correct_run_is_not_refuted_and_runs_at_its_trained_parameters(digits):
    trained, audit = trained_audit(digits, "dp-gcl")
    z = trained_multipliers(trained.claim, trained.extras["trace"])
    assert z["z_actual"] == pytest.approx(z["z_claimed"])
    assert audit.verdict == "not refuted" and [p["pair"] for p in audit.pairs] == ["canary", "extreme"]
    assert audit.settings["model"] == "the trained parameters" and 0.85 < audit.power <= 1.0


@pytest.mark.parametrize("name, factor", [("control-undernoised", 1.25),
                                          pytest.param("control-logit-dp", 2.0, marks=pytest.mark.slow)])
def test_a_planted_noise_shortfall_is_refuted(digits, name, factor):
    trained, audit = trained_audit(digits, name, control_factor=factor, epochs=1)
    canary = next(p for p in audit.pairs if p["pair"] == "canary")
    assert audit.verdict == "refuted" and canary["verdict"] == "refuted"
    assert canary["mu_lower"] > audit.claim["mu"] * (1 + (factor - 1) / 2)


def test_one_under_noised_step_is_the_one_audited(digits):
    trained, audit = trained_audit(digits, "control-undernoised", control_factor=2.0, plant="step")
    assert audit.verdict == "refuted"  # the smallest noise of any step is the step audited


def test_the_run_must_have_a_trace():
    class Claim:
        params = {}

    with pytest.raises(ConfigError, match="no noise multipliers"):
        trained_multipliers(Claim(), {"noise_std": [1.0], "sensitivity": [1.0]})


def test_gdp_bound_recomputes_from_its_counts():
    import torch

    s0, s1 = gaussian_step_scores([torch.tensor([1.0])], [1.0], 20000, torch.Generator().manual_seed(0))
    g = gdp_bound(s0, s1, alpha=0.05)
    assert gdp_mu_recomputed(g, 0.05) == pytest.approx(g["mu_lower"])
    assert gdp_mu_recomputed(g, 0.0005) < g["mu_lower"] < 1.0
    assert np.all([p["fp"] >= 0 and p["fn"] >= 0 for p in g["tradeoff"]])
