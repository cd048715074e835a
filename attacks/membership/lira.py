"""LiRA, the likelihood-ratio attack (Carlini et al. 2022, "Membership Inference Attacks From First
Principles", Sec. IV, Algorithm 1), online and offline, with per-example or fixed variance.

K reference models are trained with the target's own defense on random halves of the audit pool
(every candidate IN for exactly K/2 of them; :func:`privaudit.attacks.membership.shadow_models.balanced_masks`). For
each candidate and query, the statistic phi of the IN and OUT models is fitted by a Gaussian:

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

Statistic: phi = z_y - logsumexp_{j != y} z_j for classifiers; for encoders without a classifier, the
logit of a probability-like statistic (view alignment, the contrastive loss against population negatives,
the nearest-neighbour rank, the part-aware crop response: :mod:`privaudit.attacks.membership.statistics`), chosen by its
power on the reference models before the target is scored. The reference models and statistics are shared with
RMIA (:mod:`privaudit.attacks.membership.references`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from privaudit.attacks.base import Attack, Target, pool_membership
from privaudit.attacks.executor import Executor
from privaudit.attacks.membership.references import LikelihoodConfig, check_trained, choose, observe
from privaudit.attacks.result import AttackResult
from privaudit.core.errors import ConfigError, one_of

LOCATIONS = ("mean", "median")
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
    """Location and scale over the models selected by ``mask`` (K, n), for shadow stats (K, n, Q).

    With a single model on a side (K = 2), a within-candidate variance cannot be estimated: the fixed
    variance then falls back to the variance of all of that side's statistics around their mean, which is
    what Carlini et al.'s code uses for its global variance (it also holds the spread of the candidates'
    means, so it is conservative), and per-candidate variances use the pooled one.
    """
    x = np.where(mask[..., None], shadow, np.nan)
    count = mask.sum(axis=0)  # (n,)
    if np.any(count < 1):
        raise ConfigError("lira: every candidate needs at least 1 IN and 1 OUT reference model")
    mu = np.nanmedian(x, axis=0) if location == "median" else np.nanmean(x, axis=0)
    centred = np.nanmean(x, axis=0)
    sq = np.nansum((x - centred) ** 2, axis=0)  # (n, Q)
    dof = (count - 1).sum()
    if dof > 0:
        pooled = sq.sum(axis=0) / dof  # (Q,)
    else:
        pooled = np.nanvar(x.reshape(-1, x.shape[-1]), axis=0, ddof=1)
    if fixed:
        sd = np.broadcast_to(np.sqrt(pooled), mu.shape).copy()
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            sd = np.where((count >= 2)[:, None], np.sqrt(sq / np.maximum(count - 1, 1)[:, None]), np.sqrt(pooled))
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
class LiRAConfig(LikelihoodConfig):
    """LiRA settings. ``shadow_models``: reference models (even, >= 2; with 2, one IN and one OUT per
    candidate and the variance is pooled, see :func:`_side`); ``variant``: the primary score (``auto``:
    online-fixed below 64 reference models, else online; every variant is kept); ``location``: mean (the
    paper) or median (the reference code). What each model is asked (statistic, queries, views, population):
    :class:`privaudit.attacks.membership.references.LikelihoodConfig`, shared with RMIA."""

    shadow_models: int = 16
    variant: str = "auto"
    location: str = "mean"

    def validate(self) -> None:
        super().validate()
        if self.shadow_models < 2 or self.shadow_models % 2:
            raise ConfigError(f"shadow_models: must be an even number >= 2, got {self.shadow_models!r}")
        check_trained(self, self.shadow_models)
        if self.variant != "auto" and self.variant not in VARIANTS:
            raise one_of("variant", self.variant, ("auto", *VARIANTS))
        if self.location not in LOCATIONS:
            raise one_of("location", self.location, LOCATIONS)


class LiRA(Attack):
    """Online/offline LiRA with per-example and fixed variance; every variant is kept in the result."""

    name = "lira"
    Config = LiRAConfig

    def primary_variant(self, statistic: str = "logit") -> str:
        """``auto``: online with fixed variance below 64 reference models, per-example above (Sec. VI-B), for a
        classifier's logit; for encoder statistics the offline one-sided test (fixed variance below 64).

        On encoders the IN Gaussians are poorly estimated (the IN shift is small beside the spread across
        models), and the online test then loses to the offline one (docs/notes/defenses-attacks.md). The rule
        is fixed by the statistic's kind, before any target is scored.
        """
        if self.config.variant != "auto":
            return self.config.variant
        side = "online" if statistic == "logit" else "offline"
        return f"{side}-fixed" if self.config.shadow_models < 64 else side

    def run(self, target: Target, *, executor: Executor | None = None, progress: bool = False) -> AttackResult:
        self.check_target(target)
        cfg = self.config
        obs, details = choose(observe(target, cfg, cfg.shadow_models, executor), cfg.statistic)
        variants = lira_scores(obs.target[0], obs.ref[:, 0], obs.keep, location=cfg.location)
        membership, index = pool_membership(target)
        variant = self.primary_variant(details["statistic"])
        scores = variants.pop(variant)
        return AttackResult(
            attack=self.name, variant=variant, scores=scores, membership=membership, index=index,
            config={**self.config_dict(), "statistic": details["statistic"]},
            counts={"n_reference_models": cfg.shadow_models,
                    "n_references_trained": cfg.trained_references or cfg.shadow_models,
                    "n_queries": int(obs.target.shape[-1]),
                    "n_in_per_candidate": cfg.shadow_models // 2, "n_target_queries": obs.n_target_queries,
                    "n_reference_queries": obs.n_reference_queries},
            variants=variants, bound=self.one_run(scores, membership, target),
            extras={**details,
                    "offline_variants": "offline = the paper's one-sided test; offline-reference = the reference "
                                        "code's OUT log-density (two-sided)"})
