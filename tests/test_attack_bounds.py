"""Empirical epsilon lower bounds: the acceptance values, their maths, and their corrections."""

import math

import numpy as np
import pytest
from scipy import stats

from privaudit.attacks.bounds.multi_run import clopper_pearson_upper, hypothesis_test_epsilon, multi_run_bound
from privaudit.attacks.bounds.gdp import gdp_delta, gdp_epsilon, gdp_mu_lower
from privaudit.attacks.bounds.one_run import (one_run_bound, one_run_bound_search, one_run_epsilon, one_run_guesses,
                                              one_run_p_value)
from privaudit.core.errors import ConfigError


@pytest.mark.parametrize("m,r,v,expected", [(1000, 100, 100, 3.493), (1000, 100, 90, 1.631)])
def test_one_run_acceptance_values(m, r, v, expected):
    assert round(one_run_epsilon(m, r, v, beta=0.05, delta=0.0), 3) == expected


def test_one_run_all_correct_has_closed_form():
    # P[Bin(r, q) >= r] = q^r = beta  =>  eps = logit(beta^(1/r)).
    q = 0.05 ** (1 / 100)
    assert one_run_epsilon(1000, 100, 100, beta=0.05) == pytest.approx(math.log(q / (1 - q)), abs=1e-8)


def test_one_run_p_value_matches_a_direct_sum():
    m, r, v, eps, delta = 500, 60, 50, 1.2, 1e-4
    q = 1 / (1 + math.exp(-eps))
    pmf = stats.binom.pmf(np.arange(r + 1), r, q)
    tail = pmf[v:].sum()
    alpha = max(pmf[v - i:v].sum() / i for i in range(1, v + 1))
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(tail + 2 * m * delta * alpha, rel=1e-9)


def test_one_run_delta_and_chance_lower_the_bound():
    assert one_run_epsilon(1000, 100, 90, delta=1e-5) < one_run_epsilon(1000, 100, 90, delta=0.0)
    assert one_run_epsilon(1000, 100, 50) == 0.0  # chance accuracy proves nothing
    assert one_run_epsilon(1000, 0, 0) == 0.0


def test_one_run_bound_uses_fixed_guesses():
    scores = np.arange(10.0)
    assert one_run_guesses(scores, 2, 3).tolist() == [-1, -1, -1, 0, 0, 0, 0, 0, 1, 1]
    membership = scores >= 5
    b = one_run_bound(scores, membership, k_pos=3, k_neg=3)
    assert (b.counts["r"], b.counts["v"], b.counts["m"]) == (6, 6, 10)
    assert b.epsilon == pytest.approx(one_run_epsilon(10, 6, 6))
    assert "fixed in advance" in b.label and b.method == "one-run"
    with pytest.raises(ConfigError, match="k_pos, k_neg"):
        one_run_bound(scores, membership, k_pos=8, k_neg=3)


def test_one_run_search_is_corrected_for_the_number_of_pairs():
    rng = np.random.default_rng(0)
    membership = rng.random(1000) < 0.5
    scores = membership * 1.5 + rng.normal(size=1000)
    grid = [(k, k) for k in (25, 50, 100, 200)]
    searched = one_run_bound_search(scores, membership, grid)
    kp, kn = searched.counts["k_pos"], searched.counts["k_neg"]
    uncorrected = one_run_bound(scores, membership, k_pos=kp, k_neg=kn)
    assert searched.epsilon < uncorrected.epsilon  # the union bound costs something
    corrected = one_run_bound(scores, membership, k_pos=kp, k_neg=kn, beta=0.05 / len(grid))
    assert searched.epsilon == pytest.approx(corrected.epsilon)
    assert searched.counts["grid_size"] == 4 and "Bonferroni" in searched.label


@pytest.mark.parametrize("tp,fp,expected", [(50, 1, 1.904), (900, 100, 1.990)])
def test_clopper_pearson_acceptance_values(tp, fp, expected):
    eps, _, _ = hypothesis_test_epsilon(fp, 1000, 1000 - tp, 1000, alpha=0.05, delta=1e-5)
    assert round(eps, 3) == expected


def test_clopper_pearson_upper_bound_is_the_beta_quantile():
    assert clopper_pearson_upper(0, 10, 0.05) == pytest.approx(1 - 0.05 ** (1 / 10))
    assert clopper_pearson_upper(10, 10, 0.05) == 1.0
    # Coverage: P[upper bound < true rate] <= alpha for k ~ Bin(n, p).
    n, p, alpha = 40, 0.1, 0.05
    misses = sum(stats.binom.pmf(k, n, p) for k in range(n + 1) if clopper_pearson_upper(k, n, alpha) < p)
    assert misses <= alpha


def test_gdp_conversion_matches_dp_accounting():
    from dp_accounting.pld import privacy_loss_distribution as pld

    for mu in (0.5, 1.0, 3.0):
        exact = pld.from_gaussian_mechanism(standard_deviation=1 / mu, sensitivity=1.0,
                                            value_discretization_interval=1e-4).get_epsilon_for_delta(1e-5)
        assert gdp_epsilon(mu, 1e-5) == pytest.approx(exact, rel=1e-6)
        assert gdp_delta(mu, gdp_epsilon(mu, 1e-5)) == pytest.approx(1e-5, rel=1e-6)
    assert gdp_mu_lower(stats.norm.sf(2.0), stats.norm.cdf(-1.0)) == pytest.approx(3.0)


def test_multi_run_threshold_strategies():
    rng = np.random.default_rng(1)
    ins, outs = rng.normal(3, 1, 400), rng.normal(0, 1, 400)
    split = multi_run_bound(ins, outs, alpha=0.05, delta=1e-5, threshold="split", seed=3)
    bonf = multi_run_bound(ins, outs, alpha=0.05, delta=1e-5, threshold="bonferroni")
    fixed = multi_run_bound(ins, outs, alpha=0.05, delta=1e-5, threshold=1.5)
    gdp = multi_run_bound(ins, outs, alpha=0.05, delta=1e-5, threshold=1.5, method="gdp")
    true_eps = gdp_epsilon(3.0, 1e-5)  # the scores are the Gaussian mechanism with mu = 3
    for b in (split, bonf, fixed):
        assert 1.0 < b.epsilon < true_eps and b.method == "clopper-pearson"
    assert split.counts["runs_in"] == 200 and "separate half" in split.label
    assert bonf.counts["tests"] > 100
    fn, fp = int((ins < 1.5).sum()), int((outs >= 1.5).sum())
    assert fixed.epsilon == pytest.approx(hypothesis_test_epsilon(fp, 400, fn, 400, alpha=0.05, delta=1e-5)[0])
    assert gdp.method == "gdp" and "Gaussian trade-off" in gdp.label and gdp.counts["mu_lower"] > 0
    with pytest.raises(ConfigError, match="threshold: unknown value 'best'"):
        multi_run_bound(ins, outs, threshold="best")


def test_threshold_search_is_the_bound_at_the_chosen_threshold_and_cuts_gaps_in_the_middle():
    from privaudit.attacks.bounds.multi_run import _best_threshold

    rng = np.random.default_rng(2)
    ins, outs = rng.normal(1.5, 1, 300), rng.normal(0, 1, 300)
    t, eps = _best_threshold(ins, outs, 0.05, 1e-5)
    fn, fp = int((ins < t).sum()), int((outs >= t).sum())
    assert eps == pytest.approx(hypothesis_test_epsilon(fp, 300, fn, 300, alpha=0.05, delta=1e-5)[0])
    t, _ = _best_threshold(np.array([5.0, 6.0]), np.array([0.0, 1.0]), 0.05, 0.0)
    assert 1.0 < t < 5.0 and t == pytest.approx(3.0)  # the middle of the clean gap
