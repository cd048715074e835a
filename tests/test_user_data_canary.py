"""Black-box canary users for DP-FedEmb / DP-FedAvg: whole users of inserted images, a user-level replace-one
bound, a signal when the defense adds (almost) no noise, or a clear error."""

import numpy as np
import pytest
import torch

from privaudit.attacks.base import Target
from privaudit.attacks.registry import make_attack
from privaudit.attacks.canaries.user_data_canary import UserCohesion, canary_users
from privaudit.core.errors import ConfigError
from privaudit.defenses import Budget

FAST = {"epochs": 1, "rounds": 6}


def test_canary_users_are_whole_users_of_distinct_images():
    split = canary_users(5, 3, (1, 8, 8), 10, seed=0, first_user=7)
    assert split.x.shape == (15, 1, 8, 8) and split.users.tolist() == [u for u in range(7, 12) for _ in range(3)]
    assert (split.index < 0).all() and len(set(split.index.tolist())) == 15
    assert all(len(set(split.y[3 * u:3 * u + 3].tolist())) == 1 for u in range(5))  # one label per user
    assert torch.cdist(split.x.flatten(1), split.x.flatten(1)).fill_diagonal_(1).min() > 0  # distinct images


def test_cohesion_is_the_mean_pairwise_cosine_within_a_user():
    class Trained:
        def features(self, x):
            return x.flatten(1)

    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]).view(4, 1, 1, 2)
    split = canary_users(2, 2, (1, 1, 2), 2, seed=0, first_user=0)
    split = type(split)(x, split.y, split.index, split.users)
    np.testing.assert_allclose(UserCohesion(2)(Trained(), split, None), [1.0, 0.0])


def test_canary_users_are_seen_without_noise_and_bounded_per_user(digits):
    target = Target(None, digits, "dp-fedemb", FAST, Budget(noise_multiplier=0.01, delta=1e-5), seed=0)
    result = make_attack("user-data-canary", slots=40).run(target)
    b = result.bound
    assert (b.relation, b.unit, b.method) == ("replace-one", "user", "one-run-best")
    assert result.counts["n_slots"] == 40 and result.counts["n_candidate_users"] == 80
    assert result.counts["examples_per_user"] == 6 and result.counts["n_real_users"] > 10
    assert result.summary()["auc"] > 0.55  # 0.67 on this machine: the trained users' images cohere


def test_bad_relation_defense_or_size_is_an_error(digits):
    with pytest.raises(ConfigError, match="slots: must be >= 2"):
        make_attack("user-data-canary", slots=1)
    with pytest.raises(ConfigError, match="unit='user'"):
        make_attack("user-data-canary", relation="swap")
    target = Target(None, digits, "dp-fedemb", FAST, Budget(target_epsilon=8.0), seed=0)
    with pytest.raises(ConfigError, match="relation='add-remove', unit='user' cannot be compared"):
        make_attack("user-data-canary", relation="add-remove").run(target)
    with pytest.raises(ConfigError, match="needs >= 2 images"):
        make_attack("user-data-canary", examples_per_user=1).run(target)
    with pytest.raises(ConfigError, match="no users to add canary users to"):
        make_attack("user-data-canary").run(Target(None, digits, "dp-gcl", {"epochs": 1}, Budget(target_epsilon=1.0)))
