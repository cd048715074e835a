"""Intervals and paired tests of accuracies measured on one test set (the benchmark's statistics).

* An accuracy k / n: the Clopper-Pearson (exact binomial) interval.
* Two encoders on the same n test examples: ``gained`` examples right only for A, ``lost`` right only for B, m =
  gained + lost discordant. The difference is delta = (gained - lost) / n = (m / n)(2 pi - 1) with pi the chance
  that a discordant example favours A; given m, gained ~ Binomial(m, pi), so the Clopper-Pearson interval of pi maps
  to an exact interval of delta, conditional on m (the exact form of McNemar's test, whose one-sided p-values
  :func:`privaudit.defenses.evaluation.evaluation.paired_change` computes: ``p_gain`` that A is no better, ``p_drop``
  that it is no worse).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import special

LEVEL = 0.95


def accuracy_interval(correct: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The Clopper-Pearson interval of the accuracy ``correct / n`` at ``level``: the beta quantiles
    B(a/2; k, n - k + 1) and B(1 - a/2; k + 1, n - k) (SciPy's ``binomtest(...).proportion_ci(method="exact")``
    gives the same by root finding, much slower)."""
    if n < 1 or not 0 <= correct <= n:
        raise ValueError(f"accuracy_interval: need 0 <= correct <= n and n >= 1, got {correct} of {n}")
    k, tail = int(correct), (1 - level) / 2
    low = 0.0 if k == 0 else float(special.betaincinv(k, n - k + 1, tail))  # the beta quantile (stats.beta.ppf)
    high = 1.0 if k == n else float(special.betaincinv(k + 1, n - k, 1 - tail))
    return low, high


@dataclass(frozen=True)
class PairedDifference:
    """Accuracy of A minus accuracy of B on the same test examples, its exact interval and one-sided p-values."""

    delta: float
    low: float
    high: float
    gained: int
    lost: int
    n: int
    p_greater: float  # exact McNemar: H0 "A is no better than B"
    p_less: float  # H0 "A is no worse than B"
    level: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_difference(a: np.ndarray, b: np.ndarray, level: float = LEVEL) -> PairedDifference:
    """A - B from each test example's correctness under A and under B (module docstring)."""
    from privaudit.defenses.evaluation.evaluation import paired_change  # torch: only when a comparison is computed

    change = paired_change(np.asarray(a, dtype=bool), np.asarray(b, dtype=bool))
    gained, lost, n = change["gained"], change["lost"], change["n"]
    m = gained + lost
    if m == 0:
        low = high = 0.0
    else:
        pi_low, pi_high = accuracy_interval(gained, m, level)
        low, high = m * (2 * pi_low - 1) / n, m * (2 * pi_high - 1) / n
    return PairedDifference(change["delta"], float(low), float(high), gained, lost, n, change["p_gain"],
                            change["p_drop"], level)
