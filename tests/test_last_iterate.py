"""The last-iterate heuristic (Steinke et al. 2025): exact against the Gaussian and one-step accountants, direct
integration of its pair, below every accountant, never an accountant, and its place in the report and CLI."""

import json
import math

import numpy as np
import pytest
from dp_accounting import (ComposedDpEvent, GaussianDpEvent, LaplaceDpEvent, PoissonSampledDpEvent,
                           SampledWithoutReplacementDpEvent, SelfComposedDpEvent)

from privaudit.accountants import ACCOUNTANTS, PrivacyClaim, epsilon
from privaudit.accountants.gaussian import analytic_gaussian_epsilon
from privaudit.accountants.last_iterate import (NAME, LastIteratePair, last_iterate_delta, last_iterate_epsilon,
                                                last_iterate_epsilon_of, pair_of)
from privaudit.core.errors import ConfigError

DELTA = 1e-5


def poisson(q, z, steps, delta=DELTA):
    return PrivacyClaim(SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), steps), "add-remove",
                        "example", delta)


def without_replacement(n, b, z, steps, inner=None):
    step = SampledWithoutReplacementDpEvent(n, b, inner or GaussianDpEvent(z))
    return PrivacyClaim(SelfComposedDpEvent(step, steps), "replace-one", "example", DELTA)


@pytest.mark.parametrize("z, steps", [(1.0, 1), (2.0, 10), (0.8, 100)])
@pytest.mark.parametrize("relation", ["add-remove", "replace-one"])
def test_without_sampling_the_final_model_is_the_whole_composition(z, steps, relation):
    """q = 1: the sum of T Gaussians is one Gaussian with z / sqrt(T), exactly what the accountants compose."""
    assert last_iterate_epsilon_of(LastIteratePair(1.0, z, steps, relation), DELTA) == pytest.approx(
        analytic_gaussian_epsilon(z / math.sqrt(steps), DELTA), rel=1e-8)


@pytest.mark.parametrize("claim", [poisson(0.01, 1.0, 1), poisson(0.1, 0.8, 1),
                                   without_replacement(1000, 10, 0.5, 1)], ids=["q0.01", "q0.1", "wor"])
def test_one_step_lies_in_the_pld_bracket(claim):
    """T = 1: the final model is the one release, so the heuristic is that step's exact epsilon (inside PLD's
    optimistic/pessimistic bracket)."""
    pld = epsilon(claim, "pld")
    got = last_iterate_epsilon(claim).epsilon
    assert pld.details["epsilon_lower"] - 1e-6 <= got <= pld.epsilon + 1e-6


@pytest.mark.parametrize("claim", [poisson(0.01, 1.0, 1000), poisson(0.05, 1.2, 300), poisson(0.004, 0.9, 5000),
                                   without_replacement(1000, 50, 0.6, 200)], ids=["q0.01", "q0.05", "q0.004", "wor"])
def test_hiding_the_iterates_only_lowers_epsilon(claim):
    """The final model is a post-processing of the releases the accountants compose: the heuristic is below every
    sound accountant's epsilon, and with sampling strictly below (the last-iterate advantage)."""
    got = last_iterate_epsilon(claim).epsilon
    sound = [r.epsilon for r in (epsilon(claim, name) for name in ("rdp", "pld", "prv")) if r.epsilon is not None]
    assert sound and 0 < got < 0.95 * min(sound)


def test_more_steps_can_hide_the_target_better():
    """Unlike the composed epsilon, the final model's need not grow with T: at q = 0.02, z = 1 a second step's noise
    hides a single inclusion more than the chance of a second inclusion reveals (T = 1 to 5 fall; checked against
    direct integration of the pair); over many steps the inclusions add up and it grows."""
    values = [last_iterate_epsilon_of(LastIteratePair(0.02, 1.0, t), DELTA) for t in (1, 2, 5, 10, 100, 1000)]
    assert values[0] > values[1] > values[2]
    assert values[2] < values[3] < values[4] < values[5]


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_divergences_match_direct_integration(eps):
    """Both hockey-stick divergences of P = Bin(T, q) + N(0, T z^2) and Q = N(0, T z^2), integrated on a grid (100,001
    points: the Riemann sums' own error is at most 5e-8 relative at both epsilons, against 4e-10 at 400,001)."""
    from scipy.stats import binom, norm

    q, z, t = 0.05, 1.2, 300
    got = last_iterate_delta(LastIteratePair(q, z, t), eps)
    s = z * math.sqrt(t)
    x = np.linspace(-12 * s, t * q + 14 * s, 100_001)
    k = np.arange(0, 60)
    p = (binom.pmf(k, t, q)[:, None] * norm.pdf(x[None, :], loc=k[:, None], scale=s)).sum(axis=0)
    qd = norm.pdf(x, scale=s)
    dx = x[1] - x[0]
    assert got["P||Q"] == pytest.approx(np.maximum(p - math.exp(eps) * qd, 0).sum() * dx, rel=1e-6)
    assert got["Q||P"] == pytest.approx(np.maximum(qd - math.exp(eps) * p, 0).sum() * dx, rel=1e-6)
    assert got["delta"] == max(got["P||Q"], got["Q||P"])


def test_epsilon_is_where_delta_meets_the_claims():
    pair = LastIteratePair(0.05, 1.2, 300)
    eps = last_iterate_epsilon_of(pair, DELTA)
    assert last_iterate_delta(pair, eps)["delta"] == pytest.approx(DELTA, rel=1e-4)
    assert last_iterate_delta(pair, eps * 0.99)["delta"] > DELTA > last_iterate_delta(pair, eps * 1.01)["delta"]


def test_large_runs_are_fast_and_do_not_overflow():
    """A million steps (scipy's binomial quantiles fail at the tails left out); an epsilon past the search's end is
    not applicable with the reason, never infinity (which would read as no privacy)."""
    assert 1 < last_iterate_epsilon_of(LastIteratePair(0.001, 0.6, 10 ** 6), DELTA) < 100
    beyond = last_iterate_epsilon(poisson(0.5, 1.0, 10 ** 6))
    assert beyond.epsilon is None and "above" in beyond.reason


def test_which_claims_it_reads():
    # Gaussians released on one batch are one Gaussian with z_eff
    joint = without_replacement(1000, 50, None, 200, ComposedDpEvent([GaussianDpEvent(0.8), GaussianDpEvent(0.8)]))
    assert pair_of(joint) == LastIteratePair(0.05, 0.8 / math.sqrt(2), 200, "replace-one")
    assert last_iterate_epsilon(PrivacyClaim.non_private()).epsilon == math.inf
    not_dpsgd = {
        "laplace": PrivacyClaim(LaplaceDpEvent(1.0), "add-remove", "example", DELTA),
        "phases": PrivacyClaim(ComposedDpEvent([poisson(0.1, 1.0, 5).event, poisson(0.2, 1.0, 5).event]),
                               "add-remove", "example", DELTA),
        "separately sampled": PrivacyClaim(SelfComposedDpEvent(ComposedDpEvent(
            [PoissonSampledDpEvent(0.1, GaussianDpEvent(1.0))] * 2), 5), "add-remove", "example", DELTA),
        "poisson replace-one": PrivacyClaim(poisson(0.1, 1.0, 5).event, "replace-one", "example", DELTA),
        "wor add-remove": PrivacyClaim(without_replacement(100, 10, 1.0, 5).event, "add-remove", "example", DELTA),
        "delta 0": poisson(0.1, 1.0, 5, delta=0.0),
    }
    for why, claim in not_dpsgd.items():
        result = last_iterate_epsilon(claim)
        assert result.epsilon is None and result.reason.startswith("last-iterate: "), why
    with pytest.raises(ConfigError, match="sample_rate"):
        LastIteratePair(0.0, 1.0, 10)


def test_it_is_not_an_accountant():
    """No verdict may rest on it: the gate and the report's accountant columns read only ACCOUNTANTS."""
    assert NAME not in ACCOUNTANTS


def test_report_rows_set_it_beside_the_final_model_attacks_only():
    from privaudit.audit.report import summary as s

    from cell_records import make_attack_record, make_cell_record

    cell = make_cell_record("c", epsilon={"rdp": 2.0, "pld": 1.6, "pure": None},
                            details={"last_iterate": {"epsilon": 0.8}},
                            attacks={"canary": make_attack_record(0.2),
                                     "wb": make_attack_record(0.1, eps_lb_mechanism=1.5)}).to_dict()
    nonprivate = make_cell_record("nonprivate", epsilon={"rdp": None}, infinite=True,
                                  details={"last_iterate": {"epsilon": None, "infinite": True}}).to_dict()
    report = {"suite": {"attacks": [{"label": "canary", "name": "canary"}, {"label": "wb", "name": "gradient-canary"}]},
              "cells": [cell, nonprivate]}
    assert s.final_model_rows(report) == [["c", "1.6", "0.8", "0.5", "canary", "0.2", "0.25"]]
    assert len(s.FINAL_MODEL_HEADERS) == 7


def test_a_run_records_it_and_its_report_shows_it(tiny_run):
    """The tiny suite's honest Gaussian cell: one unsampled release, so the heuristic is the claim's exact epsilon."""
    from privaudit.core.io import read_json

    _, out = tiny_run
    private = read_json(out / "report.json")["cells"][0]
    last = private["details"]["last_iterate"]
    assert last["accountant"] == NAME and NAME not in private["epsilon"]
    assert last["epsilon"] == pytest.approx(private["epsilon"]["gaussian"], rel=1e-6)
    assert "## The final model: what hiding the iterates buys" in (out / "report.md").read_text()
    assert 'id="final-model-table"' in (out / "report.html").read_text()


def test_the_epsilon_command_prints_it_beside_the_accountants(capsys):
    from privaudit.audit.cli import main

    args = ["epsilon", "--noise-multiplier", "1.1", "--steps", "300", "--delta", "1e-5", "--sample-rate", "0.01"]
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result[NAME] == pytest.approx(last_iterate_epsilon(poisson(0.01, 1.1, 300)).epsilon)
    assert "not a bound" in result["notes"][NAME]
    assert main(args) == 0 and "last-iterate: " in capsys.readouterr().out
    assert main([*args, "--accountant", "rdp", "--json"]) == 0
    assert NAME not in json.loads(capsys.readouterr().out)
