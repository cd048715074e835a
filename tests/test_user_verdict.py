"""Verdicts on a user's claim: refuted when the sound bound exceeds it, the ceiling is what a perfect attack reaches,
and "cannot refute" when the ceiling is below the claim; the multi-run test against the claim's own mechanism
keeps its false-refutation rate (an unsound variant does not)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privaudit.attacks.bounds.multi_run import clopper_pearson_upper
from privaudit.attacks.bounds import mechanism as mb
from privaudit.audit.cli import main
from privaudit.audit.user.scores.score_audit import audit_scores
from privaudit.audit.user.claim import UserClaim


def fair_coin(m: int, shift: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    inside = rng.random(m) < 0.5
    scores = rng.normal(shift * inside, 1.0)
    return scores[inside], scores[~inside]


def test_a_perfect_attack_reaches_the_ceiling_and_refutes_below_it():
    mem, non = fair_coin(4000, 50.0, 0)  # perfectly separated: every guess right
    a = audit_scores(mem, non, claimed_epsilon=2.0, delta=1e-5)
    assert a.eps_lower_bound == pytest.approx(a.ceiling)
    assert a.verdict.verdict == "refuted" and a.verdict.refutable
    assert a.verdict.statement.startswith("refuted at 95% confidence: epsilon >= ")
    assert a.verdict.statement.endswith(f"(this design could show up to {a.ceiling:.3g})")  # the ceiling, refuted too
    b = audit_scores(mem, non, claimed_epsilon=8.0, delta=1e-5)
    assert b.verdict.verdict == "not refuted" and not b.verdict.refutable
    assert f"cannot refute: ceiling {b.ceiling:.3g} < claimed 8" in b.verdict.statement


@pytest.mark.parametrize("seed", range(5))
def test_the_bound_never_exceeds_the_ceiling(seed):
    mem, non = fair_coin(int(np.random.default_rng(seed).integers(50, 3000)), 2.0, seed)
    a = audit_scores(mem, non)
    assert 0 <= a.eps_lower_bound <= a.ceiling


def test_cli_json_gives_verdict_and_ceiling(tmp_path, capsys):
    mem, non = fair_coin(2000, 2.0, 1)
    np.save(tmp_path / "m.npy", mem)
    np.save(tmp_path / "n.npy", non)
    assert main(["audit-scores", "--members", str(tmp_path / "m.npy"), "--nonmembers", str(tmp_path / "n.npy"),
                 "--claimed-epsilon", "8", "--delta", "1e-5", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"] == "not refuted" and 0 < d["ceiling"] < 8 and d["claim"]["epsilon"] == 8
    assert abs(d["advantage"] - (2 * d["balanced_accuracy"] - 1)) < 1e-12


def gaussian_claim(z: float) -> UserClaim:
    """One Gaussian release of a sensitivity-1 sum with noise multiplier z, as an accountant's mechanism."""
    from privaudit.accountants import PrivacyClaim, epsilon
    from privaudit.accountants.events import GaussianDpEvent

    event = GaussianDpEvent(z)
    eps = epsilon(PrivacyClaim(event=event, relation="add-remove", unit="example", delta=1e-5), "pld").epsilon
    return UserClaim(eps, 1e-5, event=event)


def false_refutations(claim: UserClaim, z: float, runs: int, trials: int, sound: bool) -> float:
    """How often runs of the claimed mechanism itself (outputs N(1, z^2) with the canary, N(0, z^2) without) refute it
    -- by the multi-run test, or by an unsound one that reads the error rates without confidence bounds."""
    rng = np.random.default_rng(7)
    refuted = 0
    for _ in range(trials):
        ins, outs = rng.normal(1.0, z, runs), rng.normal(0.0, z, runs)
        if sound:
            eps = mb.multi_run_mechanism_bound(ins, outs, event=claim.event, relation="add-remove", delta=1e-5).epsilon
            refuted += eps > claim.epsilon
        else:
            t = 0.5
            fpr, fnr = float(np.mean(outs >= t)), float(np.mean(ins < t))
            inv = mb.blow_up_inverse(claim.event, "add-remove", 1.0)
            refuted += fnr < inv(1.0 - fpr) or fpr < inv(1.0 - fnr)
    return refuted / trials


def test_the_mechanism_multi_run_test_keeps_its_level_and_an_unsound_one_does_not():
    z = 0.5
    claim = gaussian_claim(z)
    assert false_refutations(claim, z, 20, 120, sound=True) <= 0.05
    assert false_refutations(claim, z, 20, 120, sound=False) > 0.2  # point estimates: the default run catches it


def test_error_free_runs_refute_a_much_noisier_claim():
    claim = gaussian_claim(4.0)  # claims 4x the noise of the runs below
    rng = np.random.default_rng(0)
    ins, outs = rng.normal(1.0, 0.05, 40), rng.normal(0.0, 0.05, 40)
    b = mb.multi_run_mechanism_bound(ins, outs, event=claim.event, relation="add-remove", delta=1e-5)
    assert b.counts["false_positives"] == b.counts["false_negatives"] == 0 and b.counts["claim_rejected"]
    assert b.epsilon > claim.epsilon
    ceiling = mb.multi_run_mechanism_ceiling(40, 40, event=claim.event, relation="add-remove", delta=1e-5)
    assert b.epsilon == pytest.approx(ceiling)
    assert clopper_pearson_upper(0, 20, 0.025) < 0.2


def test_alpha_star_by_bisection_is_the_maximum_over_every_window():
    """The one-run p-value's alpha* (max over i of the mean pmf on [v - i, v - 1]) found in O(log v) equals the
    maximum over all windows, so the faster p-value is the same sound p-value."""
    from scipy import special, stats

    from privaudit.attacks.bounds.one_run import _alpha_star

    rng = np.random.default_rng(0)
    for _ in range(300):
        r = int(rng.integers(1, 2000))
        v = int(rng.integers(1, r + 1))
        q = float(special.expit(rng.uniform(0, 10)))
        i = np.arange(1, v + 1)
        brute = float(np.max((stats.binom.sf(v - i - 1, r, q) - stats.binom.sf(v - 1, r, q)) / i))
        assert _alpha_star(r, v, q) == pytest.approx(brute, rel=1e-8, abs=1e-15), (r, v, q)


def test_guess_counts_from_sorted_sides_match_a_random_order():
    """Without ties the counts equal the argsort guesses'; with ties they are distributed as after a random order
    (a tie broken in the members' favour, the unsound variant, would not be)."""
    from privaudit.attacks.bounds.one_run import one_run_guesses, sorted_guess_counts
    from privaudit.attacks.metrics import SortedScores

    rng = np.random.default_rng(1)
    scores, inside = rng.normal(size=500), rng.random(500) < 0.5
    g = one_run_guesses(scores, 60, 40)
    v = int(np.sum((g == 1) & inside) + np.sum((g == -1) & ~inside))
    assert sorted_guess_counts(SortedScores.of(scores[inside], scores[~inside]), 60, 40, rng) == (100, v)
    tied = SortedScores.of(np.zeros(100), np.zeros(100))  # a constant attack: every guess a coin flip
    draws = [sorted_guess_counts(tied, 50, 50, rng)[1] for _ in range(400)]
    assert abs(np.mean(draws) - 50) < 1.0 and np.std(draws) > 2
