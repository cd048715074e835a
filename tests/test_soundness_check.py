"""The shared soundness check itself (tests/soundness.py): its false-alarm level, and its power against a bound
whose over-claim rate is twice the nominal, in closed form and by a cheap simulation of the check's decision on
synthetic bound values over many seeds (no training)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from soundness import (FALSE_ALARM, TARGET_POWER, critical, power_against_doubled_rate, rejects, runs_for_power)

BETA = 0.05


@pytest.mark.parametrize("n, beta", [(200, 0.05), (950, 0.05), (500, 0.0125), (20, 0.05)])
def test_critical_is_the_smallest_count_at_the_false_alarm_level(n, beta):
    c = critical(n, beta)
    assert stats.binom.sf(c - 1, n, beta) < FALSE_ALARM <= stats.binom.sf(c - 2, n, beta)


def test_power_against_a_doubled_over_claim_rate():
    """200 runs (what most soundness tests ran) catch a bound over-claiming on 2 beta of them 4% of the time; 950
    runs, the fewest multiple of 50 that does, reach 0.9."""
    assert power_against_doubled_rate(200, BETA) < 0.05
    n = runs_for_power(BETA)
    assert n == 950 and power_against_doubled_rate(n, BETA) >= TARGET_POWER > power_against_doubled_rate(n - 50, BETA)


def simulated_rejections(rng: np.random.Generator, rate: float, n: int, reps: int) -> float:
    """The fraction of ``reps`` checks on ``n`` runs that reject a bound over-claiming on each run with probability
    ``rate`` (values above the truth 1 there, below it elsewhere)."""
    over = rng.random((reps, n)) < rate
    values = np.where(over, 1.0 + rng.random((reps, n)), rng.random((reps, n)))
    return float(np.mean([rejects(v, 1.0, BETA) for v in values]))


def test_simulated_decisions_have_the_stated_power_and_level():
    rng, n, reps = np.random.default_rng(45), runs_for_power(BETA), 2000
    doubled = simulated_rejections(rng, 2 * BETA, n, reps)
    assert doubled == pytest.approx(power_against_doubled_rate(n, BETA), abs=4 * math.sqrt(0.09 / reps))
    assert doubled >= 0.88
    assert simulated_rejections(rng, BETA, n, reps) == 0.0  # a sound bound: false alarm below 1e-6
    assert simulated_rejections(rng, 2 * BETA, 200, reps) < 0.08  # the old 200 runs: nearly blind to it
