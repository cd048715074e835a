"""Every attack end to end on digits at toy sizes: shapes, truth, variants, bounds, executor, plugins, CLI."""

import json
import pickle

import numpy as np
import pytest

from privaudit.attacks import DataRef, Target, make_attack
from privaudit.audit.cli import main
from privaudit.core.errors import ConfigError
from privaudit.defenses.base import Defense
from privaudit.defenses.supervised import Supervised, SupervisedConfig

TINY_CLASSIFIER = {"epochs": 10, "width": 8}
TINY_ENCODER = {"epochs": 2, "encoder": "mlp", "width": 8, "batch_size": 64}


class PicklingExecutor:
    """Sends every task through a pickle round trip, as a process pool or Ray would (our own objects only)."""

    def __init__(self):
        self.groups = []

    def map(self, fn, tasks):
        self.groups.append(len(tasks))
        fn = pickle.loads(pickle.dumps(fn))
        return [fn(pickle.loads(pickle.dumps(t))) for t in tasks]


class SequentialSupervised(Defense):
    """A plugin defense without ``fit_many``: shadow models must fall back to one ``fit`` each."""

    name = "test_attacks:SequentialSupervised"
    private = False
    Config = SupervisedConfig
    fits = 0

    def fit(self, data, budget, seed, *, device="cpu", progress=False):
        SequentialSupervised.fits += 1
        return Supervised(self.config_dict()).fit(data, budget, seed, device=device, progress=progress)


@pytest.fixture(scope="module")
def classifier(digits):
    return Target.train("supervised", digits, params=TINY_CLASSIFIER, seed=0, data_ref=DataRef("digits", 0))


@pytest.fixture(scope="module")
def encoder(digits):
    return Target.train("nonprivate", digits, params=TINY_ENCODER, seed=0, data_ref=DataRef("digits", 0))


def check_pool_result(result, digits):
    assert np.array_equal(result.membership, digits.membership.numpy())
    assert np.array_equal(result.index, digits.pool.index.numpy())
    summary = result.summary()
    assert 0 <= summary["auc"] <= 1 and set(summary["tpr_at_fpr"]) == {"0.001", "0.01", "0.1"}
    assert summary["eps_lower_bound"] >= 0 and summary["eps_lb_method"].startswith("one-run")
    assert result.bound.counts["m"] == len(digits.pool)
    return summary


def test_lira_on_a_classifier_trains_reference_models_through_the_executor(classifier, digits):
    executor = PicklingExecutor()
    attack = make_attack("lira", shadow_models=4, queries=2)
    result = attack.run(classifier, executor=executor)
    assert executor.groups == [1]  # four reference models, one stacked batch
    summary = check_pool_result(result, digits)
    assert result.variant == "online-fixed" and summary["config"]["statistic"] == "logit"
    assert set(result.variants) == {"online", "offline", "offline-fixed", "offline-reference",
                                    "offline-reference-fixed"}
    n_pool, n_population = len(digits.pool), 256
    assert result.counts == {"n_reference_models": 4, "n_references_trained": 4, "n_queries": 2, "n_in_per_candidate": 2,
                             "n_target_queries": 2 * (n_pool + n_population),
                             "n_reference_queries": 4 * 2 * (n_pool + n_population)}
    assert summary["auc"] > 0.51  # an overfit classifier leaks even to 4 reference models (0.53-0.58 over mask draws)
    classifier.cache.clear()  # train the references again
    again = make_attack("lira", shadow_models=4, queries=2).run(classifier)
    assert np.array_equal(again.scores, result.scores)  # same seed, same numbers


def test_lira_on_an_encoder_chooses_its_statistic_on_the_references(encoder, digits):
    result = make_attack("lira", shadow_models=4, queries=1, n_views=4).run(encoder)
    summary = check_pool_result(result, digits)
    power = result.extras["statistic_power"]
    assert set(power) == {"alignment", "contrastive", "rank", "partcrop", "combined"}
    assert summary["config"]["statistic"] == max(power, key=power.get) and result.counts["n_queries"] == 1
    assert result.variant == "offline-fixed" and "online-fixed" in result.variants  # encoders: the offline test
    fixed = make_attack("lira", shadow_models=4, queries=1, n_views=4, statistic="alignment").run(encoder)
    assert fixed.config["statistic"] == "alignment" and "statistic_power" not in fixed.extras


def test_rmia_shares_lira_references_and_keeps_both_modes(encoder, digits):
    executor = PicklingExecutor()
    encoder.cache.clear()
    lira = make_attack("lira", shadow_models=4, queries=1, n_views=4).run(encoder, executor=executor)
    rmia = make_attack("rmia", reference_models=4, queries=1, n_views=4).run(encoder, executor=executor)
    assert executor.groups == [1]  # the four references were trained once, for LiRA
    summary = check_pool_result(rmia, digits)
    power = rmia.extras["mode_power"]  # auto: the test with more leave-one-out power on the references
    assert rmia.variant == rmia.extras["mode"] == max(power, key=lambda m: (power[m], m == "online"))
    assert set(rmia.variants) | {rmia.variant} == {"online", "offline", "online-fraction", "offline-fraction"}
    assert summary["config"]["statistic"] == lira.config["statistic"]
    assert 0 < rmia.extras["a"] <= 1 and rmia.extras["a_fitted"]
    assert np.all((rmia.scores >= 0) & (rmia.scores < 1 + 1 / 512)) and rmia.counts["n_population"] == 256
    assert np.array_equal(np.floor(rmia.scores * 256 + 1e-9),
                          np.round(rmia.variants[f"{rmia.variant}-fraction"] * 256))


def test_paired_references_serve_every_even_count_from_one_training(classifier, digits):
    """trained_references: the attacks at 2 and 4 models share one training of 4 paired references; the
    2-model attack reads the first pair (each candidate IN for one, OUT for the other)."""
    executor = PicklingExecutor()
    classifier.cache.clear()
    two = make_attack("lira", shadow_models=2, trained_references=4, queries=1).run(classifier, executor=executor)
    four = make_attack("rmia", reference_models=4, trained_references=4, queries=1).run(classifier, executor=executor)
    assert executor.groups == [1]  # four references, trained once for both attacks
    assert two.counts["n_reference_models"] == 2 and two.counts["n_references_trained"] == 4
    (key,) = [k for k in classifier.cache if k[0] == "references"]
    assert key[1:3] == (4, "paired")
    keep = classifier.cache[key][2]
    assert np.array_equal(keep[0], ~keep[1]) and np.array_equal(keep[2], ~keep[3])
    assert four.counts["n_in_per_candidate"] == 2 and check_pool_result(four, digits)["auc"] > 0.5
    with pytest.raises(ConfigError, match="trained_references: 2 references cannot serve an attack that uses 4"):
        make_attack("lira", shadow_models=4, trained_references=2)  # refused when configured, before any training
    with pytest.raises(ConfigError, match="trained_references: must be an even number"):
        make_attack("rmia", trained_references=3)


# slow: three attack classifiers on a shadow encoder (about 25 s); EncoderMI also runs in the slow acceptance table
@pytest.mark.slow
def test_encodermi_trains_three_classifiers_on_a_shadow_encoder(encoder, digits):
    executor = PicklingExecutor()
    result = make_attack("encodermi", n_views=4).run(encoder, executor=executor)
    check_pool_result(result, digits)
    assert result.variant == "vector" and set(result.variants) == {"set", "threshold"}
    assert result.counts["n_similarities"] == 6 and result.counts["n_shadow_examples"] == len(digits.shadow)
    assert all(0 <= a <= 1 for a in result.extras["decision_accuracy"].values())
    assert np.all((result.scores >= 0) & (result.scores <= 1))


def test_shadow_attack_per_class_and_output_label(classifier, digits):
    result = make_attack("shadow", shadow_models=2).run(classifier)
    check_pool_result(result, digits)
    assert result.variant == "per-class" and set(result.variants) == {"output-label"}
    assert result.counts["n_shadow_records"] == len(digits.shadow)
    assert result.extras["output"] == "softmax"


def test_loss_attack_on_both_kinds_of_target(classifier, encoder, digits):
    ce = make_attack("loss").run(classifier)
    check_pool_result(ce, digits)
    assert ce.variant == "cross-entropy" and np.all(ce.scores <= 0)
    align = make_attack("loss", n_views=4).run(encoder)
    assert align.variant == "alignment" and np.all(np.abs(align.scores) <= 1 + 1e-9)


def test_one_run_canary_audit(classifier, digits):
    result = make_attack("canary", canaries=40).run(classifier)
    assert result.variant == "one-run/mislabel" and len(result.scores) == 40
    assert np.all(result.index < 0)  # canaries are not dataset rows
    assert result.bound.counts["r"] == 20 and result.counts["n_training_runs"] == 1
    assert result.summary()["auc"] > 0.6  # mislabelled canaries are memorised by an overfit model


def test_multi_run_canary_audit_and_plugin_fallback(digits):
    SequentialSupervised.fits = 0
    target = Target(None, digits, "test_attacks:SequentialSupervised", {**TINY_CLASSIFIER, "epochs": 2}, seed=1)
    result = make_attack("canary", mode="multi-run", runs=4, kind="mislabel").run(target)
    assert SequentialSupervised.fits == 8  # no fit_many: one fit per run
    assert result.membership.tolist() == [True, False] * 4
    assert result.bound.method == "clopper-pearson" and "separate half" in result.bound.label
    assert result.bound.counts["runs_in"] == 2


def test_attack_settings_are_validated():
    with pytest.raises(ConfigError, match="attack: unknown value 'mia'; accepted: loss, shadow"):
        make_attack("mia")
    with pytest.raises(ConfigError, match="shadow_models: must be an even number >= 2"):
        make_attack("lira", shadow_models=3)
    with pytest.raises(ConfigError, match="unknown parameter 'views'; accepted:"):
        make_attack("encodermi", views=3)
    with pytest.raises(ConfigError, match="variant: unknown value 'best'"):
        make_attack("lira", variant="best")


def test_attack_cli_json(capsys, tmp_path):
    code = main(["attack", "--defense", "supervised", "--attack", "loss", "--param", "epochs=3", "--param", "width=8",
                 "--json", "--out", str(tmp_path / "r")])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {"auc", "tpr_at_fpr", "eps_lower_bound", "eps_lb_method", "n_members", "n_nonmembers"} <= set(out)
    assert set(out["tpr_at_fpr"]) == {"0.001", "0.01", "0.1"} and out["n_members"] + out["n_nonmembers"] == 719
    assert (tmp_path / "r" / "scores.npz").exists()


@pytest.mark.parametrize("argv,message", [
    (["attack", "--attack", "nope"], "attack: unknown value 'nope'"),
    (["attack", "--attack", "loss", "--shadow-models", "4"], "attack 'loss' trains no shadow models"),
    (["attack", "--defense", "supervised", "--target-epsilon", "1"], "defense 'supervised' is not private"),
    (["attack", "--attack", "lira", "--attack-param", "shadow_models=5"], "shadow_models: must be an even number"),
    (["attack", "--shadow-models", "5"], "reference_models: must be an even number"),  # the default attack: RMIA
    (["attack", "--attack-param", "gamma=0"], "gamma: must be > 0"),
])
def test_attack_cli_bad_input(capsys, argv, message):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err
