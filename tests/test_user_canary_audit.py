"""White-box canary users for DP-FedEmb / DP-FedAvg: a user-level replace-one bound, below the claim, or an error."""

import pytest

from attacks.base import Target
from attacks.registry import make_attack
from core.errors import ConfigError
from defenses import Budget

FAST = {"epochs": 1, "rounds": 6}


@pytest.mark.parametrize("defense", ["dp-fedemb", "dp-fedavg"])
def test_canary_users_give_a_user_level_replace_one_bound(digits, defense):
    target = Target(None, digits, defense, FAST, Budget(target_epsilon=8.0, delta=1e-5), seed=0)
    result = make_attack("user-canary", canaries=2000).run(target)
    b = result.bound
    assert (b.relation, b.unit, b.method) == ("replace-one", "user", "one-run-best")
    assert 0 < b.epsilon <= 8.0  # sound: below the claim; and the canaries are seen
    assert result.counts["n_canaries"] == 2000 and result.counts["n_steps"] == FAST["rounds"]
    assert 0 < result.counts["sample_rate"] <= 1


def test_unsupported_relation_or_defense_is_an_error(digits):
    with pytest.raises(ConfigError, match="relation='replace-one', unit='example'|unit='user'"):
        make_attack("user-canary", relation="swap")
    target = Target(None, digits, "dp-fedemb", FAST, Budget(target_epsilon=8.0), seed=0)
    with pytest.raises(ConfigError, match="relation='add-remove', unit='user' cannot be compared with.*"
                                          "relation='replace-one', unit='user'"):
        make_attack("user-canary", relation="add-remove").run(target)
    with pytest.raises(ConfigError, match="no federated aggregation"):
        make_attack("user-canary").run(Target(None, digits, "dp-gcl", {"epochs": 1}, Budget(target_epsilon=1.0)))
