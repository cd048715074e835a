"""White-box gradient-canary audits through the DP engine's canary hook: sound, and able to catch a leak."""

import pytest

from privaudit.attacks.base import Target
from privaudit.attacks.registry import make_attack
from privaudit.core.errors import ConfigError
from privaudit.defenses import Budget
from privaudit.defenses.dp_gcl import DPGCL

FAST = {"epochs": 6}


class UnderNoisedDPGCL(DPGCL):
    """A planted bug: the claim is built for 10x the noise multiplier the training actually uses.

    Calibration therefore picks a multiplier ten times too small while the claim states the target.
    """

    def claim_for(self, plan, mechanisms, gradient_multiplier, delta):
        return super().claim_for(plan, mechanisms, gradient_multiplier * 10, delta)


def audit(digits, defense, budget, **params):
    target = Target(None, digits, defense, {**FAST, **params}, budget, seed=0)
    return make_attack("gradient-canary").run(target)


@pytest.fixture(scope="module")
def honest_eps1(digits):
    """The honest DP-GCL audit at epsilon 1, run once for the soundness and the power tests (read only)."""
    return audit(digits, "dp-gcl", Budget(target_epsilon=1.0))


def test_audit_is_sound_on_a_correct_defense(honest_eps1):
    result = honest_eps1
    assert result.bound.epsilon <= 1.0
    assert result.counts["n_canaries"] == min(20000, result.counts["dim"]) > 1000  # one per parameter, capped
    assert result.counts["n_steps"] > 0
    assert (result.bound.relation, result.bound.unit, result.bound.method) == ("add-remove", "example", "one-run-best")
    assert result.counts["canary_norm"] > 0
    assert "white-box" in " ".join(result.bound.notes)
    mech = result.mechanism_bound  # against the claim's own mechanism: sound, and at least as strong here
    assert (mech.method, mech.relation, mech.unit) == ("one-run-fdp-mechanism", "add-remove", "example")
    assert 0 < mech.epsilon <= 1.0 and not mech.counts["claim_rejected"]
    assert result.config["score"] == "llr" and result.summary()["eps_lb_mechanism"] == mech.epsilon


def test_audit_detects_under_noised_training(digits):
    claimed = 1.0
    leaky = audit(digits, "test_gradient_canary_audit:UnderNoisedDPGCL", Budget(target_epsilon=claimed))
    assert leaky.bound.epsilon > 2 * claimed  # the sound lower bound exceeds the claim: a violation
    assert leaky.mechanism_bound.epsilon > 2 * claimed and leaky.mechanism_bound.counts["claim_rejected"]
    assert leaky.summary()["auc"] > 0.95


def test_audit_power_grows_with_epsilon(digits, honest_eps1):
    low = honest_eps1
    high = audit(digits, "dp-gcl", Budget(target_epsilon=10.0))
    assert high.summary()["auc"] > low.summary()["auc"] + 0.2
    assert high.bound.epsilon > 1.5


def test_audit_refuses_defenses_it_cannot_audit(digits):
    with pytest.raises(ConfigError, match="has no DP-SGD engine"):
        audit(digits, "nonprivate", Budget())
    with pytest.raises(ConfigError, match="does not support relation='add-remove', unit='example'.*"
                                          "supports relation=replace-one, unit=example"):
        make_attack("gradient-canary", relation="add-remove").run(
            Target(None, digits, "dpcl-simclr", {"epochs": 1}, Budget(target_epsilon=1.0), seed=0))
    with pytest.raises(ConfigError, match="relation='zap', unit='example'"):
        make_attack("gradient-canary", relation="zap")


def test_paired_slots_audit_a_replace_one_claim(digits):
    """DPCL (fixed-size batches, replace-one): paired +-Delta/2 slots, a bound at the claim's relation, below it."""
    target = Target(None, digits, "dpcl-simclr", {"epochs": 2}, Budget(target_epsilon=4.0, delta=1e-5), seed=0)
    result = make_attack("gradient-canary").run(target)
    b = result.bound
    assert (b.relation, b.unit) == ("replace-one", "example") and result.config["paired"]
    assert 0 < b.epsilon <= 4.0
    assert result.counts["canary_norm"] > 0 and "paired replace-one Dirac slots" in " ".join(b.notes)
