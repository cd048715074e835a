"""Non-private contrastive training: it learns, it is deterministic, and it round-trips to disk."""

import pytest
import torch

from privaudit.defenses import Budget, Trained, make_defense
from privaudit.defenses.evaluation.evaluation import encoder_utility
from privaudit.defenses.nn.model import build_model
from privaudit.core.errors import ConfigError


def test_simclr_beats_random_init_on_digits(digits):
    trained = make_defense("nonprivate", epochs=30).fit(digits, Budget(), seed=0, progress=False)
    ours = encoder_utility(trained.model.represent, digits.train.x, digits.train.y, digits.test.x, digits.test.y)
    rand = encoder_utility(build_model(trained.spec, seed=0).represent, digits.train.x, digits.train.y,
                           digits.test.x, digits.test.y)
    assert ours["knn_accuracy"] > rand["knn_accuracy"] + 0.05
    assert trained.history["loss"][-1] < trained.history["loss"][0]
    assert not trained.claim.is_private


def test_barlow_twins_trains(digits):
    trained = make_defense("nonprivate", loss="barlow", epochs=10).fit(digits, Budget(), seed=0, progress=False)
    assert trained.history["loss"][-1] < 0.5 * trained.history["loss"][0]
    assert not trained.spec.normalize


def test_training_is_deterministic(digits):
    runs = [make_defense("nonprivate", epochs=2).fit(digits, Budget(), seed=7, progress=False) for _ in range(2)]
    for (_, a), (_, b) in zip(runs[0].model.state_dict().items(), runs[1].model.state_dict().items()):
        assert torch.equal(a, b)


def test_save_and_load_round_trip(digits, tmp_path):
    trained = make_defense("nonprivate", epochs=1).fit(digits, Budget(), seed=0, progress=False)
    trained.save(tmp_path / "ckpt")
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["model.safetensors", "trained.json"]
    loaded = Trained.load(tmp_path / "ckpt")
    assert torch.allclose(loaded.features(digits.test.x), trained.features(digits.test.x))
    assert loaded.claim == trained.claim and loaded.config == trained.config


def test_defense_parameters_are_validated():
    with pytest.raises(ConfigError, match="unknown parameter 'epoch'; accepted: encoder, width"):
        make_defense("nonprivate", epoch=3)
    with pytest.raises(ConfigError, match="nonprivate.epochs: expected an integer"):
        make_defense("nonprivate", epochs=2.5)
    with pytest.raises(ConfigError, match="encoder: unknown value 'vit'"):
        make_defense("nonprivate", encoder="vit")
    with pytest.raises(ConfigError, match="target_epsilon: must be > 0"):
        Budget(target_epsilon=-1)
