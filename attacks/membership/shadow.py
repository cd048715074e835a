"""Shadow-model membership inference (Shokri, Stronati, Song & Shmatikov 2017, Sec. IV) and the
Additive Logistic Mechanism paper's variant of it (App. A.1 and B).

k shadow models are trained with the target's own defense and hyper-parameters on data from the
attacker's shadow split: with ``disjoint`` (the default), the split is cut into k disjoint chunks and
each shadow model trains on a random half of its chunk; otherwise each trains on a random half of
the whole split (Shokri et al. allow overlapping shadow training sets; the chunks of a small split
are much smaller than the target's training set). Each shadow model is queried on its in and out
examples, giving labelled (output, label, in/out) records, and:

* **per-class** (Shokri et al.): one attack model per class c, trained on the output vectors of the
  records with label c (here a small scikit-learn MLP on standardised outputs); a class whose shadow
  records are all in or all out gets a constant score;
* **output-label** (ALM paper, App. A.1/B): one binary MLP with 5 ReLU hidden layers, learning rate
  0.001, on the output-label pair (the output vector concatenated with the one-hot label). The paper
  does not give the layer width; ``alm_width`` (default 64) sets it.

The "output" is the softmax vector when the target releases a classifier, else its L2-normalised
embedding (:class:`privaudit.attacks.membership.statistics.Outputs`). ART's black-box attack trains a single model
rather than one per class (ART issue #2155); the output-label variant is that design, kept under its own name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privaudit.attacks.base import Attack, AttackConfig, Target, pool_membership
from privaudit.attacks.executor import Executor
from privaudit.attacks.result import AttackResult
from privaudit.attacks.membership.shadow_models import TrainJob, train_models
from privaudit.attacks.membership.statistics import Outputs
from privaudit.core.errors import ConfigError, one_of
from privaudit.defenses.training.seeding import numpy_rng

VARIANTS = ("per-class", "output-label")


def fit_mlp(x: np.ndarray, y: np.ndarray, hidden: tuple[int, ...], seed: int, max_iter: int = 500):
    """A scikit-learn MLP (Adam, learning rate 1e-3) on standardised inputs; non-convergence is tolerated."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=hidden, learning_rate_init=1e-3,
                                                          max_iter=max_iter, random_state=seed % (2 ** 32)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(x, y)


def per_class_scores(train_out: np.ndarray, train_y: np.ndarray, train_in: np.ndarray, test_out: np.ndarray,
                     test_y: np.ndarray, hidden: tuple[int, ...], seed: int) -> tuple[np.ndarray, list[int]]:
    """Shokri et al.: one attack model per class; returns member probabilities and the constant classes."""
    scores = np.full(test_y.shape, 0.5)
    constant = []
    for c in np.unique(test_y):
        rows = train_y == c
        target_rows = test_y == c
        labels = train_in[rows]
        if labels.size == 0 or labels.all() or not labels.any():
            scores[target_rows] = labels.mean() if labels.size else 0.5
            constant.append(int(c))
            continue
        model = fit_mlp(train_out[rows], labels, hidden, seed + int(c))
        scores[target_rows] = model.predict_proba(test_out[target_rows])[:, 1]
    return scores, constant


def output_label_scores(train_out: np.ndarray, train_y: np.ndarray, train_in: np.ndarray, test_out: np.ndarray,
                        test_y: np.ndarray, num_classes: int, width: int, layers: int, seed: int) -> np.ndarray:
    """ALM paper: one MLP (``layers`` ReLU hidden layers) on [output, one-hot(label)]."""
    def features(out: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.concatenate([out, np.eye(num_classes)[y]], axis=1)

    model = fit_mlp(features(train_out, train_y), train_in, (width,) * layers, seed)
    return model.predict_proba(features(test_out, test_y))[:, 1]


@dataclass(frozen=True)
class ShadowConfig(AttackConfig):
    shadow_models: int = 4
    disjoint: bool = True
    variant: str = "per-class"
    hidden: tuple[int, ...] = (64,)
    alm_width: int = 64
    alm_layers: int = 5
    max_stack: int = 16

    def validate(self) -> None:
        super().validate()
        if self.shadow_models < 1:
            raise ConfigError(f"shadow_models: must be >= 1, got {self.shadow_models!r}")
        if self.variant not in VARIANTS:
            raise one_of("variant", self.variant, VARIANTS)
        if self.alm_width < 1 or self.alm_layers < 1:
            raise ConfigError("alm_width and alm_layers must be >= 1")


class ShadowModelAttack(Attack):
    """Shokri et al.'s shadow-model attack, per-class and output-label (ALM) attack models."""

    name = "shadow"
    Config = ShadowConfig

    def run(self, target: Target, *, executor: Executor | None = None, progress: bool = False) -> AttackResult:
        self.check_target(target)
        cfg = self.config
        data = target.data
        rng = numpy_rng(target.seed, "attack", "shadow", "split")
        n = len(data.shadow)
        if cfg.disjoint:
            chunks = np.array_split(rng.permutation(n), cfg.shadow_models)
        else:
            chunks = [np.arange(n) for _ in range(cfg.shadow_models)]
        if min(len(c) for c in chunks) < 4:
            raise ConfigError(f"shadow: {n} shadow examples are too few for {cfg.shadow_models} disjoint shadow models")
        masks = [rng.permutation(len(c)) < len(c) // 2 for c in chunks]
        probe = Outputs()
        jobs = [TrainJob(target.defense_ref, target.budget, target.data_source, target.derive_seed("shadow", k),
                         masks[k], pool_rows=np.sort(chunks[k]), probe=probe, device=target.device)
                for k in range(cfg.shadow_models)]
        outputs = train_models(jobs, executor, max_stack=cfg.max_stack)
        train_out = np.concatenate(outputs)
        train_y = np.concatenate([data.shadow.y.numpy()[np.sort(c)] for c in chunks])
        train_in = np.concatenate(masks)
        test_out = probe(target.trained, data.pool, data.info)
        test_y = data.pool.y.numpy()
        seed = target.derive_seed("shadow", "attack-models")
        per_class, constant = per_class_scores(train_out, train_y, train_in, test_out, test_y, cfg.hidden, seed)
        variants = {
            "per-class": per_class,
            "output-label": output_label_scores(train_out, train_y, train_in, test_out, test_y, data.info.num_classes,
                                                cfg.alm_width, cfg.alm_layers, seed),
        }
        membership, index = pool_membership(target)
        extras = {"decision_accuracy": {k: float(np.mean((v >= 0.5) == membership)) for k, v in variants.items()},
                  "constant_classes": constant,
                  "output": "softmax" if target.trained.classifier is not None else "embedding"}
        scores = variants.pop(cfg.variant)
        return AttackResult(
            attack=self.name, variant=cfg.variant, scores=scores, membership=membership, index=index,
            config=self.config_dict(),
            counts={"n_shadow_models": cfg.shadow_models, "n_shadow_records": int(train_in.size),
                    "n_shadow_members": int(train_in.sum())},
            variants=variants, bound=self.one_run(scores, membership, target), extras=extras)
