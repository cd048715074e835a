"""The training trace checked against the claim's DpEvent: a correct run passes, each planted bug fails naming
its step and field, and the measured checks do not cry wolf on correct runs."""

import math

import numpy as np
import pytest

from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import (GaussianDpEvent, LaplaceDpEvent, PoissonSampledDpEvent,
                                          SampledWithoutReplacementDpEvent, SelfComposedDpEvent)
from privaudit.accountants.trace import TRACE_ALPHA, TrainingTrace, check_trace, claimed_steps
from privaudit.core.errors import ConfigError
from privaudit.defenses import Budget
from privaudit.defenses.controls import PLANTED_STEP
from privaudit.defenses.registry import make_defense

FAST = {"epochs": 2, "batch_size": 64}
N, Q, Z, SENS, DIM = 372, 64 / 372, 1.2, 1.0, 5000


def claim(steps: int, q: float = Q, z: float = Z) -> PrivacyClaim:
    return PrivacyClaim(SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), steps), "add-remove",
                        "example", 1e-5)


def synthetic_trace(rng, steps: int, *, q: float = Q, z: float = Z, noise_scale: float = 1.0) -> TrainingTrace:
    """What a correct Poisson DP-SGD run records (realised sizes and noise norms drawn as the claim says)."""
    std = z * SENS
    norms = std * noise_scale * np.sqrt(rng.chisquare(DIM, steps))
    return TrainingTrace("example", "poisson", N, q, round(q * N), DIM, 1.0,
                         {"batch_size": list(rng.binomial(N, q, steps)), "noise_std": [std] * steps,
                          "sensitivity": [SENS] * steps, "multiplier": [z] * steps, "units": [0] * steps,
                          "noise_norm": list(norms)})


def fit(digits, name, **params):
    trained = make_defense(name, {**FAST, **params}).fit(digits, Budget(target_epsilon=4.0), 0, progress=False)
    return trained, TrainingTrace.from_dict(trained.extras["trace"])


def test_a_correct_run_matches_its_claim(digits):
    trained, trace = fit(digits, "dp-gcl")
    assert trace.steps == len(trained.history["step"]) > 5 and trace.sampler == "poisson" and trace.dim > 1000
    assert check_trace(trained.claim, trained.extras["trace"]) == []
    assert TrainingTrace.from_dict(trace.to_dict()) == trace


@pytest.mark.parametrize("plant, field", [("steps", "steps"), ("step", "noise_multiplier"),
                                          ("claim", "noise_multiplier")])
def test_planted_bugs_fail_naming_the_step(digits, plant, field):
    trained, trace = fit(digits, "control-undernoised", control_factor=2.0, plant=plant)
    found = check_trace(trained.claim, trace)
    assert found and {m.field for m in found} == {field}
    if plant == "steps":  # the claim composes ceil(T / 2) steps: the first one not accounted is named
        first = math.ceil(trace.steps / 2) + 1
        assert found[0].step == first and f"steps {first}-{trace.steps} are not accounted" in found[0].message
    elif plant == "step":  # one step with half the noise
        assert [m.step for m in found] == [PLANTED_STEP + 1]
        assert f"step {PLANTED_STEP + 1}: noise multiplier" in found[0].message
    else:
        assert [m.step for m in found] == list(range(1, trace.steps + 1))


def test_a_hidden_noise_shortfall_passes_the_trace(digits):
    """The ``noise`` plant records honest numbers: only an end-to-end measurement (the canaries) can see it."""
    trained, trace = fit(digits, "control-undernoised", control_factor=2.0, plant="noise")
    assert check_trace(trained.claim, trace) == []


def test_measured_checks_name_the_step():
    rng = np.random.default_rng(0)
    trace = synthetic_trace(rng, 20)
    cols = dict(trace.columns)
    cols["noise_norm"] = list(cols["noise_norm"])
    cols["noise_norm"][7] *= 0.9  # 10% less noise drawn on step 8 than recorded
    cols["batch_size"] = list(cols["batch_size"])
    cols["batch_size"][3] = 2 * round(Q * N)  # twice the expected batch on step 4
    bad = TrainingTrace(**{**trace.__dict__, "columns": cols})
    found = {(m.step, m.field) for m in check_trace(claim(20), bad)}
    assert found == {(8, "noise_norm"), (4, "batch_size")}


def test_a_larger_sampling_rate_spread_over_steps_is_caught_in_total():
    rng = np.random.default_rng(1)
    found = check_trace(claim(200), synthetic_trace(rng, 200, q=1.15 * Q))
    assert any(m.step is None and m.field == "batch_size" and "larger rate" in m.message for m in found)


def test_no_false_alarms_on_correct_runs():
    """Correct runs pass the measured checks (level 1e-6 each; 300 runs with no failure)."""
    rng = np.random.default_rng(2)
    assert not any(check_trace(claim(50), synthetic_trace(rng, 50)) for _ in range(300))
    assert TRACE_ALPHA <= 1e-6


def test_claimed_steps_and_unreadable_events():
    wor = SelfComposedDpEvent(SampledWithoutReplacementDpEvent(100, 10, GaussianDpEvent(0.5)), 3)
    steps = claimed_steps(wor)
    assert len(steps) == 3 and steps[0].sampler == "without-replacement" and steps[0].batch == 10
    odd = PrivacyClaim(SelfComposedDpEvent(LaplaceDpEvent(1.0), 2), "add-remove", "example", 0.0)
    found = check_trace(odd, synthetic_trace(np.random.default_rng(3), 2))
    assert [m.field for m in found] == ["event", "event"]
    with pytest.raises(ConfigError, match="missing field"):
        TrainingTrace.from_dict({"unit": "example"})
