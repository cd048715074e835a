"""Per-example statistics the attacks read from a trained model, and the probes that compute them.

A *probe* is a small picklable object ``probe(trained, split, info) -> np.ndarray`` with one row per
example of ``split``. Shadow/reference-model jobs carry a probe so that a remote worker returns a few
numbers per example instead of a model; the same probe applied to the target gives the target's
statistics.

Statistics:

* classifier (LiRA, Carlini et al. 2022, Sec. IV-C / Eq. 4 of the reference code):
  phi = z_y - logsumexp_{j != y} z_j = log(p_y / (1 - p_y)), computed stably from the logits;
* per-example cross-entropy (Yeom et al. 2018's loss attack);
* augmented-view similarities (EncoderMI, Liu et al. 2021, Sec. 4.1): n views of x from the
  pretraining augmentation family, encoded, all n(n-1)/2 pairwise cosine similarities, sorted;
* the encoder statistic used by LiRA (ours; EncoderMI's alignment signal made Gaussian-friendly):
  phi_enc = 2 atanh(s̄) = log((1 + s̄) / (1 - s̄)), where s̄ is the mean pairwise cosine similarity of
  the n views. s̄ lies in [-1, 1] and piles up near 1 for memorised examples; 2 atanh is the logit of
  (1 + s̄) / 2, the analogue of LiRA's logit scaling of a probability, and is Fisher's
  variance-stabilising z-transform of a correlation, under which averages of cosines are close to
  Gaussian. The views are drawn from one fixed seed, identical for the target and every shadow
  model, so the statistic's variation across models reflects training, not augmentation noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from attacks.queries import QuerySet
from core.datasets import DatasetInfo, Split
from core.errors import ConfigError, one_of
from defenses.augment import augmentation_for
from defenses.base import Trained
from defenses.seeding import torch_generator

SPACES = ("features", "embeddings")


def logit_phi(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """phi = z_y - logsumexp_{j != y} z_j for logits (N, C) and labels (N,)."""
    logits = logits.double()
    z_y = logits.gather(1, labels.view(-1, 1)).squeeze(1)
    others = logits.scatter(1, labels.view(-1, 1), float("-inf"))
    return z_y - torch.logsumexp(others, dim=1)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-example cross-entropy -log softmax(z)_y."""
    return F.cross_entropy(logits.double(), labels, reduction="none")


def pairwise_cosines(features: torch.Tensor) -> torch.Tensor:
    """All n(n-1)/2 pairwise cosine similarities of each example's n views: (N, n, D) -> (N, n(n-1)/2)."""
    z = F.normalize(features.double(), dim=-1)
    sim = z @ z.transpose(1, 2)
    i, j = torch.triu_indices(z.shape[1], z.shape[1], offset=1)
    return sim[:, i, j]


def fisher_z(mean_similarity: np.ndarray | torch.Tensor, clip: float = 1e-6):
    """2 atanh(s) = log((1 + s) / (1 - s)), with s clipped into (-1, 1)."""
    s = np.clip(np.asarray(mean_similarity, dtype=np.float64), -1 + clip, 1 - clip)
    return 2.0 * np.arctanh(s)


def require_classifier(trained: Trained, what: str) -> None:
    if trained.classifier is None:
        raise ConfigError(f"{what}: defense {trained.defense!r} releases no classifier; "
                          "use an encoder statistic (statistic=alignment)")


@torch.no_grad()
def _logits(trained: Trained, x: torch.Tensor) -> torch.Tensor:
    out = trained.logits(x)
    assert out is not None
    return out


@dataclass(frozen=True)
class LogitStatistic:
    """LiRA's classifier statistic phi under each query: (N, Q)."""

    queries: QuerySet = field(default_factory=QuerySet)

    def __call__(self, trained: Trained, split: Split, info: DatasetInfo) -> np.ndarray:
        require_classifier(trained, "logit statistic")
        q = self.queries.apply(split.x)  # (Q, N, C, H, W)
        logits = _logits(trained, q.reshape(-1, *q.shape[2:])).view(q.shape[0], q.shape[1], -1)
        return torch.stack([logit_phi(l, split.y) for l in logits], dim=1).numpy()


@dataclass(frozen=True)
class LossStatistic:
    """Per-example cross-entropy of the released classifier: (N,)."""

    def __call__(self, trained: Trained, split: Split, info: DatasetInfo) -> np.ndarray:
        require_classifier(trained, "loss statistic")
        return cross_entropy(_logits(trained, split.x), split.y).numpy()


@dataclass(frozen=True)
class ViewSimilarities:
    """Sorted pairwise cosine similarities of ``n_views`` augmented views under each query: (N, Q, P).

    Views come from the dataset's pretraining augmentation family (or ``augmentation``), drawn from
    the stream ``(seed, "views")``: the same views for every model probed with the same seed.
    ``space``: ``features`` (the encoder's representation h, what EncoderMI queries) or
    ``embeddings`` (the projection z the contrastive loss saw).
    """

    n_views: int = 10
    seed: int = 0
    queries: QuerySet = field(default_factory=QuerySet)
    space: str = "features"
    augmentation: str | None = None

    def __post_init__(self) -> None:
        if self.n_views < 2:
            raise ConfigError(f"n_views: must be >= 2, got {self.n_views!r}")
        if self.space not in SPACES:
            raise one_of("space", self.space, SPACES)

    def views(self, split: Split, info: DatasetInfo) -> torch.Tensor:
        """The augmented views (Q, N, n_views, C, H, W)."""
        augment = augmentation_for(info, self.augmentation)
        gen = torch_generator(self.seed, "views")
        q = self.queries.apply(split.x)
        flat = q.reshape(-1, *q.shape[2:]).repeat_interleave(self.n_views, dim=0)
        return augment(flat, gen).view(q.shape[0], q.shape[1], self.n_views, *q.shape[2:])

    def __call__(self, trained: Trained, split: Split, info: DatasetInfo) -> np.ndarray:
        v = self.views(split, info)
        flat = v.reshape(-1, *v.shape[3:])
        feats = trained.features(flat) if self.space == "features" else trained.embeddings(flat)
        feats = feats.view(v.shape[0] * v.shape[1], self.n_views, -1)
        sims = pairwise_cosines(feats).sort(dim=1).values
        return sims.view(v.shape[0], v.shape[1], -1).transpose(0, 1).numpy()


@dataclass(frozen=True)
class AlignmentStatistic:
    """The encoder statistic phi_enc = 2 atanh(mean pairwise view similarity) under each query: (N, Q)."""

    views: ViewSimilarities = field(default_factory=ViewSimilarities)

    def __call__(self, trained: Trained, split: Split, info: DatasetInfo) -> np.ndarray:
        return fisher_z(self.views(trained, split, info).mean(axis=2))


@dataclass(frozen=True)
class Outputs:
    """What a black-box query returns: softmax probabilities if the model releases a classifier,
    else the L2-normalised embedding z (the ALM paper's "output" of the attacked model)."""

    def __call__(self, trained: Trained, split: Split, info: DatasetInfo) -> np.ndarray:
        if trained.classifier is not None:
            return torch.softmax(_logits(trained, split.x).double(), dim=1).numpy()
        return F.normalize(trained.embeddings(split.x).double(), dim=1).numpy()
