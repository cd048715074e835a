"""The released-noise check (:mod:`privaudit.attacks.noise.released_noise`): exact level on the idealised mechanism over
many seeds (with an unsound variant the same test rejects), its power at the quickstart's sizes, the canaries' residual
counting (paired and add/remove), and the gate's use of it (a claim fails, a control is caught, old evidence is
not judged)."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from privaudit.accountants.events import PoissonSampledDpEvent, GaussianDpEvent, SelfComposedDpEvent, event_to_dict
from privaudit.attacks.canaries.gradient_canary import GradientCanaries
from privaudit.attacks.noise.released_noise import NOISE_ALPHA, describe_check, released_noise_check
from privaudit.audit.gate.judge import gate_cells
from privaudit.audit.report.records import CellRecord
from privaudit.audit.suite.model import GateConfig
from privaudit.core.errors import ConfigError

from cell_records import make_attack_record, make_cell_record

Z = 5.095  # DPCL's gradient multiplier at epsilon 1 in the quickstart
N = 120_000  # 20,000 canaries over 6 steps


def idealised(rng, seeds: int, n: int, z: float) -> np.ndarray:
    """``seeds`` runs' sums of squared residuals at std z (chi-square scaled: the sum is sufficient)."""
    return z * z * rng.chisquare(n, size=seeds)


def rejected(ss: np.ndarray, n: int, z: float, alpha: float) -> np.ndarray:
    return np.array([released_noise_check({"noise_n": n, "noise_ss": float(s)}, z, alpha=alpha)["rejected"]
                     for s in ss])


def naive_rejected(ss: np.ndarray, n: int, z: float) -> np.ndarray:
    """An unsound variant: reject when the measured std is below the claimed one, with no quantile."""
    return np.sqrt(ss / n) < z


def rate_ok(fails: int, seeds: int, alpha: float) -> bool:
    """The shared check of every soundness test (tests/soundness.py): are ``fails`` false rejections in ``seeds``
    runs consistent with a rate of at most alpha (one-sided binomial test at false alarm 1e-6)? At the 2,000 runs
    the tests here use, it rejects a check failing on 2 alpha of them with probability above 0.999."""
    from soundness import critical

    return fails < critical(seeds, alpha)


def test_level_over_2000_seeds_and_a_naive_variant_fails():
    """At alpha = 0.05 the correct release fails about 5% of 2,000 runs (exact: chi-square), and more noise fails
    fewer; the naive variant (std below the claim's) fails about half of them, which the same test rejects."""
    rng = np.random.default_rng(3)
    ss = idealised(rng, 2000, 5000, Z)
    fails = int(rejected(ss, 5000, Z, 0.05).sum())
    assert rate_ok(fails, 2000, 0.05) and fails > 50  # not vacuous: about 100 expected
    assert int(rejected(idealised(rng, 2000, 5000, 1.02 * Z), 5000, Z, 0.05).sum()) < fails
    assert not rate_ok(int(naive_rejected(ss, 5000, Z).sum()), 2000, 0.05)


@pytest.mark.parametrize("factor", [1.02, 1.1, 1.25])
def test_power_at_the_quickstart_size(factor):
    """A release adding 1/f of the claimed noise on DPCL's 120,000 residuals fails at the gate's level in every
    one of 200 runs (f >= 1.02); the correct release in none."""
    rng = np.random.default_rng(11)
    assert rejected(idealised(rng, 200, N, Z / factor), N, Z, NOISE_ALPHA).all()
    assert not rejected(idealised(rng, 200, N, Z), N, Z, NOISE_ALPHA).any()


def test_check_fields_and_errors():
    check = released_noise_check({"noise_n": 100, "noise_ss": 100 * 4.0}, 2.0, alpha=0.05)
    assert check["std_ratio"] == pytest.approx(1.0)
    assert check["std_ratio_upper"] == pytest.approx(math.sqrt(100 / stats.chi2.ppf(0.05, 100)))
    assert check["p"] == pytest.approx(stats.chi2.cdf(100, 100)) and not check["rejected"]
    assert "100 canary coordinates" in describe_check(check)
    assert released_noise_check({"n0": 3}, 2.0) is None
    with pytest.raises(ConfigError, match="claimed_multiplier"):
        released_noise_check({"noise_n": 1, "noise_ss": 1.0}, 0.0)
    with pytest.raises(ConfigError, match="alpha"):
        released_noise_check({"noise_n": 1, "noise_ss": 1.0}, 1.0, alpha=1.0)


@pytest.mark.parametrize("paired", [False, True])
def test_canaries_count_every_coordinate_less_its_designed_contribution(paired):
    """Through :meth:`GradientCanaries.observe`: every canary coordinate at every step is one residual, and the
    residuals' mean square is z^2 (z = sigma / D) whatever the coins and the sampling."""
    m, dim, c, sigma, steps = 4000, 5000, 0.5, 1.3, 5
    can = GradientCanaries(dim, m, clip_norm=c, seed=1, paired=paired)
    can.track_trajectory(0.5)
    gen, rng = torch.Generator().manual_seed(0), np.random.default_rng(0)
    coords, signs = torch.as_tensor(can.directions), torch.as_tensor(can.inserted).double() * 2 - 1
    for t in range(steps):
        sampled = rng.random(m) < 0.3
        total = torch.zeros(dim, dtype=torch.float64)
        s = torch.as_tensor(sampled)
        if paired:
            total[coords[s]] = c * signs[s]
        else:
            keep = s & torch.as_tensor(can.inserted)
            total[coords[keep]] = c
        can.observe(t, total + sigma * torch.randn(dim, generator=gen, dtype=torch.float64), sampled)
    counts = can.trajectory.to_dict()
    d = 2 * c if paired else c
    assert counts["noise_n"] == m * steps
    assert counts["noise_ss"] / counts["noise_n"] == pytest.approx((sigma / d) ** 2, rel=0.03)
    assert not released_noise_check(counts, sigma / d)["rejected"]
    assert released_noise_check(counts, 1.1 * sigma / d)["rejected"]


def canary_cell(counts: dict, z: float = 2.0, defense: str = "dp-gcl") -> CellRecord:
    """A DP cell (claim: Poisson-sampled Gaussian at multiplier z, 10 steps) whose gradient canaries' trajectory
    bound is consistent with its claim, its saved counts extended by ``counts`` (residual counts)."""
    ev = SelfComposedDpEvent(PoissonSampledDpEvent(0.1, GaussianDpEvent(z)), 10)
    counts = {"threshold": 0.5, "n0": 5000, "fp": 2500, "n1": 5000, "fn": 2500, "event": event_to_dict(ev), **counts}
    bound = {"method": "white-box-trajectory", "confidence": 0.95, "delta": 1e-5, "relation": "add-remove",
             "unit": "example", "counts": counts}
    claim = {"event": event_to_dict(ev), "params": {}, "relation": "add-remove", "unit": "example", "delta": 1e-5}
    return make_cell_record(f"digits/{defense}/eps=1/seed=0", defense=defense, epsilon={"pld": 1.0}, full_claim=claim,
                            attacks={"canary": make_attack_record(0.0, bound=bound, trajectory_bound=bound,
                                                                  eps_lb_trajectory=0.0)})


def cell(noise_ss: float | None, z: float = 2.0, n: int = 10_000) -> CellRecord:
    """:func:`canary_cell` with residuals of mean square ``noise_ss / n`` (None: evidence without residuals)."""
    return canary_cell({} if noise_ss is None else {"noise_n": n, "noise_ss": noise_ss}, z)


def test_gate_fails_a_claim_whose_release_adds_too_little_and_passes_a_correct_one():
    z, n = 2.0, 10_000
    good = gate_cells([cell(z * z * n, z, n)], GateConfig())[0]
    assert good.status == "pass" and good.released_noise[0]["std_ratio"] == pytest.approx(1.0)
    bad = gate_cells([cell((z / 1.1) ** 2 * n, z, n)], GateConfig())[0]
    assert bad.status == "fail"
    assert any("digits/dp-gcl/eps=1/seed=0: canary:" in r and "adds less noise than its claim states" in r
               for r in bad.reasons)


def test_gate_catches_a_control_by_its_released_noise_and_does_not_judge_old_evidence():
    z, n = 2.0, 10_000
    control = gate_cells([cell((z / 1.1) ** 2 * n, z, n)], GateConfig(), {"dp-gcl": ("canary", True)})[0]
    assert control.caught and control.caught_by == ("released noise",) and control.status == "pass"
    old = gate_cells([cell(None)], GateConfig())[0]
    assert old.status == "pass" and old.released_noise[0]["unjudged"] == "no released-noise residuals recorded"
    missed = gate_cells([cell(None)], GateConfig(), {"dp-gcl": ("canary", True)})[0]
    assert missed.status == "fail" and "release's measured noise does not refute it" in missed.reasons[0]
