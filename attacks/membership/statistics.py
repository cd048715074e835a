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

from privaudit.attacks.membership.queries import QuerySet
from privaudit.core.datasets import DatasetInfo, Split
from privaudit.core.errors import ConfigError, one_of
from privaudit.defenses.training.augment import augmentation_for
from privaudit.defenses.base import Trained
from privaudit.defenses.training.seeding import torch_generator

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


# -- statistics from the encoder's own training objective (issue 19) -------------------------------------
#
# Every encoder statistic below is a probability-like p(x | theta) in (0, 1) reported on LiRA's logit scale,
# phi = log(p / (1 - p)): LiRA fits Gaussians to phi, RMIA reads p = sigmoid(phi). The view alignment above is
# the case p = (1 + s̄) / 2 (its 2 atanh(s̄) is exactly logit(p)), and the classifier's phi is the logit of the
# true-class probability, so one convention serves classifiers and encoders alike.

ENCODER_STATISTICS = ("alignment", "contrastive", "rank", "partcrop", "combined")
_P_CLIP = 1e-12


def logit(p: np.ndarray | torch.Tensor, clip: float = _P_CLIP) -> np.ndarray:
    """log(p / (1 - p)) with p clipped into [clip, 1 - clip]."""
    p = np.clip(np.asarray(p, dtype=np.float64), clip, 1 - clip)
    return np.log(p) - np.log1p(-p)


def contrastive_probability(views: torch.Tensor, anchors: torch.Tensor, temperature: float) -> torch.Tensor:
    """mean_{i != j} p_ij, p_ij = exp(e_i.e_j / tau) / (exp(e_i.e_j / tau) + sum_m exp(e_i.a_m / tau)).

    ``views`` (N, V, D) and ``anchors`` (M, D), both L2-normalised. p_ij is the probability that the
    InfoNCE / NT-Xent objective (Oord et al. 2018; Chen et al. 2020, Eq. 1) assigns to the candidate's
    own view j as the positive of view i when the negatives are a fixed population batch; its mean over
    the V(V-1) ordered pairs is exp(-loss) in the probability domain. A model trained on x pulls its views
    together and away from the population, so p is larger for members.
    """
    pos = views @ views.transpose(1, 2) / temperature  # (N, V, V)
    neg = torch.logsumexp(views @ anchors.T / temperature, dim=2)  # (N, V)
    log_p = pos - torch.logaddexp(pos, neg.unsqueeze(2))
    v = views.shape[1]
    off = ~torch.eye(v, dtype=torch.bool)
    return log_p.exp()[:, off].mean(dim=1)


def rank_probability(views: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """mean_{i != j} (1 - r_ij / (M + 1)), r_ij = #{m : e_i.a_m >= e_i.e_j}.

    The nearest-neighbour rank of the candidate's own view j among the population anchors, seen from
    view i: 0 when every anchor is farther than the candidate's other view (the retrieval the encoder
    was trained to do), M when every anchor is closer. A rank statistic is invariant to any monotone
    rescaling of similarities, so it resists the calibration differences between models.
    """
    pos = views @ views.transpose(1, 2)  # (N, V, V)
    neg = views @ anchors.T  # (N, V, M)
    ranks = (neg.unsqueeze(2) >= pos.unsqueeze(3)).sum(dim=3).double()  # (N, V, V)
    v = views.shape[1]
    off = ~torch.eye(v, dtype=torch.bool)
    return (1.0 - ranks / (anchors.shape[0] + 1))[:, off].mean(dim=1)


@dataclass(frozen=True)
class EncoderStatistics:
    """Every encoder statistic of :data:`ENCODER_STATISTICS` under each query: (S, N, Q) on the logit scale.

    * ``alignment``: the mean pairwise cosine s̄ of ``n_views`` augmented views, p = (1 + s̄) / 2
      (EncoderMI's signal, Liu et al. 2021; :class:`AlignmentStatistic`);
    * ``contrastive``: :func:`contrastive_probability` of the views against ``anchors`` (the candidate's
      InfoNCE of its views against a fixed population batch, at ``temperature``);
    * ``rank``: :func:`rank_probability`, the nearest-neighbour rank of the candidate's own views among
      the population anchors;
    * ``partcrop``: the part-aware crop response of PartCrop (Zhu et al. 2024, "A Unified Membership
      Inference Method for Visual Self-supervised Encoder via Part-aware Capability"): ``n_crops`` small
      random crops (area fraction in ``crop_scale``) resized to the image size, and the mean cosine c̄
      between each crop's representation and the whole query image's, p = (1 + c̄) / 2. Contrastive
      training with crop augmentations teaches the encoder to map the parts of the images it trained
      on near the whole; ours uses the global representation of each part (PartCrop reads the response
      of part features against the image's feature map, which needs a spatial encoder output);
    * ``combined``: the mean of the alignment, contrastive and rank logits, i.e. p with odds the geometric
      mean of the three statistics' odds: three views of the same memorisation whose noise is partly
      independent (the views, the anchors, the ranks), so their average is steadier than each.

    The views, crops and anchors are fixed by ``seed`` (identical for the target and every reference
    model), so a statistic's variation across models reflects training alone. ``anchors`` are images of
    the attacker's population data (never the candidates).
    """

    anchors: torch.Tensor
    n_views: int = 8
    seed: int = 0
    queries: QuerySet = field(default_factory=QuerySet)
    space: str = "embeddings"
    temperature: float = 0.5
    n_crops: int = 4
    crop_scale: tuple[float, float] = (0.15, 0.35)

    def __post_init__(self) -> None:
        if self.n_views < 2:
            raise ConfigError(f"n_views: must be >= 2, got {self.n_views!r}")
        if self.space not in SPACES:
            raise one_of("space", self.space, SPACES)
        if self.temperature <= 0:
            raise ConfigError(f"temperature: must be > 0, got {self.temperature!r}")
        if self.n_crops < 1:
            raise ConfigError(f"n_crops: must be >= 1, got {self.n_crops!r}")
        if len(self.anchors) < 1:
            raise ConfigError("anchors: the contrastive and rank statistics need at least one population image")

    def _encode(self, trained: Trained, x: torch.Tensor) -> torch.Tensor:
        out = trained.features(x) if self.space == "features" else trained.embeddings(x)
        return F.normalize(out.double(), dim=-1)

    def __call__(self, trained: Trained, split: Split, info: DatasetInfo) -> np.ndarray:
        from privaudit.defenses.training.augment import _affine, random_resized_crop_theta

        views = ViewSimilarities(self.n_views, self.seed, self.queries, self.space).views(split, info)
        q, n = views.shape[:2]
        e = self._encode(trained, views.reshape(-1, *views.shape[3:])).view(q * n, self.n_views, -1)
        anchors = self._encode(trained, self.anchors)
        align = pairwise_cosines(e).mean(dim=1)
        contrastive = contrastive_probability(e, anchors, self.temperature)
        rank = rank_probability(e, anchors)

        queried = self.queries.apply(split.x).reshape(q * n, *split.x.shape[1:])
        gen = torch_generator(self.seed, "partcrop")
        theta = random_resized_crop_theta(q * n * self.n_crops, self.crop_scale, (3 / 4, 4 / 3), 0.0, gen)
        crops = _affine(queried.repeat_interleave(self.n_crops, dim=0), theta, "zeros")
        whole = self._encode(trained, queried)
        parts = self._encode(trained, crops).view(q * n, self.n_crops, -1)
        partcrop = (parts * whole.unsqueeze(1)).sum(dim=2).mean(dim=1)

        probs = torch.stack([(1 + align) / 2, contrastive, rank, (1 + partcrop) / 2])  # (S - 1, Q*N)
        phi = logit(probs.view(len(ENCODER_STATISTICS) - 1, q, n).transpose(1, 2).numpy())
        return np.concatenate([phi, phi[:3].mean(axis=0, keepdims=True)])


@dataclass(frozen=True)
class WithPopulation:
    """``probe`` applied to the candidates and then to fixed population examples ``population``, rows
    concatenated along the example axis (axis 1 of (S, N, Q) outputs, else axis 0).

    RMIA compares each candidate with population samples z scored by the same models; one probe call per
    model returns both, so remote workers send back numbers, not models.
    """

    probe: object
    population: Split

    def __call__(self, trained: Trained, split: Split, info: DatasetInfo) -> np.ndarray:
        a = np.asarray(self.probe(trained, split, info))
        b = np.asarray(self.probe(trained, self.population, info))
        axis = 1 if a.ndim == 3 else 0  # (S, N, Q) outputs stack statistics first
        return np.concatenate([a, b], axis=axis)
