"""RMIA, the pairwise likelihood-ratio attack (Zarifzadeh, Liu, Shokri & Reza, ICML 2024, "Low-Cost
High-Power Membership Inference Attacks", Sec. 3, Eqs. 3-4; ML Privacy Meter's implementation).

For a candidate x and population samples z (never trained on), with Pr(.|theta) the target's
probability-like statistic and Pr(.) its mean over reference models:

    LR(x, z) = [Pr(x|theta) / Pr(x)] / [Pr(z|theta) / Pr(z)],
    Score(x) = |{z : LR(x, z) >= gamma}| / |Z|.                                         (Eqs. 3-4)

* **online** (IN models exist): Pr(x) = the mean of Pr(x|theta_k) over all K reference models; with
  LiRA's balanced masks each candidate is IN for exactly K/2 of them, the paper's online design.
* **offline** (OUT models only): Pr(x) = ((1 + a) Pr_OUT(x) + (1 - a)) / 2 (Sec. 3, "offline"; App. B.2),
  the linear approximation of the missing IN models; ``a`` is given, or fitted on the reference models
  alone (leave-one-out: each reference in turn plays the target, the a in the grid with the largest mean
  AUC wins, as the paper tunes it), before the target is scored.
* ``mode = "auto"`` runs the test with more leave-one-out power on the references (:func:`choose_mode`;
  the paper runs online whenever IN models exist, but with a handful of them their mean is noisy and the
  offline test, which reads only the OUT models, can be the stronger one); both are kept as variants.

The population samples z are OUT for every reference, so Pr(z) always uses the offline approximation (in
the online mode too); this affects only the calibration of Score (its value at a fixed gamma), not the
ranking of the candidates, which for a single target model is that of Pr(x|theta) / Pr(x).

Pr(x|theta): the softmax probability of the true label for classifiers, and for encoders the probability-like
statistics of :mod:`privaudit.attacks.membership.statistics` (``contrastive``: the probability that the candidate's own
view is picked as the positive among population negatives, i.e. exp(-InfoNCE); ``rank``; ``alignment``;
``partcrop``), the one with the most power on the references chosen before the target is scored
(:mod:`privaudit.attacks.membership.references`). Probabilities are averaged over the query augmentations (ML Privacy
Meter does the same), from the statistics' logit scale, p = sigmoid(phi): over all of them, or over the single query
with the most leave-one-out power on the references when that is stronger (:func:`select_queries`: a
classifier trained without augmentation gives shifted queries no signal, and their average drowns the
identity's). The classifier's statistic is read at a signal temperature, p = sigmoid(phi / T) with T = 8 by
default (``signal_temperature``; encoders' statistics at T = 1): an overfit classifier's true-class
probability saturates near 1, where a ratio of probabilities no longer tells 1 - 1e-3 from 1 - 1e-9 but the
odds do; as T grows the test tends to the offset of the logit from its reference mean. T is fixed before
any target is scored, not tuned per target (how it was chosen: docs/notes/defenses-attacks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from privaudit.attacks.base import Attack, Target, pool_membership
from privaudit.attacks.executor import Executor
from privaudit.attacks.membership.references import LikelihoodConfig, check_trained, choose, observe, others_mean
from privaudit.attacks.result import AttackResult
from privaudit.core.errors import ConfigError, one_of

MODES = ("auto", "online", "offline")
#: The classifier's signal: sigmoid(phi / 8), the true-class odds softened (see the module docstring).
CLASSIFIER_TEMPERATURE = 8.0
A_GRID = tuple(np.round(np.arange(0.05, 1.0001, 0.05), 2))
#: The offline slope where the references leave none to fit it on (ML Privacy Meter's default; field notes).
DEFAULT_A = 0.3
_CHUNK = 1 << 24


def _check_a(a: float) -> None:
    if not 0 < a <= 1:
        raise ConfigError(f"a: the offline approximation's slope must lie in (0, 1], got {a!r}")


def prob_x(ref: np.ndarray, keep: np.ndarray | None, *, online: bool, a: float) -> np.ndarray:
    """Pr(x) from reference probabilities (K, n): the mean over all models (online) or the offline
    approximation ((1 + a) mean_OUT + (1 - a)) / 2 (``keep`` None: every model is OUT)."""
    ref = np.asarray(ref, dtype=np.float64)
    if online:
        return ref.mean(axis=0)
    _check_a(a)
    out = np.ones(ref.shape, dtype=bool) if keep is None else ~np.asarray(keep, dtype=bool)
    count = out.sum(axis=0)
    if np.any(count < 1):
        raise ConfigError("rmia: the offline test needs at least one OUT reference model per candidate")
    mean_out = np.where(out, ref, 0.0).sum(axis=0) / count
    return ((1 + a) * mean_out + (1 - a)) / 2


def rmia_scores(p_x: np.ndarray, ref_x: np.ndarray, keep: np.ndarray, p_z: np.ndarray, ref_z: np.ndarray, *,
                gamma: float = 1.0, a: float = 0.3, online: bool = True, tie_break: bool = False) -> np.ndarray:
    """Score(x) = fraction of z with LR(x, z) >= gamma (Eqs. 3-4); ``tie_break``: :func:`break_ties`.

    ``p_x`` (n,) and ``ref_x`` (K, n): the target's and the references' probabilities of the candidates,
    ``keep`` (K, n) which references trained on which candidate; ``p_z`` (m,) and ``ref_z`` (K, m) the same for
    the population samples (OUT for every reference).
    """
    if not gamma > 0:
        raise ConfigError(f"gamma: must be > 0, got {gamma!r}")
    _check_a(a)
    p_z = np.asarray(p_z, dtype=np.float64)
    if p_z.size < 1:
        raise ConfigError("rmia: needs at least one population sample z")
    ratio_x = np.asarray(p_x, dtype=np.float64) / prob_x(ref_x, keep, online=online, a=a)
    ratio_z = p_z / prob_x(ref_z, None, online=False, a=a)
    rows = max(1, _CHUNK // ratio_z.size)
    fraction = np.concatenate([((ratio_x[i:i + rows, None] / ratio_z[None, :]) >= gamma).mean(axis=1)
                               for i in range(0, ratio_x.size, rows)]) if ratio_x.size else np.zeros(0)
    return break_ties(fraction, ratio_x, p_z.size) if tie_break else fraction


def break_ties(fraction: np.ndarray, ratio: np.ndarray, n_population: int) -> np.ndarray:
    """Score(x) with its ties broken by LR(x) = Pr(x|theta) / Pr(x) itself.

    With |Z| population samples the fraction takes |Z| + 1 values, and every candidate whose ratio exceeds
    all z's scores exactly 1: the low-FPR end of the ROC collapses into one tie. For one target model the
    fraction is a non-decreasing function of LR(x), so adding (1 / (2 |Z|)) u(LR(x)), with u strictly
    increasing into (0, 1), keeps every strict order of the paper's score and orders its ties by the
    statistic they come from.
    """
    u = 0.5 + np.arctan(np.log(np.maximum(ratio, 1e-300))) / np.pi
    return np.asarray(fraction, dtype=np.float64) + u / (2 * n_population)


def fit_a(ref_x: np.ndarray, keep: np.ndarray, grid: tuple[float, ...] = A_GRID) -> tuple[float, dict[float, float]]:
    """The offline slope a with the largest mean leave-one-out AUC on the references (the target unseen).

    Reference k plays the target; Pr(x) comes from the OUT models among the others; only candidates with at
    least one such model are scored. The candidates' ranking depends on Pr(x|theta_k) / Pr(x) alone.

    With 2 references (one IN and one OUT per candidate) no reference has both members and non-members among the
    candidates the other is OUT for: every a's power is undefined (NaN), and the slope is :data:`DEFAULT_A`, fixed in
    advance (taking the grid's first, 0.05, would make Pr(x) nearly constant and the test the target's probability
    alone: RMIA at 1 OUT reference then read below offline LiRA on the benchmark's classifier).
    """
    from privaudit.attacks.metrics import auc

    k_models = ref_x.shape[0]
    if k_models < 2:
        raise ConfigError("rmia: fitting a needs at least 2 reference models")
    means: dict[float, float] = {}
    for a in grid:
        aucs = []
        for k in range(k_models):
            others = np.delete(np.arange(k_models), k)
            out = ~keep[others]
            ok = out.any(axis=0)
            labels = keep[k, ok]
            if labels.all() or not labels.any():
                continue
            mean_out = np.where(out, ref_x[others], 0.0).sum(axis=0)[ok] / out.sum(axis=0)[ok]
            aucs.append(auc(ref_x[k, ok] / (((1 + a) * mean_out + (1 - a)) / 2), labels))
        means[float(a)] = float(np.mean(aucs)) if aucs else float("nan")
    if all(np.isnan(v) for v in means.values()):
        return DEFAULT_A, means
    best = max(means, key=lambda a: (np.nan_to_num(means[a], nan=-1.0), -a))
    return best, means


def select_queries(ref_q: np.ndarray, keep: np.ndarray) -> tuple[list[int], dict[str, float]]:
    """The queries whose averaged probability has the most leave-one-out power on the references.

    Candidates: every query averaged (the default when queries resemble training inputs) and each query
    alone. A query unlike anything the model trained on (a shifted image for a classifier trained without
    augmentation) carries no membership signal, and averaging its probability with the informative ones
    drowns them (LiRA copes through its per-query variances; a probability average does not). Reference k in
    turn plays the target against the mean of the others (online ratio); the target is never read.
    """
    from privaudit.attacks.metrics import auc

    n_q = ref_q.shape[-1]
    candidates = {"all": list(range(n_q))}
    if n_q > 1:
        candidates.update({f"query {q}": [q] for q in range(n_q)})
    power = {name: online_power(ref_q[:, :, queries].mean(axis=-1), keep) for name, queries in candidates.items()}
    best = max(power, key=lambda c: (power[c], c == "all"))
    return candidates[best], power


def online_power(ref_x: np.ndarray, keep: np.ndarray) -> float:
    """Mean leave-one-out AUC of the online test on the references: reference k against the fair mean of the
    others (:func:`privaudit.attacks.membership.references.others_mean`, 0.5 (mean IN + mean OUT), as the target is
    tested)."""
    from privaudit.attacks.metrics import auc

    aucs = []
    for k in range(ref_x.shape[0]):
        mean, ok = others_mean(ref_x, keep, k)
        if keep[k, ok].all() or not keep[k, ok].any():
            continue
        aucs.append(auc(ref_x[k, ok] / mean[ok], keep[k, ok]))
    return float(np.mean(aucs)) if aucs else float("nan")


def choose_mode(ref_x: np.ndarray, keep: np.ndarray, a: float) -> tuple[str, dict[str, float], str]:
    """``auto``'s test: the one with more leave-one-out power on the references, the target unseen.

    Online uses the IN models too, but with few of them their mean is noisy; the offline approximation uses
    only the OUT models, and can be the stronger test (docs/notes/defenses-attacks.md). With K = 2 no
    reference has a fair leave-one-out mean (:func:`privaudit.attacks.membership.references.others_mean`): the paper's
    rule, online whenever IN models exist.
    """
    if ref_x.shape[0] < 4:
        return "online", {}, "the paper's rule (online when IN models exist): too few references to compare"
    power = {"online": online_power(ref_x, keep), "offline": fit_a(ref_x, keep, (a,))[1][a]}
    best = "offline" if power["offline"] > power["online"] else "online"
    return best, power, "more leave-one-out AUC on the reference models, chosen before the target is scored"


@dataclass(frozen=True)
class RMIAConfig(LikelihoodConfig):
    """RMIA settings: ``reference_models`` (even, >= 2; each candidate IN for half), ``signal_temperature``
    (None: 8 for a classifier's logit, 1 for encoder statistics), ``gamma`` (> 0),
    ``a`` (offline slope in (0, 1]; None: fitted on the references), ``mode`` (``auto``: the test with more
    leave-one-out power on the references, :func:`choose_mode`; both tests are kept in the result)."""

    reference_models: int = 2
    signal_temperature: float | None = None
    gamma: float = 1.0
    a: float | None = None
    mode: str = "auto"

    def validate(self) -> None:
        super().validate()
        if self.reference_models < 2 or self.reference_models % 2:
            raise ConfigError(f"reference_models: must be an even number >= 2, got {self.reference_models!r}")
        check_trained(self, self.reference_models)
        if not self.gamma > 0:
            raise ConfigError(f"gamma: must be > 0, got {self.gamma!r}")
        if self.signal_temperature is not None and not self.signal_temperature > 0:
            raise ConfigError(f"signal_temperature: must be > 0, got {self.signal_temperature!r}")
        if self.a is not None:
            _check_a(self.a)
        if self.mode not in MODES:
            raise one_of("mode", self.mode, MODES)


class RMIA(Attack):
    """Online and offline RMIA with reference models trained with the target's defense (shared with LiRA)."""

    name = "rmia"
    Config = RMIAConfig

    def run(self, target: Target, *, executor: Executor | None = None, progress: bool = False) -> AttackResult:
        self.check_target(target)
        cfg = self.config
        obs, details = choose(observe(target, cfg, cfg.reference_models, executor), cfg.statistic)
        # Probabilities (at the signal temperature) averaged over the queries chosen on the references:
        # (K, n), (n,), (K, m), (m,).
        temp = cfg.signal_temperature or (CLASSIFIER_TEMPERATURE if obs.names == ("logit",) else 1.0)
        prob = lambda phi: expit(phi / temp)  # noqa: E731
        queries, query_power = select_queries(prob(obs.ref[:, 0]), obs.keep)
        details.update(queries=queries, query_power=query_power, signal_temperature=temp)
        ref_x, ref_z = prob(obs.ref[:, 0][..., queries]).mean(axis=-1), prob(obs.ref_z[:, 0][..., queries]).mean(axis=-1)
        p_x, p_z = prob(obs.target[0][:, queries]).mean(axis=-1), prob(obs.target_z[0][:, queries]).mean(axis=-1)
        if cfg.a is None:
            a, a_power = fit_a(ref_x, obs.keep)
            fitted = not all(np.isnan(v) for v in a_power.values())
            details.update(a=a, a_fitted=fitted, a_power=a_power)
            if not fitted:
                details["a_rule"] = (f"no reference to fit a on (each candidate IN for one of 2): the default "
                                     f"{DEFAULT_A}")
        else:
            a = cfg.a
            details.update(a=a, a_fitted=False)
        variants = {}
        for mode in ("online", "offline"):
            for tied in (False, True):
                variants[mode + ("-fraction" if tied else "")] = rmia_scores(
                    p_x, ref_x, obs.keep, p_z, ref_z, gamma=cfg.gamma, a=a, online=mode == "online",
                    tie_break=not tied)
        if cfg.mode == "auto":
            primary, mode_power, mode_rule = choose_mode(ref_x, obs.keep, a)
            details.update(mode=primary, mode_power=mode_power, mode_rule=mode_rule)
        else:
            primary = cfg.mode
        scores = variants.pop(primary)
        membership, index = pool_membership(target)
        return AttackResult(
            attack=self.name, variant=primary, scores=scores, membership=membership, index=index,
            config={**self.config_dict(), "statistic": details["statistic"]},
            counts={"n_reference_models": cfg.reference_models,
                    "n_references_trained": cfg.trained_references or cfg.reference_models,
                    "n_queries": int(obs.target.shape[-1]),
                    "n_population": int(p_z.size), "n_in_per_candidate": cfg.reference_models // 2,
                    "n_target_queries": obs.n_target_queries, "n_reference_queries": obs.n_reference_queries},
            variants=variants, bound=self.one_run(scores, membership, target),
            extras=details)
