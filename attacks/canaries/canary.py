"""Black-box canary audits of a defense's training algorithm: one run, or many runs on a fixed pair.

Canaries are examples the auditor inserts to be easy to detect: **mislabelled** copies of the
attacker's shadow examples (a wrong label drawn uniformly; for classifiers) or **noise** images
(uniform pixels, random labels; for any model). They come from the shadow split, so they never
overlap the target's pool, public or test data. A canary is scored black-box: minus its
cross-entropy under its canary label when the model releases a classifier, else the mean pairwise
cosine similarity of fixed augmented views (the contrastive alignment loss, negated).

* ``one-run`` (Steinke, Nasr & Jagielski 2023): m canaries, each inserted independently with
  probability 1/2 into the target's training set (all of the target's members stay in); ONE run of
  the defense; guesses on the k+ highest and k- lowest canary scores, fixed by the configuration;
  :func:`privaudit.attacks.bounds.one_run.one_run_bound`.
* ``multi-run``: a fixed neighbouring pair D = the target's members, D' = D plus one canary
  (add/remove); ``runs`` independent trainings on each, the canary's score in each run, and the
  Clopper-Pearson bound with the threshold chosen on a separate half of the runs
  (:func:`privaudit.attacks.bounds.multi_run.multi_run_bound`); the Gaussian-DP variant is reported next to it (extras).
  Runs go through the executor and the defense's vectorised ``fit_many`` when it has one.

White-box gradient canaries, inserted through the DP-SGD engine's canary hook, are the attack
``gradient-canary`` (:mod:`privaudit.attacks.canaries.gradient_canary`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from privaudit.attacks.base import Attack, AttackConfig, Target, relation_notes
from privaudit.attacks.bounds.multi_run import THRESHOLD_STRATEGIES, multi_run_bound
from privaudit.attacks.executor import Executor
from privaudit.attacks.result import AttackResult
from privaudit.attacks.membership.shadow_models import TrainJob, train_models, with_pool
from privaudit.attacks.membership.statistics import LossStatistic, ViewSimilarities
from privaudit.core.datasets import MembershipData, Split
from privaudit.core.errors import ConfigError, one_of
from privaudit.defenses.training.seeding import numpy_rng, torch_generator

MODES = ("one-run", "multi-run")
KINDS = ("auto", "mislabel", "noise")


def make_canaries(data: MembershipData, m: int, kind: str, seed: int) -> Split:
    """m canaries built from the shadow split (``index`` = -1, -2, ..., never a raw-dataset index)."""
    if kind not in ("mislabel", "noise"):
        raise one_of("canary kind", kind, ("mislabel", "noise"))
    n = len(data.shadow)
    if not 1 <= m <= n:
        raise ConfigError(f"canaries: must lie in [1, {n}] (the shadow split's size), got {m!r}")
    rng = numpy_rng(seed, "canaries")
    rows = np.sort(rng.permutation(n)[:m])
    base = data.shadow.subset(torch.as_tensor(rows))
    c = data.info.num_classes
    if kind == "mislabel":
        x = base.x
        y = (base.y + 1 + torch.as_tensor(rng.integers(0, c - 1, m))) % c
    else:
        x = torch.rand(base.x.shape, generator=torch_generator(seed, "noise-canaries"))
        y = torch.as_tensor(rng.integers(0, c, m))
    return Split(x, y.to(torch.int64), -1 - torch.arange(m, dtype=torch.int64))


@dataclass(frozen=True)
class CanaryProbe:
    """Canary score: -cross-entropy with a classifier, else the mean view similarity."""

    views: ViewSimilarities

    def __call__(self, trained, split: Split, info) -> np.ndarray:
        if trained.classifier is not None:
            return -LossStatistic()(trained, split, info)
        return self.views(trained, split, info)[:, 0, :].mean(axis=1)


@dataclass(frozen=True)
class CanaryConfig(AttackConfig):
    mode: str = "one-run"
    kind: str = "auto"
    canaries: int = 200
    k_fraction: float = 0.25
    runs: int = 32
    threshold: str = "split"
    alpha: float = 0.05
    n_views: int = 10
    max_stack: int = 16

    def validate(self) -> None:
        super().validate()
        if self.mode not in MODES:
            raise one_of("mode", self.mode, MODES)
        if self.kind not in KINDS:
            raise one_of("kind", self.kind, KINDS)
        if self.threshold not in THRESHOLD_STRATEGIES:
            raise one_of("threshold", self.threshold, THRESHOLD_STRATEGIES)
        if self.canaries < 1 or self.runs < 4 or self.n_views < 2 or self.max_stack < 1:
            raise ConfigError("canaries and max_stack must be >= 1, runs >= 4, n_views >= 2")
        if not 0 < self.alpha < 1:
            raise ConfigError(f"alpha: must lie in (0, 1), got {self.alpha!r}")


class CanaryAudit(Attack):
    """Black-box canary audits: one-run (random insertion) and multi-run (fixed neighbouring pair)."""

    name = "canary"
    Config = CanaryConfig
    needs_model = False

    def _kind(self, target: Target) -> str:
        if self.config.kind != "auto":
            return self.config.kind
        # Without a trained model to look at, noise canaries (random labels) suit every model.
        return "mislabel" if target.trained is not None and target.trained.classifier is not None else "noise"

    def run(self, target: Target, *, executor: Executor | None = None, progress: bool = False) -> AttackResult:
        cfg = self.config
        kind = self._kind(target)
        probe = CanaryProbe(ViewSimilarities(cfg.n_views, target.derive_seed("canary", "views")))
        members = target.data.train
        n = len(members)
        if cfg.mode == "one-run":
            canaries = make_canaries(target.data, cfg.canaries, kind, target.derive_seed("canary", "make"))
            inserted = numpy_rng(target.seed, "attack", "canary", "insert").random(cfg.canaries) < 0.5
            pool = Split.concat([members, canaries])
            data = with_pool(target.data, pool, np.concatenate([np.ones(n, bool), inserted]))
            job = TrainJob(target.defense_ref, target.budget, data, target.derive_seed("canary", "run"),
                           data.membership.numpy(), probe=probe, probe_rows=n + np.arange(cfg.canaries),
                           device=target.device)
            scores = train_models([job], executor)[0]
            bound = self.one_run(scores, inserted, target)
            return AttackResult(
                attack=self.name, variant=f"one-run/{kind}", scores=scores, membership=inserted,
                index=canaries.index.numpy(), config={**self.config_dict(), "kind": kind},
                counts={"n_canaries": cfg.canaries, "n_training_runs": 1, "n_target_members": n},
                bound=bound)
        canary = make_canaries(target.data, 1, kind, target.derive_seed("canary", "make"))
        pool = Split.concat([members, canary])
        data = with_pool(target.data, pool, np.ones(n + 1, bool))
        runs_in = np.arange(2 * cfg.runs) % 2 == 0  # alternate D' (canary in) and D
        jobs = [TrainJob(target.defense_ref, target.budget, data, target.derive_seed("canary", "multi", i),
                         np.concatenate([np.ones(n, bool), [runs_in[i]]]), probe=probe, probe_rows=np.array([n]),
                         device=target.device) for i in range(2 * cfg.runs)]
        scores = np.concatenate(train_models(jobs, executor, max_stack=cfg.max_stack))
        delta = self.delta_for(target)
        seed = target.derive_seed("canary", "split")
        bound = multi_run_bound(scores[runs_in], scores[~runs_in], alpha=cfg.alpha, delta=delta,
                                threshold=cfg.threshold, seed=seed)
        bound = dataclasses.replace(bound, notes=bound.notes + relation_notes(target))
        extras = {}
        if delta > 0:
            gdp = multi_run_bound(scores[runs_in], scores[~runs_in], alpha=cfg.alpha, delta=delta,
                                  threshold=cfg.threshold, method="gdp", seed=seed)
            extras["gdp_bound"] = gdp.to_dict()
        return AttackResult(
            attack=self.name, variant=f"multi-run/{kind}", scores=scores, membership=runs_in,
            index=np.arange(2 * cfg.runs), config={**self.config_dict(), "kind": kind},
            counts={"n_training_runs": 2 * cfg.runs, "runs_with_canary": cfg.runs, "n_target_members": n},
            bound=bound, extras=extras)
