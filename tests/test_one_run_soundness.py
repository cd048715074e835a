"""Soundness of the one-run bounds on mechanisms with known epsilon, with power against an over-claim.

Default run (tests/soundness.py's check: a binomial test at false-alarm 1e-6, and its power against the bound
times 1.2): each bound the gate recomputes -- Steinke et al.'s on add/remove inclusion coins (``one-run``), the
same p-value on replace-one paired slots (``one-run-paired``), the f-DP one-run bound (Mahloujifar et al. 2025,
(eps, delta) null, ``one-run-fdp``) and the user-level max of both at beta / 2 on paired canary users
(``one-run-best``) -- is evaluated through :func:`privaudit.audit.gate.recompute.family_bound` (what the gate computes)
on 200 runs of randomized response at eps = 2, exactly eps-DP with respect to each coin and the mechanism one-run
audits are tight on (mean power 0.91-0.96), so the x1.2 variant over-claims on 94-100% of runs and the check
rejects it with power above 0.9999, while the honest bound passes. The attacks' own bound functions are checked
to give the gate's numbers on the same scores. The ``slow`` version runs every bound on three mechanisms (randomized
response, Gaussian, Poisson-subsampled Gaussian) over 500 seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privaudit.attacks.bounds.fdp import best_one_run_bound, fdp_one_run_bound
from privaudit.attacks.bounds.lower_bound import check_relation_unit
from privaudit.attacks.bounds.gdp import gdp_epsilon
from privaudit.attacks.bounds.one_run import one_run_bound, paired_one_run_bound, pool_pairs
from privaudit.audit.gate.recompute import family_bound
from privaudit.core.errors import ConfigError
from soundness import (PLANTED, TARGET_POWER, assert_planted_rejected, assert_sound, guess_counts, per_counts,
                       rr_runs, runs_for_power)

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


@pytest.mark.slow
def test_one_run_bounds_are_sound_500_seeds():
    _check(soundness_table(seeds=500, m=1000))


# -- default run: the gate's bounds on randomized response, with power against a doubled over-claim rate and x1.2 --
#: Runs per bound: enough that the shared check rejects a bound over-claiming on 2 beta of them with probability
#: >= 0.9 (tests/soundness.py; 950 at beta = 0.05, each run a simulated count, so cheap).
RUNS = runs_for_power(BETA)
EPS_RR, M = 2.0, 2000  # M canaries (slots) per run, every one guessed by Steinke's bound
M_FDP, K_FDP = 4000, 1000  # the f-DP bound's canaries and one-sided guesses (the user-level bound's: M, M // 4)
DELTA_RR = 1e-5  # the bounds are stated at delta > 0 in every suite: the delta branch is the one exercised
#: randomized response's exact epsilon at DELTA_RR: delta(eps') = q - e^eps' (1 - q), q = e^eps / (1 + e^eps)
TRUE_RR = math.log((math.exp(EPS_RR) / (1 + math.exp(EPS_RR)) - DELTA_RR) * (1 + math.exp(EPS_RR)))


def gate_bound(method: str, relation: str = "add-remove", unit: str = "example"):
    """counts -> the bound the gate computes from them (:func:`family_bound` at the bound's own confidence)."""
    def bound(**counts: int) -> float:
        return family_bound({"method": method, "counts": counts, "confidence": 1 - BETA, "delta": DELTA_RR,
                             "relation": relation, "unit": unit}, 1)
    return bound


def _steinke(rng, method: str, relation: str) -> np.ndarray:
    coins, scores = rr_runs(rng, RUNS, M, EPS_RR)
    v = guess_counts(scores, coins, M // 2, M // 2)  # every canary guessed (k+ = k- = m / 2, fixed in advance)
    rows = np.stack([np.full(RUNS, M), np.full(RUNS, M), v], 1)
    return per_counts(lambda m, r, vv: gate_bound(method, relation)(m=m, r=r, v=vv), rows)


def _fdp(rng) -> np.ndarray:
    coins, scores = rr_runs(rng, RUNS, M_FDP, EPS_RR)
    rows = np.stack([np.full(RUNS, M_FDP), np.full(RUNS, K_FDP), guess_counts(scores, coins, K_FDP, 0)], 1)
    return per_counts(lambda m, r, v: gate_bound("one-run-fdp")(m=m, r=r, v=v), rows)


def _user(rng) -> np.ndarray:
    """Paired canary users (replace-one, per user): Steinke on every slot and f-DP on the M // 4 highest, each at
    beta / 2, the larger reported (the user-level bound of user-canary and user-data-canary)."""
    coins, scores = rr_runs(rng, RUNS, M, EPS_RR)
    rows = np.stack([np.full(RUNS, M), np.full(RUNS, M), guess_counts(scores, coins, M // 2, M // 2),
                     np.full(RUNS, M // 4), guess_counts(scores, coins, M // 4, 0)], 1)
    bound = gate_bound("one-run-best", "replace-one", "user")
    return per_counts(lambda m, r, v, r_fdp, v_fdp: bound(m=m, r=r, v=v, r_fdp=r_fdp, v_fdp=v_fdp), rows)


@pytest.fixture(scope="module")
def powered() -> dict[str, np.ndarray]:
    """Each bound's values over RUNS runs of randomized response at EPS_RR (independent runs per bound)."""
    rng = np.random.default_rng([31, 1])
    return {"steinke": _steinke(rng, "one-run", "add-remove"), "paired": _steinke(rng, "one-run-paired", "replace-one"),
            "fdp": _fdp(rng), "user": _user(rng)}


@pytest.mark.parametrize("bound", ["steinke", "paired", "fdp", "user"])
def test_gate_bound_is_sound_on_randomized_response(powered, bound):
    """Sound, by a check that catches a bound over-claiming on twice beta of the runs with probability >= 0.9."""
    assert_sound(f"{bound} on randomized response eps={EPS_RR:g}", powered[bound], TRUE_RR, BETA,
                 min_power=TARGET_POWER)


@pytest.mark.parametrize("bound", ["steinke", "paired", "fdp", "user"])
def test_planted_x1_2_bound_is_rejected_by_the_same_check(powered, bound):
    assert_planted_rejected(f"{bound} x{PLANTED} on randomized response eps={EPS_RR:g}", powered[bound], TRUE_RR,
                            BETA)


def test_attack_bounds_give_the_gate_numbers_on_the_same_scores():
    """The bound functions the attacks call (scores in, bound out) count as the vectorised guesses above and give
    exactly what the gate recomputes from their counts, so the powered check covers them too."""
    coins, scores = rr_runs(np.random.default_rng([31, 2]), 1, M, EPS_RR)
    s, c = scores[0], coins[0]
    st = one_run_bound(s, c, k_pos=M // 2, k_neg=M // 2, beta=BETA, delta=DELTA_RR)
    pa = paired_one_run_bound(s, c, k_pos=M // 2, k_neg=M // 2, beta=BETA, delta=DELTA_RR)
    fd = fdp_one_run_bound(s, c, k_pos=M // 4, beta=BETA, delta=DELTA_RR)
    us = best_one_run_bound(s, c, k_pos=M // 2, k_neg=M // 2, k_fdp=M // 4, beta=BETA, delta=DELTA_RR,
                            relation="replace-one", unit="user")
    assert st.counts["v"] == pa.counts["v"] == us.counts["v"] == guess_counts(scores, coins, M // 2, M // 2)[0]
    assert fd.counts["v"] == us.counts["v_fdp"] == guess_counts(scores, coins, M // 4, 0)[0]
    for b in (st, pa, fd, us):
        assert b.epsilon == family_bound(b.to_dict(), 1) and b.epsilon > 0.8 * EPS_RR, b.method


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
    from privaudit.attacks.bounds.fdp import fdp_one_run_parameter
    from privaudit.attacks.bounds.one_run import one_run_epsilon

    q = 0.05 ** (1 / 100)
    closed = math.log(q / (1 - q))
    assert fdp_one_run_parameter(1000, 100, 100, beta=0.05) == pytest.approx(closed, abs=1e-3)
    assert one_run_epsilon(1000, 100, 100, beta=0.05) == pytest.approx(closed, abs=1e-6)
    # The Gaussian null's mu_lb is smaller than the (eps, delta) bound's epsilon but its GDP epsilon larger.
    mu = fdp_one_run_parameter(1000, 100, 100, beta=0.05, delta=1e-5, null="gdp")
    assert 0 < mu < closed and gdp_epsilon(mu, 1e-5) > closed
