"""The audited target's training length: the usable point of a validation curve on public data."""

from __future__ import annotations

import json

import pytest

from privaudit.audit.cli import main
from privaudit.core.datasets import load_dataset
from privaudit.core.errors import ConfigError
from privaudit.defenses.base import Budget
from privaudit.defenses.training.training_length import public_halves, usable_epochs

TINY = {"encoder": "mlp", "width": 8, "batch_size": 64}


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", seed=0)


def test_public_halves_split_the_public_data_only(digits):
    halves = public_halves(digits, 0)
    assert len(halves.pool) == len(digits.public) and int(halves.membership.sum()) == len(digits.public) // 2
    assert set(halves.pool.index.tolist()) == set(digits.public.index.tolist())
    assert not set(halves.pool.index.tolist()) & set(digits.pool.index.tolist())


def test_usable_point_is_the_end_of_the_plateau(digits):
    length = usable_epochs("nonprivate", TINY, digits, Budget(), 0, grid=(1, 4, 16), tolerance=0.02)
    assert sorted(length.curve) == [1, 4, 16] and all(0 <= a <= 1 for a in length.curve.values())
    best = max(length.curve.values())
    assert length.curve[length.epochs] >= best - 0.02
    assert all(length.curve[e] < best - 0.02 for e in length.curve if e > length.epochs)
    assert length.to_dict()["curve"].keys() == {"1", "4", "16"} and "within 0.02" in length.rule


@pytest.mark.parametrize("kwargs,field", [({"grid": (0, 2)}, "grid"), ({"tolerance": 1.5}, "tolerance")])
def test_bad_settings(digits, kwargs, field):
    with pytest.raises(ConfigError, match=field):
        usable_epochs("nonprivate", TINY, digits, Budget(), 0, **kwargs)


def test_attack_rejects_a_bad_epochs_value(capsys):
    assert main(["attack", "--epochs", "many"]) == 2
    assert "--epochs: a positive integer or 'auto', got 'many'" in capsys.readouterr().err


def test_attack_reports_utility_and_queries(capsys):
    code = main(["attack", "--attack", "rmia", "--epochs", "2", "--shadow-models", "2", "--json",
                 "--param", "encoder=mlp", "--param", "width=8", "--attack-param", "queries=1",
                 "--attack-param", "n_views=3"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["training_length"] is None and out["config"]["reference_models"] == 2
    assert 0 < out["utility"]["knn_accuracy"] <= 1 and out["counts"]["n_reference_queries"] == 2 * out["counts"]["n_target_queries"]
