"""White-box canary users for DP-FedEmb / DP-FedAvg: a user-level replace-one bound, below the claim, or an error."""

import functools

import pytest

from privaudit.attacks.base import Target
from privaudit.attacks.registry import make_attack
from privaudit.core.errors import ConfigError
from privaudit.defenses import Budget

FAST = {"epochs": 1, "rounds": 6}


def canary_run(digits, defense: str, budget: Budget):
    return make_attack("user-canary", canaries=2000).run(Target(None, digits, defense, FAST, budget, seed=0))


@pytest.fixture(scope="module")
def fedemb_eps8(digits):
    """DP-FedEmb's canary-user audit at epsilon 8, run once for the two tests that read it (read only)."""
    return canary_run(digits, "dp-fedemb", Budget(target_epsilon=8.0, delta=1e-5))


@pytest.mark.parametrize("defense", ["dp-fedemb", "dp-fedavg"])
def test_canary_users_give_a_user_level_replace_one_bound(digits, fedemb_eps8, defense):
    result = fedemb_eps8 if defense == "dp-fedemb" else canary_run(digits, defense,
                                                                   Budget(target_epsilon=8.0, delta=1e-5))
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


@functools.cache
def _claim_pld_epsilon(data, budget: Budget) -> float:
    """The PLD epsilon of DP-FedEmb's own claim (its event, replace-one per user) at FAST."""
    from privaudit.accountants.pld.pld import build_pld
    from privaudit.defenses.registry import make_defense

    d = make_defense("dp-fedemb", FAST)
    users = d.users(data, 0)
    claim, _ = d.claim(d.noise_plan(budget, len(users)), len(users), budget.delta, users)
    return float(build_pld(claim.event, claim.relation).get_epsilon_for_delta(claim.delta))


def test_canary_users_give_a_mechanism_bound_below_the_claims_pld_epsilon(digits, fedemb_eps8):
    """The paired canary users' one-run f-DP bound against the claim's own PLD curve (replace-one, per user):
    reported by default, at the claim's relation and unit, positive, and below the claim's PLD epsilon."""
    budget = Budget(target_epsilon=8.0, delta=1e-5)
    result = fedemb_eps8
    mb = result.mechanism_bound
    assert mb is not None and (mb.relation, mb.unit, mb.method) == ("replace-one", "user", "one-run-fdp-mechanism")
    assert mb.counts["k_neg"] == 0 and mb.counts["event"]["type"] == "SelfComposedDpEvent"
    assert 0 < mb.epsilon <= _claim_pld_epsilon(digits, budget) and not mb.counts["claim_rejected"]
    tb = result.trajectory_bound  # every round's paired slots: sound, and tighter than the one-run bound
    assert (tb.relation, tb.unit, tb.method) == ("replace-one", "user", "white-box-trajectory")
    assert mb.epsilon < tb.epsilon <= _claim_pld_epsilon(digits, budget) and not tb.counts["claim_rejected"]


def test_undernoised_aggregation_is_refuted_by_the_mechanism_bound(digits, monkeypatch):
    """Positive control: the aggregation adds a fifth of the noise the claim accounts; the mechanism bound
    rejects the claim's own curve and exceeds its epsilon."""
    import privaudit.defenses.fedemb.defense as fed

    honest = fed.noised_mean
    monkeypatch.setattr(fed, "noised_mean", lambda deltas, clip, z, gen, **kw: honest(deltas, clip, z / 5, gen, **kw))
    budget = Budget(target_epsilon=1.0, delta=1e-5)
    result = canary_run(digits, "dp-fedemb", budget)
    mb = result.mechanism_bound
    assert mb.counts["claim_rejected"] and mb.epsilon > _claim_pld_epsilon(digits, budget)
    assert result.trajectory_bound.counts["claim_rejected"] and result.trajectory_bound.epsilon > mb.epsilon
