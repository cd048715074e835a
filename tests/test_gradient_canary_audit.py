"""White-box gradient-canary audits through the DP engine's canary hook: sound, and able to catch a leak."""

import pytest

from attacks.base import Target
from attacks.registry import make_attack
from core.errors import ConfigError
from defenses import Budget
from defenses.dp_gcl import DPGCL

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


def test_audit_is_sound_on_a_correct_defense(digits):
    result = audit(digits, "dp-gcl", Budget(target_epsilon=1.0))
    assert result.bound.epsilon <= 1.0
    assert result.counts["n_canaries"] == 1000 and result.counts["n_steps"] > 0
    assert result.counts["canary_norm"] > 0
    assert "white-box" in " ".join(result.bound.notes)


def test_audit_detects_under_noised_training(digits):
    claimed = 1.0
    leaky = audit(digits, "test_gradient_canary_audit:UnderNoisedDPGCL", Budget(target_epsilon=claimed))
    assert leaky.bound.epsilon > 2 * claimed  # the sound lower bound exceeds the claim: a violation
    assert leaky.summary()["auc"] > 0.95


def test_audit_power_grows_with_epsilon(digits):
    low = audit(digits, "dp-gcl", Budget(target_epsilon=1.0))
    high = audit(digits, "dp-gcl", Budget(target_epsilon=10.0))
    assert high.summary()["auc"] > low.summary()["auc"] + 0.2
    assert high.bound.epsilon > 1.5


def test_audit_refuses_defenses_it_cannot_audit(digits):
    with pytest.raises(ConfigError, match="has no DP-SGD engine"):
        audit(digits, "nonprivate", Budget())
    with pytest.raises(ConfigError, match="samples batches 'without-replacement'"):
        audit(digits, "dpcl-simclr", Budget(target_epsilon=1.0))
