"""A design assumption the data contradicts refuses before any bound: the one-run design's fair coin is tested on the
members' and non-members' counts (a two-sided binomial test at a tenth of beta, the bound at the rest), so
identical score distributions with unequal counts are never refuted, while fair-coin designs keep their level
(tests/soundness.py's check over 200 seeds of randomized response at epsilon 1 and 8)."""

from __future__ import annotations

import numpy as np
import pytest

from privaudit.attacks.bounds.fair_coin import COIN_TEST_SHARE, check_fair_coin, fair_coin_p_value, split_beta
from privaudit.audit.user.scores import score_audit
from privaudit.audit.cli import main
from privaudit.audit.user.scores.score_audit import audit_scores
from privaudit.core.errors import ConfigError
from soundness import assert_planted_rejected, assert_sound, critical, rejects, rr_runs

BETA = 0.05
UNEQUAL = [(50_000, 10_000), (100_000, 1_000), (1_000_000, 1_000)]


def identical(n_members: int, n_nonmembers: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Members' and non-members' scores from one N(0, 1): the scores say nothing about membership."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n_members), rng.standard_normal(n_nonmembers)


def test_split_beta_and_the_binomial_test():
    assert split_beta(0.05) == pytest.approx((0.005, 0.045)) and COIN_TEST_SHARE == 0.1
    assert fair_coin_p_value(1000, 1000) == 1.0 and fair_coin_p_value(50_000, 10_000) < 1e-300
    assert fair_coin_p_value(520, 480) == pytest.approx(0.2174, abs=1e-3)  # scipy's exact two-sided test
    assert check_fair_coin(520, 480, 0.005) == pytest.approx(fair_coin_p_value(520, 480))
    with pytest.raises(ConfigError, match=r"^m: 600 vs 400 contradict the one-run design's fair coin .*"
                                          r"p = [0-9.e-]+ < 0\.005\); no bound is computed\. Designs that apply: "
                                          r"--inclusion-probability P .*; --design multi-run"):
        check_fair_coin(600, 400, 0.005, "m")


@pytest.mark.parametrize("n_members, n_nonmembers", UNEQUAL)
@pytest.mark.parametrize("claim", [0.1, 1.0, 8.0])
def test_unequal_counts_are_never_refuted(n_members, n_nonmembers, claim):
    mem, non = identical(n_members, n_nonmembers)
    with pytest.raises(ConfigError, match="contradict the one-run design's fair coin"):
        audit_scores(mem, non, claimed_epsilon=claim, delta=1e-5)


def test_the_cli_refuses_unequal_counts_in_one_line(tmp_path, capsys):
    mem, non = identical(50_000, 10_000)
    np.save(tmp_path / "m.npy", mem)
    np.save(tmp_path / "n.npy", non)
    code = main(["audit-scores", "--members", str(tmp_path / "m.npy"), "--nonmembers", str(tmp_path / "n.npy"),
                 "--claimed-epsilon", "1", "--delta", "1e-5", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "50000 vs 10000" in err, err
    assert not (tmp_path / "out" / "report.json").exists()


def test_the_old_behaviour_planted_refutes_an_honest_claim(monkeypatch):
    """Without the coin test (planted: it always passes), the base rate alone "refutes" epsilon 1: 50,000
    members against 10,000 identical non-members make the top guesses right 5/6 of the time."""
    monkeypatch.setattr(score_audit, "check_fair_coin", lambda *a, **k: 1.0)
    a = audit_scores(*identical(50_000, 10_000), claimed_epsilon=1.0, delta=1e-5)
    assert 0.45 < a.auc < 0.55 and a.verdict.verdict == "refuted" and a.eps_lower_bound > 1.4


def test_multi_run_design_takes_unequal_run_counts():
    """Each side's error rate is bounded on its own runs: unequal counts assume nothing, nothing is refused."""
    a = audit_scores(*identical(400, 40), design="multi-run", claimed_epsilon=1.0, delta=1e-5)
    assert a.verdict.verdict == "not refuted" and a.bound.confidence == pytest.approx(0.95)


def _rr_bounds(eps: float, seeds: int, m: int) -> tuple[np.ndarray, int]:
    """audit_scores' bound (0 when the coin test refuses) on each seed's randomized response, and the refusals."""
    coins, scores = rr_runs(np.random.default_rng(int(eps * 1000)), seeds, m, eps)
    values, refused = [], 0
    for c, s in zip(coins, scores):
        try:
            values.append(audit_scores(s[c], s[~c], delta=0.0, beta=BETA).eps_lower_bound)
        except ConfigError:
            values.append(0.0)
            refused += 1
    return np.array(values), refused


@pytest.mark.parametrize("eps", [1.0, 8.0])
def test_fair_coin_designs_keep_their_level(eps):
    """200 seeds: over-claims (a true claim of eps refuted) within the check's level; the fair coin refused on at
    most as many seeds as its level allows. The audit is tight enough that the x1.2 variant is caught at both.
    Each seed runs the whole audit_scores on 10^4 scores, so 200 seeds: the check's power against a bound
    over-claiming on 2 beta of them is 0.04 (tests/soundness.py); the bound's counts-level soundness is tested
    with power 0.9 in tests/test_one_run_soundness.py."""
    values, refused = _rr_bounds(eps, 200, 10_000)
    assert refused < critical(200, COIN_TEST_SHARE * BETA), refused
    assert_sound(f"audit_scores one-run, randomized response eps={eps}", values, eps, BETA)
    assert_planted_rejected(f"audit_scores one-run, randomized response eps={eps}", values, eps, BETA)


def test_a_suite_cannot_include_its_pool_by_an_unfair_coin():
    """The suite's audit pool feeds the same one-run bounds: its inclusion probability is the fair coin's."""
    from privaudit.audit.suite.load import parse_suite

    raw = {"name": "s", "datasets": ["digits"], "splits": {"inclusion_probability": 0.8},
           "defenses": [{"name": "nonprivate"}]}
    with pytest.raises(ConfigError, match=r"splits.inclusion_probability: must be 0.5 or 1, got 0.8: the one-run bounds"):
        parse_suite(raw, "s.toml")
    raw["splits"] = {"inclusion_probability": 0.5}
    assert parse_suite(raw, "s.toml").cells()


def test_a_suite_that_trains_on_every_pool_example_runs_only_its_own_canaries():
    """inclusion_probability = 1: no non-members, so a membership attack is one clear error; the canary audits,
    whose units are inserted by the auditor's own coins, still run (the benchmark's white-box suite)."""
    from privaudit.audit.suite.load import parse_suite

    raw = {"name": "s", "datasets": ["digits"], "epsilons": [1.0],
           "splits": {"public": 0.0, "shadow": 0.0, "inclusion_probability": 1.0},
           "defenses": [{"name": "dp-gcl", "attacks": ["gradient-canary"]},
                        {"name": "dp-fedemb", "attacks": ["user-canary"]}],
           "attacks": [{"name": "gradient-canary"}, {"name": "user-canary"}, {"name": "rmia"}]}
    assert len(parse_suite(raw, "s.toml").cells()) == 2
    raw["defenses"][0]["attacks"] = ["gradient-canary", "rmia"]
    with pytest.raises(ConfigError, match=r"defenses\[0\]\.attacks: .*no non-members to attack.*names rmia\)"):
        parse_suite(raw, "s.toml")


def _rr_bounds_at(p: float, eps: float, seeds: int, m: int) -> np.ndarray:
    """audit_scores' bound at a stated inclusion probability ``p`` on randomized response over coins of bias p."""
    rng = np.random.default_rng(int(100 * p + eps))
    coins = rng.random((seeds, m)) < p
    keep = rng.random((seeds, m)) < np.exp(eps) / (1 + np.exp(eps))
    scores = np.where(keep, coins, ~coins) + 1e-3 * rng.random((seeds, m))
    values = []
    for c, s in zip(coins, scores):
        try:
            values.append(audit_scores(s[c], s[~c], delta=0.0, beta=BETA, inclusion_probability=p).eps_lower_bound)
        except ConfigError:  # the coin test refuses (at its level): no bound
            values.append(0.0)
    return np.array(values)


def test_a_stated_inclusion_probability_is_sound_and_the_unreduced_bound_is_not(monkeypatch):
    """Inclusion by a coin of bias 0.8 (eps = 1 randomized response): the bound on the fair-coin subsample passes the
    shared check; the same counts tested against 0.8 but bounded on every candidate (planted) over-claim."""
    values = _rr_bounds_at(0.8, 1.0, 200, 4000)
    assert_sound("audit_scores one-run, inclusion probability 0.8, eps=1", values, 1.0, BETA)
    assert np.mean(values) > 0.5  # the subsample still has power
    monkeypatch.setattr(score_audit, "_fair_coin_sides", lambda sides, p, coin: (sides, coin))
    planted = _rr_bounds_at(0.8, 1.0, 200, 4000)
    assert rejects(planted, 1.0, BETA), "the unreduced bound passes the check"


def test_a_stated_inclusion_probability_is_tested_on_the_counts(tmp_path, capsys):
    mem, non = identical(50_000, 10_000)
    a = audit_scores(mem, non, inclusion_probability=5 / 6, claimed_epsilon=1.0, delta=1e-5)
    assert a.verdict.verdict == "not refuted" and a.summary["n_members"] == 50_000  # AUC on every example
    assert any("seeded subsample" in n for n in a.bound.notes)
    with pytest.raises(ConfigError, match="contradict the one-run design's fair coin per example"):
        audit_scores(mem, non, inclusion_probability=0.5)
    with pytest.raises(ConfigError, match="inclusion probability 0.3 per example"):
        audit_scores(mem, non, inclusion_probability=0.3)
    with pytest.raises(ConfigError, match="--inclusion-probability: applies to the one-run design only"):
        audit_scores(mem[:40], non[:40], design="multi-run", inclusion_probability=0.6)
