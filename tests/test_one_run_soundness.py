"""Soundness at scale of the one-run bounds on mechanisms with known epsilon (issue 15, item 5).

For each bound -- paired replace-one (Steinke argument, :func:`paired_one_run_bound`), f-DP one run
(Mahloujifar et al. 2025, (eps, delta) null), the reported max of both at beta / 2
(:func:`best_one_run_bound`, also as a user-level bound of canary users) -- and each mechanism whose
epsilon is known exactly (randomized response, the Gaussian mechanism, the Poisson-subsampled
Gaussian), the bound is computed on many independent seeds. A sound bound at confidence 1 - beta
exceeds the true epsilon in at most a beta fraction of seeds in expectation; the test fails when the
over-claim count is significant under Binomial(seeds, beta) (one-sided p < 1e-3). Mean power
(bound / true epsilon) is printed (run with ``-s``) and must be positive where the mechanism leaks.
The small version runs in CI; the 500-seed version is ``slow``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privaudit.attacks.bounds import (best_one_run_bound, check_relation_unit, fdp_one_run_bound, gdp_epsilon,
                            one_run_bound, paired_one_run_bound, pool_pairs)
from privaudit.core.errors import ConfigError

BETA = 0.05
DELTA = 1e-5


def _subsampled_gaussian_epsilon(q: float, sigma: float, delta: float) -> float:
    import dp_accounting

    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)))
    return float(acc.get_epsilon(delta))


# Each mechanism: (name, true epsilon, delta the bound and the truth are stated at, paired?, scores(rng, coins)).
def _mechanisms():
    eps_rr = 2.0
    p_rr = math.exp(eps_rr) / (1 + math.exp(eps_rr))
    mu = 2.0  # Gaussian: sign(coin) * mu / 2 + N(0, 1): replace-one distance mu, mu-GDP
    q, sigma = 0.5, 0.6
    return [
        ("randomized response (replace-one)", eps_rr, 0.0, True,
         lambda rng, c: np.where(rng.random(c.size) < p_rr, 1.0, -1.0) * np.where(c, 1.0, -1.0)),
        ("gaussian (replace-one)", gdp_epsilon(mu, DELTA), DELTA, True,
         lambda rng, c: np.where(c, mu / 2, -mu / 2) + rng.standard_normal(c.size)),
        ("subsampled gaussian (add-remove)", _subsampled_gaussian_epsilon(q, sigma, DELTA), DELTA, False,
         lambda rng, c: c * (rng.random(c.size) < q) + sigma * rng.standard_normal(c.size)),
    ]


def _bounds(scores: np.ndarray, coins: np.ndarray, delta: float, paired: bool) -> dict[str, float]:
    m = scores.size
    k = m // 20
    rel = "replace-one" if paired else "add-remove"
    out = {"fdp": fdp_one_run_bound(scores, coins, k_pos=k, beta=BETA, delta=delta, relation=rel).epsilon,
           "best (user)": best_one_run_bound(scores, coins, k_pos=k, k_neg=k, k_fdp=k, beta=BETA, delta=delta,
                                             relation=rel, unit="user").epsilon}
    if paired:
        out["paired"] = paired_one_run_bound(scores, coins, k_pos=k, k_neg=k, beta=BETA, delta=delta).epsilon
    else:
        out["steinke"] = one_run_bound(scores, coins, k_pos=k, k_neg=k, beta=BETA, delta=delta).epsilon
    return out


def soundness_table(seeds: int, m: int) -> list[tuple[str, str, float, int, float, float]]:
    """Rows (mechanism, bound, true eps, over-claims, binomial p-value, mean power) over ``seeds`` seeds."""
    rows = []
    for name, eps, delta, paired, mech in _mechanisms():
        found: dict[str, list[float]] = {}
        for seed in range(seeds):
            rng = np.random.default_rng([15, seed])
            coins = rng.random(m) < 0.5
            for bound, value in _bounds(mech(rng, coins), coins, delta, paired).items():
                found.setdefault(bound, []).append(value)
        for bound, values in found.items():
            v = np.asarray(values)
            over = int(np.sum(v > eps + 1e-9))
            p = float(stats.binom.sf(over - 1, seeds, BETA)) if over else 1.0
            rows.append((name, bound, eps, over, p, float(v.mean() / eps)))
    return rows


def _check(rows) -> None:
    print("\nmechanism | bound | true eps | over-claims | binomial p | mean power")
    for name, bound, eps, over, p, power in rows:
        print(f"{name} | {bound} | {eps:.3f} | {over} | {p:.3g} | {power:.3f}")
    for name, bound, eps, over, p, power in rows:
        assert p > 1e-3, f"{bound} on {name}: {over} over-claims is more than beta={BETA} allows"
        assert power > 0.05, f"{bound} on {name}: no power ({power:.3f})"


def test_one_run_bounds_are_sound_small():
    _check(soundness_table(seeds=12, m=300))


@pytest.mark.slow
def test_one_run_bounds_are_sound_500_seeds():
    _check(soundness_table(seeds=500, m=1000))


def test_pool_pairs_are_mixed_and_fixed_before_membership():
    membership = np.random.default_rng(0).random(1000) < 0.5
    pairs, first_in = pool_pairs(membership, seed=3)
    assert pairs.shape[1] == 2 and 200 < pairs.shape[0] < 300  # about a half of 500 pairs are mixed
    assert np.all(membership[pairs[:, 0]] != membership[pairs[:, 1]])
    assert np.array_equal(first_in, membership[pairs[:, 0]])
    other, _ = pool_pairs(~membership, seed=3)  # the pairing does not depend on membership
    assert np.array_equal(np.sort(other, axis=None), np.sort(pairs, axis=None))


def test_paired_bound_names_its_relation_and_unit():
    coins = np.arange(100) % 2 == 0
    b = paired_one_run_bound(np.where(coins, 1.0, -1.0), coins, k_pos=20, k_neg=20, unit="user")
    assert (b.relation, b.unit, b.method) == ("replace-one", "user", "one-run-paired")
    assert b.epsilon > 1.0  # 40/40 correct


def test_unsupported_relation_or_unit_is_an_error_naming_both():
    with pytest.raises(ConfigError, match="relation='swap', unit='example'"):
        check_relation_unit("swap", "example")
    with pytest.raises(ConfigError, match="relation='add-remove', unit='user'.*supports relation=replace-one"):
        check_relation_unit("add-remove", "user", [("replace-one", "user")], what="x")
    with pytest.raises(ConfigError, match="unit='household'"):
        one_run_bound(np.zeros(4), np.ones(4, bool), k_pos=1, unit="household")


def test_fdp_bound_matches_the_closed_form_when_every_guess_is_right():
    """r of r correct, delta = 0: both one-run bounds reject exactly eps < logit(beta^(1/r)) (closed form)."""
    from privaudit.attacks.bounds import fdp_one_run_parameter, one_run_epsilon

    q = 0.05 ** (1 / 100)
    closed = math.log(q / (1 - q))
    assert fdp_one_run_parameter(1000, 100, 100, beta=0.05) == pytest.approx(closed, abs=1e-3)
    assert one_run_epsilon(1000, 100, 100, beta=0.05) == pytest.approx(closed, abs=1e-6)
    # The Gaussian null's mu_lb is smaller than the (eps, delta) bound's epsilon but its GDP epsilon larger.
    mu = fdp_one_run_parameter(1000, 100, 100, beta=0.05, delta=1e-5, null="gdp")
    assert 0 < mu < closed and gdp_epsilon(mu, 1e-5) > closed
