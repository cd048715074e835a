"""Reference models shared by the likelihood attacks (LiRA, RMIA) of one target, and the statistic they read.

Both attacks train K reference models with the target's own defense on random halves of the audit pool
(every candidate IN for exactly K/2 of them: :func:`privaudit.attacks.membership.shadow_models.balanced_masks`) and read
one statistic per candidate and query from each model and from the target. The masks and seeds come from
streams that depend on K alone, and the probe (the statistics plus the population samples) from settings
the two attacks share, so a cell that runs LiRA and RMIA with the same K trains the references once: the
results are cached on the :class:`privaudit.attacks.base.Target`.

The attacker's population data is the dataset's shadow split (never trained on by the target or the
references): a seeded permutation gives ``n_anchors`` images that the contrastive and rank statistics use
as negatives, then ``n_population`` samples z that RMIA compares each candidate with.

Encoder statistics (:data:`privaudit.attacks.membership.statistics.ENCODER_STATISTICS`): with ``statistic = "auto"`` the
one used is chosen by its measured power on the reference models alone, before the target is scored
(:func:`select_statistic`), so the choice costs no confidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from privaudit.attacks.base import AttackConfig, Target
from privaudit.attacks.executor import Executor
from privaudit.attacks.membership.queries import QuerySet
from privaudit.attacks.membership.shadow_models import (TrainJob, balanced_masks, paired_masks, stack_results,
                                                        train_models)
from privaudit.attacks.membership.statistics import (ENCODER_STATISTICS, SPACES, EncoderStatistics, LogitStatistic,
                                                     WithPopulation)
from privaudit.core.errors import ConfigError, one_of
from privaudit.defenses.training.seeding import numpy_rng

STATISTICS = ("auto", "logit", *ENCODER_STATISTICS)


@dataclass(frozen=True)
class LikelihoodConfig(AttackConfig):
    """Settings LiRA and RMIA share: what each reference model is asked.

    ``statistic``: ``auto`` (the classifier's logit when the model releases one, else the encoder statistic
    with the most power on the reference models), ``logit`` or one of the encoder statistics; ``queries``:
    query augmentations per example (identity first, then shifts; ``mirror`` None = only for colour data);
    ``n_views``: augmented views per query of the encoder statistics; ``space``: ``embeddings`` (z, the
    whole trained model, which the DP guarantee covers) or ``features`` (h, what a released encoder
    exposes); ``temperature``: of the contrastive statistic; ``n_anchors`` / ``n_population``: population
    images used as negatives / as RMIA's comparison samples z; ``max_stack``: references trained together;
    ``trained_references``: None (train exactly the references used, balanced masks) or an even count trained in
    complementary pairs (:func:`privaudit.attacks.membership.shadow_models.paired_masks`) of which the attack uses the
    first ones: attacks at 2, 4, ... models then share one training of the largest set.
    """

    statistic: str = "auto"
    queries: int = 5
    mirror: bool | None = None
    n_views: int = 8
    space: str = "embeddings"
    temperature: float = 0.5
    n_anchors: int = 128
    n_population: int = 256
    max_stack: int = 16
    trained_references: int | None = None

    def validate(self) -> None:
        super().validate()
        if self.statistic not in STATISTICS:
            raise one_of("statistic", self.statistic, STATISTICS)
        if self.space not in SPACES:
            raise one_of("space", self.space, SPACES)
        if self.queries < 1 or self.max_stack < 1 or self.n_views < 2:
            raise ConfigError("queries and max_stack must be >= 1, n_views >= 2")
        if self.trained_references is not None and (self.trained_references < 2 or self.trained_references % 2):
            raise ConfigError(f"trained_references: must be an even number >= 2 or unset, got "
                              f"{self.trained_references!r}")
        if not self.temperature > 0:
            raise ConfigError(f"temperature: must be > 0, got {self.temperature!r}")
        if self.n_anchors < 1 or self.n_population < 1:
            raise ConfigError(f"n_anchors and n_population: must be >= 1, got {self.n_anchors!r} and "
                              f"{self.n_population!r}")


@dataclass(frozen=True)
class Probe:
    """What every model is asked: ``kind`` (``logit`` or ``encoder``), the probe, its cache key, the
    statistics' names (one per leading row of an encoder probe's output) and the population size."""

    kind: str
    probe: WithPopulation
    key: tuple
    names: tuple[str, ...]
    n_population: int


def check_trained(cfg: LikelihoodConfig, used: int) -> None:
    """``trained_references`` must cover the ``used`` references (the suite's boundary check; :func:`observe` too)."""
    if cfg.trained_references is not None and cfg.trained_references < used:
        raise ConfigError(f"trained_references: {cfg.trained_references} references cannot serve an attack that uses "
                          f"{used}; set it to at least {used}")


def population_rows(target: Target, n_anchors: int, n_population: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the shadow split used as anchors and as population samples z (a seeded permutation)."""
    available = len(target.data.shadow)
    if n_anchors + n_population > available:
        raise ConfigError(f"n_population: {n_population} population samples plus {n_anchors} anchors need "
                          f"{n_anchors + n_population} examples of the attacker's population data (the shadow "
                          f"split), which has {available}; lower n_population or n_anchors")
    order = numpy_rng(target.seed, "attack", "population").permutation(available)
    return order[:n_anchors], order[n_anchors:n_anchors + n_population]


def make_probe(target: Target, cfg: LikelihoodConfig) -> Probe:
    """The probe of ``cfg`` for ``target``: the classifier's logit or every encoder statistic, plus z."""
    info = target.data.info
    queries = QuerySet.for_dataset(info, cfg.queries, cfg.mirror)
    classifier = target.trained is not None and target.trained.classifier is not None
    kind = "logit" if cfg.statistic == "logit" or (cfg.statistic == "auto" and classifier) else "encoder"
    anchors, population = population_rows(target, cfg.n_anchors if kind == "encoder" else 0, cfg.n_population)
    z = target.data.shadow.subset(torch.as_tensor(population))
    if kind == "logit":
        inner: Any = LogitStatistic(queries)
        key: tuple = ("logit", queries, cfg.n_population)
        names: tuple[str, ...] = ("logit",)
    else:
        inner = EncoderStatistics(target.data.shadow.x[torch.as_tensor(anchors)], cfg.n_views,
                                  target.derive_seed("likelihood", "views"), queries, cfg.space, cfg.temperature)
        key = ("encoder", queries, cfg.n_views, cfg.space, cfg.temperature, cfg.n_anchors, cfg.n_population)
        names = ENCODER_STATISTICS
    return Probe(kind, WithPopulation(inner, z), key, names, cfg.n_population)


@dataclass(frozen=True)
class Observations:
    """The statistics of the references and the target, split into candidates and population samples.

    ``ref`` (K, S, n, Q) and ``ref_z`` (K, S, |Z|, Q); ``target`` (S, n, Q) and ``target_z`` (S, |Z|, Q);
    S = 1 for the classifier's logit. ``keep`` (K, n): which candidates each reference trained on.
    """

    ref: np.ndarray
    ref_z: np.ndarray
    target: np.ndarray
    target_z: np.ndarray
    keep: np.ndarray
    names: tuple[str, ...]
    n_target_queries: int
    n_reference_queries: int

    def statistic(self, index: int) -> "Observations":
        """The same observations restricted to statistic ``index`` (S = 1)."""
        s = slice(index, index + 1)
        return Observations(self.ref[:, s], self.ref_z[:, s], self.target[s], self.target_z[s], self.keep,
                            (self.names[index],), self.n_target_queries, self.n_reference_queries)


def _with_statistic_axis(x: np.ndarray, kind: str) -> np.ndarray:
    return x[None] if kind == "logit" else x


def observe(target: Target, cfg: LikelihoodConfig, n_models: int, executor: Executor | None) -> Observations:
    """Train (or reuse from ``target.cache``) ``n_models`` references and probe them and the target."""
    probe = make_probe(target, cfg)
    n = len(target.data.pool)
    check_trained(cfg, n_models)
    trained = n_models if cfg.trained_references is None else cfg.trained_references
    design = () if cfg.trained_references is None else ("paired",)
    key = ("references", trained, *design, probe.key)
    cached = target.cache.get(key)
    if cached is None:
        rng = numpy_rng(target.seed, "attack", "references", trained, *design, "masks")
        keep = (paired_masks if design else balanced_masks)(trained, n, rng)
        jobs = [TrainJob(target.defense_ref, target.budget, target.data_source,
                         target.derive_seed("references", trained, *design, k), keep[k], probe=probe.probe,
                         device=target.device) for k in range(trained)]
        ref = stack_results(train_models(jobs, executor, max_stack=cfg.max_stack))
        ref = ref[:, None] if probe.kind == "logit" else ref  # (K, S, n + |Z|, Q)
        tgt = _with_statistic_axis(np.asarray(probe.probe(target.trained, target.data.pool, target.data.info)),
                                   probe.kind)
        cached = (ref, tgt, keep)
        target.cache[key] = cached
    ref, tgt, keep = cached
    ref, keep = ref[:n_models], keep[:n_models]  # paired masks: every even prefix is balanced
    n_q = ref.shape[-1]
    per_model = (n + probe.n_population) * n_q * (1 if probe.kind == "logit" else cfg.n_views)
    return Observations(ref[:, :, :n], ref[:, :, n:], tgt[:, :n], tgt[:, n:], keep, probe.names,
                        per_model, per_model * n_models)


def others_mean(ref: np.ndarray, keep: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The reference mean that model ``k``'s leave-one-out test compares with, and where it is fair.

    ``ref`` (K, ..., n), ``keep`` (K, n). With balanced masks a candidate IN for model k is IN for K/2 - 1 of
    the others and one OUT for k for K/2 of them, so the plain mean of the others sits lower for k's members
    than for its non-members and inflates every leave-one-out AUC (by more for the statistics and tests that
    separate IN from OUT best). The fair mean is 0.5 (mean IN + mean OUT) over the others, what the target
    itself is compared with (its references are IN for exactly half); it is defined where the others hold at
    least one IN and one OUT model (``ok``). With K = 2 no candidate has both: the plain mean, ``ok`` all
    True (the only estimate there is; callers that compare tests fall back to a fixed rule).
    """
    others = np.delete(np.arange(ref.shape[0]), k)
    r, kp = ref[others], np.asarray(keep[others], dtype=bool)
    kp = kp.reshape(kp.shape[:1] + (1,) * (r.ndim - 2) + kp.shape[1:])
    n_in, n_out = kp.sum(axis=0), (~kp).sum(axis=0)
    ok = (n_in > 0) & (n_out > 0)
    if not ok.any():
        return r.mean(axis=0), np.ones(keep.shape[1], dtype=bool)
    mean_in = np.where(kp, r, 0.0).sum(axis=0) / np.maximum(n_in, 1)
    mean_out = np.where(~kp, r, 0.0).sum(axis=0) / np.maximum(n_out, 1)
    ok_n = ok.reshape(-1, ok.shape[-1])[0]
    return np.where(ok, 0.5 * (mean_in + mean_out), r.mean(axis=0)), ok_n


def select_statistic(obs: Observations) -> tuple[int, dict[str, float]]:
    """The statistic with the most power on the references alone (leave-one-out), and each one's power.

    Each reference model k in turn plays the target: its statistic minus the fair mean of the other
    references' (:func:`others_mean`), averaged over queries, is scored against its own inclusion mask (AUC).
    This offset from the reference mean is the common core of LiRA's and RMIA's tests; it needs only K >= 2
    and never reads the target.
    """
    from privaudit.attacks.metrics import auc

    k = obs.ref.shape[0]
    stats = obs.ref.mean(axis=-1)  # (K, S, n)
    power: dict[str, float] = {}
    aucs: dict[int, list[float]] = {s: [] for s in range(len(obs.names))}
    for i in range(k):
        mean, ok = others_mean(stats, obs.keep, i)
        for s in range(len(obs.names)):
            aucs[s].append(auc((stats[i, s] - mean[s])[ok], obs.keep[i, ok]))
    for s, name in enumerate(obs.names):
        power[name] = float(np.mean(aucs[s]))
    best = max(range(len(obs.names)), key=lambda s: power[obs.names[s]])
    return best, power


def choose(obs: Observations, statistic: str) -> tuple[Observations, dict[str, Any]]:
    """Restrict ``obs`` to the configured statistic (``auto``: :func:`select_statistic`); details for the report."""
    if len(obs.names) == 1:
        return obs, {"statistic": obs.names[0]}
    if statistic in obs.names:
        return obs.statistic(obs.names.index(statistic)), {"statistic": statistic}
    best, power = select_statistic(obs)
    return obs.statistic(best), {"statistic": obs.names[best], "statistic_power": power,
                                 "statistic_rule": "most leave-one-out AUC on the reference models, chosen "
                                                   "before the target is scored"}
