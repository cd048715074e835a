"""The training trace checked against the claim's DpEvent: a correct run passes, each planted bug fails naming
its step and field, and the measured checks do not cry wolf on correct runs."""

import math

import numpy as np
import pytest

from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import (GaussianDpEvent, LaplaceDpEvent, PoissonSampledDpEvent,
                                          SampledWithoutReplacementDpEvent, SelfComposedDpEvent)
from privaudit.accountants.trace.trace import TRACE_ALPHA, TrainingTrace, check_trace, claimed_steps
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


@pytest.mark.parametrize("dtype, ratio, verdict", [("float32", 1 - 2e-7, "rounding"), ("float32", 1 - 1e-4, "short"),
                                                   ("float64", 1 - 2e-7, "short"), ("float64", 1 - 4e-16, "rounding")])
def test_the_multiplier_is_compared_at_the_precision_its_std_was_computed_in(dtype, ratio, verdict):
    """Four float32 (or float64) units in the last place: a multiplier short of the claim by less is rounding, stated
    with the epsilon it costs (the claim's accountant at the rounded multiplier) and not a mismatch; by more, a
    mismatch that gives the relative difference, the tolerance and both values to the digits that differ."""
    from privaudit.accountants.trace.rounding import relative_tolerance
    from privaudit.accountants.trace.trace import trace_rounding

    rng = np.random.default_rng(4)
    base = synthetic_trace(rng, 10)
    cols = {**base.columns, "noise_std": [Z * SENS * ratio] * 10, "multiplier": [Z * ratio] * 10}
    trace = TrainingTrace(**{**base.__dict__, "columns": cols, "precision": {"noise": dtype}})
    found, notes = check_trace(claim(10), trace), trace_rounding(claim(10), trace)
    tol = relative_tolerance(dtype)
    assert tol == 8 * (2.0 ** -24 if dtype == "float32" else 2.0 ** -53)
    if verdict == "rounding":
        assert found == [] and [n.field for n in notes] == ["noise_multiplier"]
        assert f"within {dtype} rounding (tolerance {tol:.2g})" in notes[0].message
        assert "rounding, not a refutation (10 value(s) in all); at the rounded values the claim's epsilon by rdp is" \
            in notes[0].message
    else:
        assert notes == [] and [m.step for m in found] == list(range(1, 11))
        assert f"beyond {dtype} rounding (tolerance {tol:.2g})" in found[0].message
        shown = found[0].message.split("noise multiplier ")[1].split(" ")[0]
        assert float(shown) != Z and float(shown) == pytest.approx(Z * ratio, rel=1e-9 if ratio > 1 - 1e-6 else 1e-5)


def test_a_trace_without_a_precision_is_read_at_float64_and_its_unit_norms_at_float32():
    """Evidence saved before the trace recorded its precision: the noise at float64 (the engines' Python floats),
    the unit norms at float32 (their factor times norm); a sample rate 1e-12 above the claim's is then beyond
    float64's rounding."""
    rng = np.random.default_rng(5)
    trace = synthetic_trace(rng, 4)
    assert trace.precision is None and trace.computed_in("noise") == "float64"
    assert trace.computed_in("unit_norm") == "float32" and trace.computed_in("unit_norm_terms") == 0
    high = TrainingTrace(**{**trace.__dict__, "sample_rate": Q * (1 + 1e-12)})
    assert {m.field for m in check_trace(claim(4), high)} == {"sample_rate"}
    assert TrainingTrace.from_dict(TrainingTrace(**{**trace.__dict__, "precision": {"noise": "float32"}}).to_dict()
                                   ).computed_in("noise") == "float32"


def test_a_cells_claim_checks_keep_a_within_rounding_multiplier_beside_no_mismatch():
    """A suite cell whose multiplier is short of the claim by float32 rounding alone: no trace mismatch (the gate
    passes it), the rounding kept in its claim checks with the epsilon it costs."""
    from types import SimpleNamespace

    from privaudit.audit.run.claim_checks import run_claim_checks

    base = synthetic_trace(np.random.default_rng(6), 10)
    cols = {**base.columns, "multiplier": [Z * (1 - 1e-7)] * 10}
    trace = TrainingTrace(**{**base.__dict__, "columns": cols, "precision": {"noise": "float32"}})
    trained = SimpleNamespace(claim=claim(10), extras={"trace": trace.to_dict()})
    record, evidence = run_claim_checks("dp-gcl", {}, trained, None, target_epsilon=None, delta=1e-5, seed=0)
    assert record["trace"]["mismatches"] == [] and evidence["trace"]["precision"] == {"noise": "float32"}
    [kept] = record["trace"]["rounding"]
    assert kept["field"] == "noise_multiplier" and "its Gaussian releases composed" in kept["message"]
    assert "within float32 rounding" in kept["message"] and "claim's epsilon by rdp is" in kept["message"]
