"""Tight accounting of sampling without replacement under replace-one (the PLD of the dominating pair).

One step is checked against a direct numerical integration of the hockey-stick divergence of the pair
(q N(1, z^2) + (1-q) N(0, z^2), N(0, z^2)) in both orders; many steps against RDP (WBK19), which must be
above; both bracket ends around the reported (pessimistic) value.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from privaudit.accountants import epsilon
from privaudit.accountants.sampled_gaussian import sampled_gaussian_claim
from privaudit.accountants.paper_claims import paper_claims
from privaudit.audit.cli import main


def hockey_stick(eps: float, z: float, q: float) -> float:
    """max over both orders of H_{e^eps}(P || Q) = int max(0, p - e^eps q) dx, P = q N(1, z^2) + (1-q) N(0, z^2),
    Q = N(0, z^2), integrated directly (Simpson's rule on a grid fine enough for 1e-6 relative accuracy)."""
    a = math.exp(eps)
    x = np.linspace(-14 * z - 1, 14 * z + 2, 600_001)
    qd = stats.norm.pdf(x, 0.0, z)
    p = q * stats.norm.pdf(x, 1.0, z) + (1 - q) * qd
    forward = integrate.simpson(np.maximum(0.0, p - a * qd), x=x)
    backward = integrate.simpson(np.maximum(0.0, qd - a * p), x=x)
    return max(forward, backward)


def exact_one_step_epsilon(z: float, q: float, delta: float) -> float:
    return optimize.brentq(lambda e: hockey_stick(e, z, q) - delta, 1e-6, 50, xtol=1e-10)


@pytest.mark.parametrize("z, n, m, delta", [(1.0, 1000, 100, 1e-5), (0.7, 50_000, 128, 1e-5), (2.0, 100, 50, 1e-3)])
def test_one_step_matches_direct_integration(z, n, m, delta):
    claim = sampled_gaussian_claim(z, 1, delta, dataset_size=n, batch_size=m, sampling="without-replacement")
    result = epsilon(claim, "pld")  # the default discretisation, 1e-4
    exact = exact_one_step_epsilon(z, m / n, delta)
    assert result.epsilon == pytest.approx(exact, rel=1e-3)
    assert result.details["epsilon_lower"] <= exact * (1 + 1e-6) and exact <= result.epsilon * (1 + 1e-6)


@pytest.mark.parametrize("z, n, m, steps", [(1.0, 10_000, 100, 1000), (0.8, 50_000, 256, 2000), (1.5, 1000, 50, 300)])
def test_many_steps_are_below_rdp(z, n, m, steps):
    claim = sampled_gaussian_claim(z, steps, 1e-5, dataset_size=n, batch_size=m, sampling="without-replacement")
    pld, rdp = epsilon(claim, "pld"), epsilon(claim, "rdp")
    assert pld.details["epsilon_lower"] <= pld.epsilon < rdp.epsilon
    assert pld.relation == "replace-one"


def test_shared_batch_mechanisms_are_one_gaussian():
    two = sampled_gaussian_claim([1.0, 1.0], 200, 1e-5, dataset_size=5000, batch_size=50,
                                 sampling="without-replacement")
    one = sampled_gaussian_claim(1.0 / math.sqrt(2), 200, 1e-5, dataset_size=5000, batch_size=50,
                                 sampling="without-replacement")
    assert epsilon(two, "pld").epsilon == pytest.approx(epsilon(one, "pld").epsilon, rel=1e-9)


def test_cli_returns_the_bracket(capsys):
    code = main(["epsilon", "--noise-multiplier", "1", "--steps", "500", "--delta", "1e-5", "--dataset-size",
                 "10000", "--batch-size", "100", "--sampling", "without-replacement", "--relation", "replace-one",
                 "--accountant", "pld", "--json"])
    out = json.loads(capsys.readouterr().out)
    lo, hi = out["brackets"]["pld"]
    assert code == 0 and lo <= out["pld"] == hi and "bracket" in out["notes"]["pld"]


def test_wrong_relation_is_not_applicable_with_reason(capsys):
    code = main(["epsilon", "--noise-multiplier", "1", "--steps", "5", "--delta", "1e-5", "--dataset-size", "1000",
                 "--batch-size", "10", "--sampling", "without-replacement", "--relation", "add-remove",
                 "--accountant", "pld", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["pld"] is None
    assert out["notes"]["pld"] == ("not applicable: pld: sampling without replacement is accounted under "
                                   "replace-one only (a fixed-size batch has no add/remove neighbour of the same size)")


def test_user_level_fedemb_claim_gets_a_tight_value():
    (claim,) = [c for c in paper_claims() if c.id == "fedemb-digiface"]
    built = claim.checked.build(claim.noise_values)
    pld, rdp = epsilon(built, "pld"), epsilon(built, "rdp")
    assert built.unit == "user" and pld.epsilon < rdp.epsilon
