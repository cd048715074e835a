"""The noise's joint law within a step (:mod:`privaudit.accountants.trace.noise_law`, recorded by
:mod:`privaudit.defenses.dp.release.noise_law`): sound on the engine's own float32 Gaussian draws (RUNS steps simulated
at once, every test's rejections at LEVEL against the shared binomial check of tests/soundness.py), an unsound variant
of each test rejected by that same check, and each planted dependence caught at the gate's level. The check's
soundness at the gate's level rests on the bounds' exactness; the simulation shows them conservative where it can
see (at LEVEL) and that the check would see a bound that is not."""

import math

import numpy as np
import pytest
import torch

from privaudit.accountants.trace.noise_law import (TESTS, cosine_tail, log_binom, noise_law_findings, step_p_values,
                                             tail_exponent, value_mass_bound)
from privaudit.accountants.trace.trace import TRACE_ALPHA, TrainingTrace
from privaudit.defenses.dp.release import noise_law as recorder
from privaudit.defenses.dp.release.noise import gaussian
from soundness import critical

#: A layout with tensors of repeated sizes (four of 32, three of 8, two of 1024).
LAYOUT = [(8, 4, 3, 3), (8,), (8,), (8,), (32, 32), (32,), (32,), (32,), (32, 32), (32,), (40, 32), (40,)]
DIM = sum(math.prod(s) for s in LAYOUT)
RUNS, LEVEL, STEPS = 1000, 0.05, 10
#: The gate's level for one test of one step of a STEPS-step run (the trace's noise-law share).
GATE = TRACE_ALPHA / 4 / len(TESTS) / STEPS


@pytest.fixture(scope="module")
def honest():
    """RUNS steps of the engine's noise (:func:`gaussian`: float32 N(0, 1) times a std, the std log-uniform on
    [0.1, 10] per step), recorded by the recorder's batched path."""
    gen = torch.Generator().manual_seed(0)
    stds = torch.exp(torch.empty(RUNS, 1, dtype=torch.float64).uniform_(-2.3, 2.3, generator=gen)).float()
    noise = gaussian((RUNS, DIM), 1.0, gen) * stds
    return noise, recorder.laws(noise, LAYOUT)


def rejections(values) -> int:
    return int(np.sum(np.asarray(values) < LEVEL))


def test_every_test_is_sound_on_the_engines_draws(honest):
    _, records = honest
    p = {t: [step_p_values(r)[t] for r in records] for t in TESTS}
    assert all(rejections(v) < critical(RUNS, LEVEL) for v in p.values()), {t: rejections(v) for t, v in p.items()}


def test_a_repeat_bound_without_the_union_over_lags_or_sets_is_rejected(honest):
    """C(n - L, k) q^k at the observed lag alone, and q^(g - 1) for the largest repeat without the C(n, g) sets: any
    one chance collision (the engine's float32 draws collide at about 3e-8 a pair) rejects."""
    _, records = honest
    q = value_mass_bound(24)
    at_lag = [math.exp(log_binom(DIM - r["repeat"]["lag"], r["repeat"]["count"]) + r["repeat"]["count"] * math.log(q))
              if r["repeat"]["count"] else 1.0 for r in records]
    one_set = [q ** (r["repeat"]["largest"] - 1) for r in records]
    assert rejections(at_lag) >= critical(RUNS, LEVEL) and rejections(one_set) >= critical(RUNS, LEVEL)


def test_the_correlation_bounds_without_bonferroni_are_rejected(honest):
    _, records = honest
    lag = [2 * math.exp(-tail_exponent(abs(r["lag"]["corr"]), r["lag"]["n"], (r["lag"]["n"] - r["lag"]["lag"]) / 2,
                                       1.0)) for r in records]
    pair = [float(cosine_tail(abs(r["pair"]["corr"]), r["pair"]["n"])) for r in records]
    assert rejections(lag) >= critical(RUNS, LEVEL) and rejections(pair) >= critical(RUNS, LEVEL)


def test_the_lag_tail_bound_holds_and_is_near_the_gaussian_tail():
    """rho_1 of 2000 vectors of 2048 coordinates: at the c where the bound says 1%, at most 1% exceed it (binomial
    check), and the bound's exponent is within 20% of the Gaussian's, c^2 n / 2 (the sub-gamma scale term costs the
    rest, less the smaller c)."""
    n = 2048
    x = torch.randn(2000, n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    rho = (x[:, 1:] * x[:, :-1]).sum(1) / (x * x).sum(1)
    c = next(c for c in np.linspace(0.01, 0.2, 1901) if math.exp(-tail_exponent(c, n, (n - 1) / 2, 1.0)) <= 0.01)
    assert int((rho >= c).sum()) < critical(2000, 0.01)
    assert tail_exponent(c, n, (n - 1) / 2, 1.0) > 0.8 * c * c * n / 2


def planted(kind: str, gen: torch.Generator) -> torch.Tensor:
    """One step's noise in LAYOUT with one dependence planted (every coordinate still N(0, 1))."""
    x = torch.randn(DIM, generator=gen)
    off = np.cumsum([0] + [math.prod(s) for s in LAYOUT])
    big, other = slice(off[4], off[5]), slice(off[8], off[9])  # the two (32, 32) tensors
    if kind == "halves":
        x[off[4] + 512:off[5]] = x[off[4]:off[4] + 512]
    elif kind == "sign-flipped halves":
        x[off[4] + 512:off[5]] = -x[off[4]:off[4] + 512]
    elif kind == "row broadcast":
        x[big] = torch.randn(1, 32, generator=gen).expand(32, 32).reshape(-1)
    elif kind == "tiled":
        x[other] = torch.randn(16, generator=gen).repeat(64)
    elif kind == "same seed":
        x[other] = x[big]
    elif kind == "sign-flipped tensor":
        x[off[5]:off[6]] = -x[off[6]:off[7]]
    elif kind == "mixed copy":
        x[other] = (x[big] + torch.randn(1024, generator=gen)) / math.sqrt(2)
    elif kind == "smoothed":
        z = torch.randn(1025, generator=gen)
        x[big] = (z[1:] + z[:-1]) / math.sqrt(2)
    return x


@pytest.mark.parametrize("kind, tests", [("halves", {"repeat", "lag"}), ("sign-flipped halves", {"repeat", "lag"}),
                                         ("row broadcast", {"repeat", "largest", "lag"}),
                                         ("tiled", {"repeat", "largest", "lag"}), ("same seed", {"repeat", "pair"}),
                                         ("sign-flipped tensor", {"repeat", "pair"}), ("mixed copy", {"pair"}),
                                         ("smoothed", {"lag"})])
def test_each_planted_dependence_is_caught_at_the_gates_level(kind, tests):
    record = recorder.noise_law(planted(kind, torch.Generator().manual_seed(2)), LAYOUT)
    p = step_p_values(record)
    assert {t for t, v in p.items() if v < GATE} == tests, p


def test_measured_noise_keeps_its_correlation_tests_less_the_rounding_and_drops_the_repeats():
    """A declared release's noise is measured as a difference: a copy is still caught by the cosine, a correct draw
    passes, and a rounding as large as the noise makes the tests blind rather than wrong."""
    gen = torch.Generator().manual_seed(3)
    rounding = [1e-6] * len(LAYOUT)
    caught = step_p_values(recorder.noise_law(planted("same seed", gen).double(), LAYOUT, rounding))
    assert set(caught) == {"lag", "pair"} and caught["pair"] < GATE
    passed = step_p_values(recorder.noise_law(planted("none", gen).double(), LAYOUT, rounding))
    assert min(passed.values()) > LEVEL
    blind = recorder.noise_law(planted("same seed", gen).double(), LAYOUT, [1e3] * len(LAYOUT))
    assert min(step_p_values(blind).values()) == 1.0 and blind["pair"]["slack"] > 1


def test_a_large_step_reads_a_window_that_moves_with_the_noise(monkeypatch):
    monkeypatch.setattr(recorder, "MAX_READ", 1500)
    gen = torch.Generator().manual_seed(4)
    windows = {tuple(recorder.noise_law(planted("none", gen), LAYOUT)["window"]) for _ in range(20)}
    assert len(windows) > 3 and all(sum(math.prod(LAYOUT[(a + k) % len(LAYOUT)]) for k in range(n)) <= 1500
                                    for a, n in windows)
    record = recorder.noise_law(planted("same seed", gen), LAYOUT)
    assert record["read"] <= 1500 and record["dim"] == DIM
    assert recorder.window([3000, 10], 0, 1500) == [(0, 1500)]  # a tensor larger than the window: its first part


def trace(records, stds=None) -> TrainingTrace:
    steps = len(records)
    columns = {"batch_size": [10] * steps, "noise_std": stds or [1.0] * steps, "sensitivity": [1.0] * steps,
               "multiplier": [1.0] * steps, "units": [10] * steps, "noise_norm": [None] * steps,
               "noise_law": records}
    return TrainingTrace("example", "poisson", 100, 0.1, 10, DIM, 1.0, columns)


def test_the_trace_names_the_first_failing_step_once_and_skips_noiseless_steps():
    gen = torch.Generator().manual_seed(5)
    bad = [recorder.noise_law(planted("sign-flipped halves", gen), LAYOUT) for _ in range(3)]
    found = noise_law_findings(trace(bad), TRACE_ALPHA / 4)
    assert [(m.field, m.step) for m in found] == [("noise_law", 1)]
    assert "repeat exactly at lag 512 on 512 of 3808 coordinates (the first in tensors 4 and 4)" in found[0].message
    assert found[0].message.endswith("(failed at 3 of 3 steps; also correlation at a lag)")
    lag_only = [dict(r, repeat=None) for r in bad]
    message = noise_law_findings(trace(lag_only), TRACE_ALPHA / 4)[0].message
    assert "tensor 4's noise correlates with itself at lag 512 (correlation -0.5" in message
    assert noise_law_findings(trace(bad, [0.0] * 3), TRACE_ALPHA / 4) == []
    good = [recorder.noise_law(planted("none", gen), LAYOUT) for _ in range(3)]
    assert noise_law_findings(trace(good), TRACE_ALPHA / 4) == []
    assert noise_law_findings(trace([None] * 3), TRACE_ALPHA / 4) == []  # a trace recorded before the check
    assert recorder.noise_law(torch.zeros(DIM), LAYOUT) is None


def test_a_step_holding_every_test_at_once_reads_the_bounds_exactly():
    record = {"read": 1000, "bits": 24, "repeat": {"count": 5, "lag": 3, "largest": 4, "tensors": [0, 0]},
              "lag": {"tensor": 0, "n": 1000, "lag": 1, "corr": 0.2, "tests": 999},
              "pair": {"tensors": [0, 1], "n": 500, "corr": -0.3, "tests": 2}}
    p = step_p_values(record)
    q = 2.0 ** -21
    assert p["repeat"] == pytest.approx(math.comb(1000, 6) * q ** 5, rel=1e-9)
    assert p["largest"] == pytest.approx(math.comb(1000, 4) * q ** 3, rel=1e-9)
    assert p["lag"] == pytest.approx(2 * 999 * math.exp(-tail_exponent(0.2, 1000, 999 / 2, 1.0)), rel=1e-9)
    from scipy import stats
    assert p["pair"] == pytest.approx(2 * stats.beta.sf(0.09, 0.5, 499 / 2), rel=1e-9)
