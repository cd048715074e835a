"""The loss-threshold baseline (Yeom, Giacomelli, Fredrikson & Jha 2018, Sec. 3.2): members have lower loss.

Score = -loss, no shadow models. For a classifier the loss is the per-example cross-entropy; for an
encoder without a classifier it is the contrastive alignment loss of n fixed augmented views, i.e.
the score is the mean pairwise cosine similarity of the views (EncoderMI's threshold statistic,
without a shadow-tuned threshold). Yeom et al. threshold at the average training loss; the metrics
here sweep every threshold instead (their threshold needs the training loss, which an auditor
reading only outputs does not have).
"""

from __future__ import annotations

from dataclasses import dataclass

from privaudit.attacks.base import Attack, AttackConfig, Target, pool_membership
from privaudit.attacks.executor import Executor
from privaudit.attacks.result import AttackResult
from privaudit.attacks.membership.statistics import SPACES, LossStatistic, ViewSimilarities
from privaudit.core.errors import ConfigError, one_of

STATISTICS = ("auto", "cross-entropy", "alignment")


@dataclass(frozen=True)
class LossConfig(AttackConfig):
    statistic: str = "auto"
    n_views: int = 10
    space: str = "features"

    def validate(self) -> None:
        super().validate()
        if self.statistic not in STATISTICS:
            raise one_of("statistic", self.statistic, STATISTICS)
        if self.space not in SPACES:
            raise one_of("space", self.space, SPACES)
        if self.n_views < 2:
            raise ConfigError(f"n_views: must be >= 2, got {self.n_views!r}")


class LossAttack(Attack):
    name = "loss"
    Config = LossConfig

    def run(self, target: Target, *, executor: Executor | None = None, progress: bool = False) -> AttackResult:
        self.check_target(target)
        cfg = self.config
        statistic = cfg.statistic
        if statistic == "auto":
            statistic = "cross-entropy" if target.trained.classifier is not None else "alignment"
        data = target.data
        if statistic == "cross-entropy":
            scores = -LossStatistic()(target.trained, data.pool, data.info)
        else:
            views = ViewSimilarities(cfg.n_views, target.derive_seed("loss", "views"), space=cfg.space)
            scores = views(target.trained, data.pool, data.info)[:, 0, :].mean(axis=1)
        membership, index = pool_membership(target)
        return AttackResult(attack=self.name, variant=statistic, scores=scores, membership=membership, index=index,
                            config={**self.config_dict(), "statistic": statistic}, counts={},
                            bound=self.one_run(scores, membership, target))
