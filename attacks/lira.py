"""LiRA, the likelihood-ratio attack (Carlini et al. 2022, "Membership Inference Attacks From First
Principles", Sec. IV, Algorithm 1), online and offline, with per-example or fixed variance.

K reference models are trained with the target's own defense on random halves of the audit pool
(every candidate IN for exactly K/2 of them; :func:`attacks.shadow_models.balanced_masks`). For each
candidate and query, the statistic phi of the IN and OUT models is fitted by a Gaussian:

* **online** (Algorithm 1): score = mean over queries of
  log N(phi; mu_in, s_in^2) - log N(phi; mu_out, s_out^2);
* **offline, as the paper states it** (Sec. IV-C, one-sided): the p-value of phi under the OUT
  Gaussian, 1 - P[Z > phi] = Phi((phi - mu_out) / s_out); with several queries, the mean over queries
  of log Phi(.) (a monotone transform, identical to the paper's test for one query);
* **offline, as the reference code computes it** (``generate_ours_offline``): the negated OUT
  log-density, -mean_q log N(phi; mu_out, s_out^2) — a *two-sided* test that also flags examples whose
  statistic is unusually low.

Variance: **per-example** (s estimated from each candidate's own IN/OUT models, unbiased) or
**fixed** ("global variance", Sec. VI-B, better with few models): one pooled within-example
variance per query and side, sum_i sum_k (phi_ik - mu_i)^2 / sum_i (n_i - 1). The reference code
instead takes ``np.std`` of *all* scores (which adds the spread of the per-example means to the
variance) and, in the online attack, uses the IN scores for the OUT standard deviation; neither is
reproduced. Location: mean (the paper) or median (the reference code), a parameter. Inference is in
eval mode (the reference code's training-mode inference is a confirmed bug).

Statistic: phi = z_y - logsumexp_{j != y} z_j for classifiers; for encoders without a classifier,
phi_enc = 2 atanh(mean pairwise cosine of augmented views) (:mod:`attacks.statistics`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from attacks.base import Attack, AttackConfig, Target, pool_membership
from attacks.executor import Executor
from attacks.queries import QuerySet
from attacks.result import AttackResult
from attacks.shadow_models import TrainJob, balanced_masks, stack_results, train_models
from attacks.statistics import SPACES, AlignmentStatistic, LogitStatistic, ViewSimilarities
from core.errors import ConfigError, one_of
from defenses.seeding import numpy_rng

LOCATIONS = ("mean", "median")
STATISTICS = ("auto", "logit", "alignment")
VARIANTS = ("online", "online-fixed", "offline", "offline-fixed", "offline-reference", "offline-reference-fixed")
_MIN_SD = 1e-8


@dataclass(frozen=True)
class GaussianFit:
    """Per-candidate, per-query Gaussian parameters of the IN and OUT statistics: arrays (n, Q)."""

    mu_in: np.ndarray
    sd_in: np.ndarray
    mu_out: np.ndarray
    sd_out: np.ndarray


def _side(shadow: np.ndarray, mask: np.ndarray, location: str, fixed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Location and scale over the models selected by ``mask`` (K, n), for shadow stats (K, n, Q)."""
    x = np.where(mask[..., None], shadow, np.nan)
    count = mask.sum(axis=0)  # (n,)
    if np.any(count < 2):
        raise ConfigError("lira: every candidate needs at least 2 IN and 2 OUT reference models")
    mu = np.nanmedian(x, axis=0) if location == "median" else np.nanmean(x, axis=0)
    centred = np.nanmean(x, axis=0)
    sq = np.nansum((x - centred) ** 2, axis=0)  # (n, Q)
    if fixed:
        pooled = sq.sum(axis=0) / (count - 1).sum()  # (Q,)
        sd = np.broadcast_to(np.sqrt(pooled), mu.shape).copy()
    else:
        sd = np.sqrt(sq / (count - 1)[:, None])
    return mu, np.maximum(sd, _MIN_SD)


def fit_gaussians(shadow_stats: np.ndarray, keep: np.ndarray, *, location: str = "mean",
                  fixed_variance: bool = False) -> GaussianFit:
    """Fit IN/OUT Gaussians from reference statistics (K, n, Q) and inclusion masks (K, n)."""
    shadow_stats = np.asarray(shadow_stats, dtype=np.float64)
    if shadow_stats.ndim == 2:
        shadow_stats = shadow_stats[..., None]
    keep = np.asarray(keep, dtype=bool)
    if shadow_stats.shape[:2] != keep.shape:
        raise ConfigError(f"lira: statistics {shadow_stats.shape} do not match masks {keep.shape}")
    if location not in LOCATIONS:
        raise one_of("location", location, LOCATIONS)
    mu_in, sd_in = _side(shadow_stats, keep, location, fixed_variance)
    mu_out, sd_out = _side(shadow_stats, ~keep, location, fixed_variance)
    return GaussianFit(mu_in, sd_in, mu_out, sd_out)


def _as_2d(target_stats: np.ndarray) -> np.ndarray:
    target_stats = np.asarray(target_stats, dtype=np.float64)
    return target_stats[:, None] if target_stats.ndim == 1 else target_stats


def online_scores(target_stats: np.ndarray, fit: GaussianFit) -> np.ndarray:
    """mean_q [log N(phi; mu_in, s_in) - log N(phi; mu_out, s_out)] (Algorithm 1)."""
    x = _as_2d(target_stats)
    return (stats.norm.logpdf(x, fit.mu_in, fit.sd_in) - stats.norm.logpdf(x, fit.mu_out, fit.sd_out)).mean(axis=1)


def offline_scores(target_stats: np.ndarray, fit: GaussianFit) -> np.ndarray:
    """The paper's one-sided offline test: mean_q log Phi((phi - mu_out) / s_out) (Sec. IV-C)."""
    x = _as_2d(target_stats)
    return stats.norm.logcdf(x, fit.mu_out, fit.sd_out).mean(axis=1)


def offline_reference_scores(target_stats: np.ndarray, fit: GaussianFit) -> np.ndarray:
    """The reference code's offline test: -mean_q log N(phi; mu_out, s_out) (two-sided)."""
    x = _as_2d(target_stats)
    return -stats.norm.logpdf(x, fit.mu_out, fit.sd_out).mean(axis=1)


def lira_scores(target_stats: np.ndarray, shadow_stats: np.ndarray, keep: np.ndarray, *,
                location: str = "mean") -> dict[str, np.ndarray]:
    """Every LiRA variant's scores (higher = member) for the target's statistics (n, Q)."""
    out: dict[str, np.ndarray] = {}
    for fixed in (False, True):
        fit = fit_gaussians(shadow_stats, keep, location=location, fixed_variance=fixed)
        suffix = "-fixed" if fixed else ""
        out[f"online{suffix}"] = online_scores(target_stats, fit)
        out[f"offline{suffix}"] = offline_scores(target_stats, fit)
        out[f"offline-reference{suffix}"] = offline_reference_scores(target_stats, fit)
    return out


@dataclass(frozen=True)
class LiRAConfig(AttackConfig):
    """LiRA settings. ``variant``: the primary score (``auto``: online-fixed below 64 reference
    models, else online; every variant is kept). ``queries``: query augmentations per example (identity first, then shifts;
    ``mirror`` None = only for colour data); ``statistic``: auto (logit for classifiers, else
    alignment); ``n_views``: augmented views per query of the encoder statistic; ``space``: where the
    encoder statistic is read, ``embeddings`` (z, default: the DP guarantee covers the whole trained
    model, projection head included, and z leaks most on digits) or ``features`` (h, what a released
    encoder exposes)."""

    shadow_models: int = 16
    variant: str = "auto"
    statistic: str = "auto"
    queries: int = 5
    mirror: bool | None = None
    n_views: int = 8
    space: str = "embeddings"
    location: str = "mean"
    max_stack: int = 16

    def validate(self) -> None:
        super().validate()
        if self.shadow_models < 4 or self.shadow_models % 2:
            raise ConfigError(f"shadow_models: must be an even number >= 4, got {self.shadow_models!r}")
        if self.variant != "auto" and self.variant not in VARIANTS:
            raise one_of("variant", self.variant, ("auto", *VARIANTS))
        if self.statistic not in STATISTICS:
            raise one_of("statistic", self.statistic, STATISTICS)
        if self.location not in LOCATIONS:
            raise one_of("location", self.location, LOCATIONS)
        if self.space not in SPACES:
            raise one_of("space", self.space, SPACES)
        if self.queries < 1 or self.max_stack < 1 or self.n_views < 2:
            raise ConfigError("queries and max_stack must be >= 1, n_views >= 2")


class LiRA(Attack):
    """Online/offline LiRA with per-example and fixed variance; every variant is kept in the result."""

    name = "lira"
    Config = LiRAConfig

    def primary_variant(self) -> str:
        """``auto``: online with fixed variance below 64 reference models, per-example above (Sec. VI-B)."""
        if self.config.variant != "auto":
            return self.config.variant
        return "online-fixed" if self.config.shadow_models < 64 else "online"

    def probe(self, target: Target):
        cfg = self.config
        info = target.data.info
        queries = QuerySet.for_dataset(info, cfg.queries, cfg.mirror)
        statistic = cfg.statistic
        if statistic == "auto":
            statistic = "logit" if target.trained is not None and target.trained.classifier is not None else "alignment"
        if statistic == "logit":
            return statistic, LogitStatistic(queries)
        views = ViewSimilarities(cfg.n_views, target.derive_seed("lira", "views"), queries, cfg.space)
        return statistic, AlignmentStatistic(views)

    def run(self, target: Target, *, executor: Executor | None = None, progress: bool = False) -> AttackResult:
        self.check_target(target)
        cfg = self.config
        statistic, probe = self.probe(target)
        n = len(target.data.pool)
        keep = balanced_masks(cfg.shadow_models, n, numpy_rng(target.seed, "attack", "lira", "masks"))
        jobs = [TrainJob(target.defense_ref, target.budget, target.data_source, target.derive_seed("lira", "ref", k),
                         keep[k], probe=probe, device=target.device) for k in range(cfg.shadow_models)]
        shadow = stack_results(train_models(jobs, executor, max_stack=cfg.max_stack))  # (K, n, Q)
        target_stats = probe(target.trained, target.data.pool, target.data.info)  # (n, Q)
        variants = lira_scores(target_stats, shadow, keep, location=cfg.location)
        membership, index = pool_membership(target)
        variant = self.primary_variant()
        scores = variants.pop(variant)
        return AttackResult(
            attack=self.name, variant=variant, scores=scores, membership=membership, index=index,
            config={**self.config_dict(), "statistic": statistic},
            counts={"n_reference_models": cfg.shadow_models, "n_queries": int(np.asarray(target_stats).shape[1]),
                    "n_in_per_candidate": cfg.shadow_models // 2},
            variants=variants, bound=self.one_run(scores, membership, target),
            extras={"offline_variants": "offline = the paper's one-sided test; offline-reference = the reference "
                                        "code's OUT log-density (two-sided)"})
