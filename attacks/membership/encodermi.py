"""EncoderMI (Liu, Jia, Qu & Gong 2021, "EncoderMI: Membership Inference against Pre-trained Encoders
in Contrastive Learning", Sec. 4): membership inference from augmented-view alignment.

An encoder pretrained with a contrastive objective maps augmented views of its *training* images
closer together than views of unseen images. For a query x the attacker draws n views from the
pretraining augmentation family, encodes them and computes the n(n-1)/2 pairwise cosine
similarities (:class:`privaudit.attacks.membership.statistics.ViewSimilarities`). Three inference classifiers (Sec.
4.2):

* **vector-based**: the similarities sorted into a vector, classified by an MLP;
* **set-based**: the similarities as a set, classified by a permutation-invariant set network
  (DeepSets, Zaheer et al. 2017: rho(mean_i phi(s_i)));
* **threshold-based**: the mean similarity against a threshold.

All three are trained on a *shadow encoder* the attacker pretrains (with the target's defense and
hyper-parameters) on a random half of its own shadow data, the other half being shadow non-members
(Sec. 4.3). Scores on the target are the classifiers' member probabilities (vector, set) and the
mean similarity (threshold); the decision accuracy at each classifier's own rule (p >= 1/2, or the
shadow-tuned threshold) is reported separately from the threshold-free metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn

from privaudit.attacks.base import Attack, AttackConfig, Target, pool_membership
from privaudit.attacks.executor import Executor
from privaudit.attacks.result import AttackResult
from privaudit.attacks.membership.shadow_models import TrainJob, train_models
from privaudit.attacks.membership.statistics import SPACES, ViewSimilarities
from privaudit.core.errors import ConfigError, one_of
from privaudit.defenses.training.seeding import derive_seed, numpy_rng

VARIANTS = ("vector", "set", "threshold")


def fit_vector_classifier(x: np.ndarray, y: np.ndarray, hidden: tuple[int, ...], seed: int):
    """Vector-based inference: standardised sorted similarities into a scikit-learn MLP."""
    from privaudit.attacks.membership.shadow import fit_mlp

    return fit_mlp(x, y, hidden, seed)


class SetClassifier(nn.Module):
    """DeepSets: rho(mean_i phi(s_i)) over a set of scalar similarities (permutation invariant)."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.rho = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, s: torch.Tensor) -> torch.Tensor:  # (N, P) -> (N,) logits
        return self.rho(self.phi(s.unsqueeze(-1)).mean(dim=1)).squeeze(-1)


def fit_set_classifier(x: np.ndarray, y: np.ndarray, seed: int, *, width: int = 16, steps: int = 300,
                       lr: float = 1e-2) -> SetClassifier:
    """Train the set classifier full-batch with Adam on binary cross-entropy (seeded init)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "set-classifier"))
        model = SetClassifier(width)
    xt = torch.as_tensor(x, dtype=torch.float32)
    yt = torch.as_tensor(y, dtype=torch.float32)
    # Centre by the training mean so the scalar inputs are on a unit-free scale.
    model.register_buffer("shift", xt.mean())
    model.register_buffer("scale", xt.std().clamp(min=1e-6))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.BCEWithLogitsLoss()
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model((xt - model.shift) / model.scale), yt)
        loss.backward()
        opt.step()
    return model.eval()


def set_scores(model: SetClassifier, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        xt = torch.as_tensor(x, dtype=torch.float32)
        return torch.sigmoid(model((xt - model.shift) / model.scale)).double().numpy()


def best_threshold(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """The threshold t (predict member iff score >= t) maximising accuracy on (scores, labels), and it."""
    candidates = np.unique(np.concatenate([scores, [np.inf]]))
    acc = np.array([np.mean((scores >= t) == labels) for t in candidates])
    i = int(np.argmax(acc))
    return float(candidates[i]), float(acc[i])


@dataclass(frozen=True)
class EncoderMIConfig(AttackConfig):
    """EncoderMI settings: views per query, shadow encoders, which classifier is primary."""

    n_views: int = 10
    shadow_models: int = 1
    variant: str = "vector"
    space: str = "features"
    hidden: tuple[int, ...] = (64, 32)
    max_stack: int = 16

    def validate(self) -> None:
        super().validate()
        if self.n_views < 2:
            raise ConfigError(f"n_views: must be >= 2, got {self.n_views!r}")
        if self.shadow_models < 1:
            raise ConfigError(f"shadow_models: must be >= 1, got {self.shadow_models!r}")
        if self.variant not in VARIANTS:
            raise one_of("variant", self.variant, VARIANTS)
        if self.space not in SPACES:
            raise one_of("space", self.space, SPACES)


class EncoderMI(Attack):
    """Vector-, set- and threshold-based EncoderMI with classifiers trained on shadow encoders."""

    name = "encodermi"
    Config = EncoderMIConfig

    def run(self, target: Target, *, executor: Executor | None = None, progress: bool = False) -> AttackResult:
        self.check_target(target)
        cfg = self.config
        data = target.data
        n_shadow = len(data.shadow)
        if n_shadow < 4:
            raise ConfigError(f"encodermi: the shadow split has {n_shadow} examples; needs at least 4")
        probe = ViewSimilarities(cfg.n_views, target.derive_seed("encodermi", "views"), space=cfg.space)
        rng = numpy_rng(target.seed, "attack", "encodermi", "masks")
        rows = np.arange(n_shadow)
        masks = [rng.permutation(n_shadow) < n_shadow // 2 for _ in range(cfg.shadow_models)]
        jobs = [TrainJob(target.defense_ref, target.budget, target.data_source, target.derive_seed("encodermi", k),
                         masks[k], pool_rows=rows, probe=probe, device=target.device)
                for k in range(cfg.shadow_models)]
        shadow_feats = train_models(jobs, executor, max_stack=cfg.max_stack)
        x_train = np.concatenate([f[:, 0, :] for f in shadow_feats])
        y_train = np.concatenate(masks).astype(int)
        x_target = probe(target.trained, data.pool, data.info)[:, 0, :]

        seed = target.derive_seed("encodermi", "classifiers")
        vector = fit_vector_classifier(x_train, y_train, cfg.hidden, seed)
        set_model = fit_set_classifier(x_train, y_train, seed)
        threshold, shadow_acc = best_threshold(x_train.mean(axis=1), y_train.astype(bool))
        variants = {
            "vector": vector.predict_proba(x_target)[:, 1],
            "set": set_scores(set_model, x_target),
            "threshold": x_target.mean(axis=1),
        }
        membership, index = pool_membership(target)
        decisions = {"vector": variants["vector"] >= 0.5, "set": variants["set"] >= 0.5,
                     "threshold": variants["threshold"] >= threshold}
        extras = {
            "threshold": threshold,
            "shadow_threshold_accuracy": shadow_acc,
            "decision_accuracy": {k: float(np.mean(d == membership)) for k, d in decisions.items()},
            "shadow_train_accuracy": {"vector": float(vector.score(x_train, y_train))},
        }
        scores = variants.pop(cfg.variant)
        return AttackResult(
            attack=self.name, variant=cfg.variant, scores=scores, membership=membership, index=index,
            config=self.config_dict(),
            counts={"n_shadow_models": cfg.shadow_models, "n_shadow_examples": int(y_train.size),
                    "n_views": cfg.n_views, "n_similarities": int(x_target.shape[1])},
            variants=variants, bound=self.one_run(scores, membership, target), extras=extras)
