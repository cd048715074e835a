"""``privaudit plan`` and the ceilings it searches: the smallest design is the smallest, its ceiling exceeds the claim,
and a design whose ceiling is below the claim says so."""

from __future__ import annotations

import json

import pytest

from privaudit.attacks.bounds.multi_run import multi_run_ceiling
from privaudit.attacks.bounds.one_run import one_run_search_ceiling
from privaudit.audit.cli import main
from privaudit.audit.user.plan import plan
from privaudit.audit.user.scores.score_bounds import one_run_grid
from privaudit.audit.user.claim import UserClaim


def one_run(m: int, delta: float) -> float:
    """The one-run ceiling audit-scores reaches: its bound at 90% of beta (the rest tests the fair coin)."""
    return one_run_search_ceiling(m, one_run_grid(m), beta=0.045, delta=delta)


def test_epsilon_2_one_run_and_multi_run_are_the_smallest_that_can():
    designs = {d["design"]: d for d in plan(UserClaim(2.0, 1e-5))["designs"]}
    m = designs["one-run"]["candidates"]
    assert one_run(m, 1e-5) > 2.0 >= one_run(m - 1, 1e-5)
    assert designs["one-run"]["ceiling"] == pytest.approx(one_run(m, 1e-5))
    n = designs["multi-run"]["runs_per_side"]
    assert multi_run_ceiling(n, n, delta=1e-5) > 2.0 >= multi_run_ceiling(n - 1, n - 1, delta=1e-5)


def test_epsilon_8_needs_many_runs_and_no_one_run_design_reaches_it(capsys):
    assert main(["plan", "--claimed-epsilon", "8", "--delta", "1e-5", "--json"]) == 0
    designs = {d["design"]: d for d in json.loads(capsys.readouterr().out)["designs"]}
    one = designs["one-run"]
    assert not one["refutable"] and one["ceiling"] < 8 and "no one-run design can refute epsilon 8" in one["note"]
    assert one["ceiling"] == pytest.approx(one_run(one["best_candidates"], 1e-5))
    multi = designs["multi-run"]
    assert multi["refutable"] and multi["ceiling"] > 8  # a design whose ceiling exceeds the claim
    n = multi["runs_per_side"]
    assert multi_run_ceiling(n - 1, n - 1, delta=1e-5) <= 8 < multi_run_ceiling(n, n, delta=1e-5)
