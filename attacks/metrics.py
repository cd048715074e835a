"""Metrics of a membership-inference score vector: ROC, AUC, balanced accuracy, TPR at a fixed FPR.

Conventions (Carlini et al. 2022, Sec. III-D; field notes "LiRA ... Metrics"):

* scores: higher = "member"; ties are handled by scikit-learn's ``roc_curve`` (one ROC point per
  distinct score, no interpolation between points, ``drop_intermediate=False``).
* AUC: area under the pooled ROC (trapezoidal, i.e. ties count one half).
* TPR at FPR t: the TPR of the *last* ROC point whose FPR is <= t (the attacker may not exceed the
  FPR budget; no randomisation between thresholds).
* FPR resolution: with n non-members the smallest non-zero FPR is 1/n. A target t < 1/n can only be
  met by the FPR = 0 points, so ``tpr_at_fpr`` reports, next to each value, whether t is resolved.
* Balanced accuracy: max over thresholds of (TPR + TNR) / 2. The threshold is chosen with the true
  labels, so this is an optimistic (oracle-threshold) figure, as in the LiRA reference code; attacks
  that fix a threshold on shadow data report their own decision accuracy separately.
* Advantage: max over thresholds of TPR - FPR = 2 x balanced accuracy - 1 (Yeom et al. 2018's membership
  advantage, the "attacker advantage" TF-Privacy reports).

The summary is computed from the two sides' scores, each sorted once (:class:`SortedScores`): every
figure above is a count of members / non-members at or above a threshold, read by binary search in the
sorted sides (the members merged into the non-members in chunks), so memory stays near the two sorted copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from privaudit.core.errors import ConfigError

FPR_TARGETS = (0.001, 0.01, 0.1)


def fpr_key(t: float) -> str:
    """The report key of an FPR target: ``0.001 -> "0.001"``, ``0.1 -> "0.1"``."""
    return format(t, "g")


def _check(scores: np.ndarray, membership: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=np.float64).ravel()
    membership = np.asarray(membership, dtype=bool).ravel()
    if scores.shape != membership.shape:
        raise ConfigError(f"scores: shape {scores.shape} does not match membership {membership.shape}")
    if not np.all(np.isfinite(scores)):
        raise ConfigError("scores: must be finite (got NaN or infinity)")
    if membership.all() or not membership.any():
        raise ConfigError("membership: needs at least one member and one non-member")
    return scores, membership


@dataclass(frozen=True)
class Roc:
    """ROC points (FPR and TPR increasing), thresholds (score >= threshold means "member")."""

    fpr: np.ndarray
    tpr: np.ndarray
    thresholds: np.ndarray
    n_members: int
    n_nonmembers: int


def roc(scores: np.ndarray, membership: np.ndarray) -> Roc:
    """The full ROC curve of ``scores`` against ``membership`` (scikit-learn, no points dropped)."""
    from sklearn.metrics import roc_curve

    scores, membership = _check(scores, membership)
    fpr, tpr, thresholds = roc_curve(membership, scores, drop_intermediate=False)
    return Roc(fpr, tpr, thresholds, int(membership.sum()), int((~membership).sum()))


def auc(scores: np.ndarray, membership: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half)."""
    scores, membership = _check(scores, membership)
    return SortedScores.of(scores[membership], scores[~membership]).auc()


def balanced_accuracy(scores: np.ndarray, membership: np.ndarray) -> float:
    """max over thresholds of (TPR + 1 - FPR) / 2 (oracle threshold; see the module docstring)."""
    scores, membership = _check(scores, membership)
    return (1.0 + SortedScores.of(scores[membership], scores[~membership]).advantage()) / 2.0


def tpr_at_fpr(scores: np.ndarray, membership: np.ndarray, target: float) -> float:
    """TPR of the last ROC point with FPR <= ``target``."""
    return tpr_at_fpr_from_roc(roc(scores, membership), target)


def tpr_at_fpr_from_roc(r: Roc, target: float) -> float:
    if not 0 <= target <= 1:
        raise ConfigError(f"fpr target: must lie in [0, 1], got {target!r}")
    ok = np.flatnonzero(r.fpr <= target + 1e-12)
    return float(r.tpr[ok[-1]]) if ok.size else 0.0


def loglog_roc(r: Roc, floor: float | None = None) -> dict[str, list[float]]:
    """ROC points for a log-log plot: FPR and TPR clipped below at ``floor`` (default 1/(2 n_nonmembers)).

    The chance line is TPR = FPR; points at FPR = 0 are drawn at the floor, so the curve starts at the
    resolution limit rather than disappearing off the axis.
    """
    floor = floor if floor is not None else 0.5 / max(r.n_nonmembers, 1)
    return {"fpr": np.maximum(r.fpr, floor).tolist(), "tpr": np.maximum(r.tpr, floor).tolist(), "floor": [floor]}


def summarize(scores: np.ndarray, membership: np.ndarray,
              targets: tuple[float, ...] = FPR_TARGETS) -> dict[str, object]:
    """AUC, balanced accuracy, advantage, TPR at each FPR target (with resolution flags) and counts."""
    scores, membership = _check(scores, membership)
    return SortedScores.of(scores[membership], scores[~membership]).summary(targets)


@dataclass(frozen=True)
class ScoreMetrics:
    """What :func:`score_metrics` measures of an attack's scores: AUC, advantage, balanced accuracy, TPR at each
    FPR target (keyed by the target as a number: ``tpr_at_fpr[0.01]``, or :meth:`tpr_at`), whether each target is
    resolved by the non-members' count (resolution 1 / n), and the counts. :meth:`to_dict` is the report's form
    (targets as strings, ``"0.01"``)."""

    auc: float
    advantage: float
    balanced_accuracy: float
    tpr_at_fpr: dict[float, float]
    fpr_resolved: dict[float, bool]
    fpr_resolution: float
    n_members: int
    n_nonmembers: int

    def tpr_at(self, fpr: float) -> float:
        """The TPR at FPR target ``fpr`` (one of the targets it was computed for)."""
        if fpr not in self.tpr_at_fpr:
            raise ConfigError(f"fpr: {fpr!r} is not a computed target; accepted: "
                              f"{', '.join(fpr_key(t) for t in self.tpr_at_fpr)}")
        return self.tpr_at_fpr[fpr]

    def to_dict(self) -> dict[str, object]:
        """The summary as reports hold it (:func:`summarize`'s dict)."""
        return {"auc": self.auc, "balanced_accuracy": self.balanced_accuracy, "advantage": self.advantage,
                "tpr_at_fpr": {fpr_key(t): v for t, v in self.tpr_at_fpr.items()},
                "fpr_resolution": self.fpr_resolution,
                "fpr_resolved": {fpr_key(t): v for t, v in self.fpr_resolved.items()},
                "n_members": self.n_members, "n_nonmembers": self.n_nonmembers}


def score_metrics(members: np.ndarray, nonmembers: np.ndarray,
                  targets: tuple[float, ...] = FPR_TARGETS) -> ScoreMetrics:
    """The metrics of the module docstring for the members' and the non-members' scores (higher = member), the
    same two sides :func:`privaudit.audit.user.scores.score_audit.audit_scores` takes."""
    s = SortedScores.of(members, nonmembers)
    d = s.summary(targets)
    return ScoreMetrics(d["auc"], d["advantage"], d["balanced_accuracy"],
                        {float(t): d["tpr_at_fpr"][fpr_key(t)] for t in targets},
                        {float(t): d["fpr_resolved"][fpr_key(t)] for t in targets}, d["fpr_resolution"],
                        d["n_members"], d["n_nonmembers"])


#: Members merged per chunk by :class:`SortedScores` (bounds its temporary arrays).
CHUNK = 1 << 16


@dataclass(frozen=True)
class SortedScores:
    """The members' and non-members' scores, each sorted ascending (one sort per score vector).

    Counts at a threshold t are binary searches: members >= t is ``n_m - searchsorted(m, t, "left")``.
    Every metric of the module docstring is computed from these counts without concatenating the sides.
    """

    members: np.ndarray
    nonmembers: np.ndarray

    @classmethod
    def of(cls, members: np.ndarray, nonmembers: np.ndarray, *, in_place: bool = False) -> "SortedScores":
        """Sort each side once (float64; ``in_place`` sorts arrays the caller hands over, without a copy)."""
        sides = []
        for name, side in (("members", members), ("nonmembers", nonmembers)):
            a = np.asarray(side, dtype=np.float64).ravel()
            if a.size == 0:
                raise ConfigError("membership: needs at least one member and one non-member")
            if not (in_place and a.flags.writeable) and np.may_share_memory(a, side):
                a = a.copy()
            a.sort()
            if not (np.isfinite(a[0]) and np.isfinite(a[-1])):
                raise ConfigError(f"{name}: scores must be finite (got NaN or infinity)")
            sides.append(a)
        return cls(sides[0], sides[1])

    @property
    def n_members(self) -> int:
        return int(self.members.size)

    @property
    def n_nonmembers(self) -> int:
        return int(self.nonmembers.size)

    def members_at_least(self, t: np.ndarray | float, strict: bool = False) -> np.ndarray:
        """#members >= t (> t with ``strict``), for each t."""
        return self.n_members - np.searchsorted(self.members, t, side="right" if strict else "left")

    def nonmembers_at_least(self, t: np.ndarray | float, strict: bool = False) -> np.ndarray:
        """#non-members >= t (> t with ``strict``), for each t."""
        return self.n_nonmembers - np.searchsorted(self.nonmembers, t, side="right" if strict else "left")

    @cached_property
    def _scan(self) -> tuple[float, float]:
        """(AUC, advantage) from one merge of the members into the non-members, in chunks of :data:`CHUNK`.

        For the member at sorted position i with score m: below = #non-members < m, tied = #non-members = m.
        AUC = sum(below + tied / 2) / (n_m n_n). At threshold m, TPR >= (n_m - i) / n_m with equality at the first
        of a tie, FPR = (n_n - below) / n_n, so max_i of their difference is the advantage (0 at threshold +inf).
        """
        twice_u, best = 0, 0.0
        for start in range(0, self.n_members, CHUNK):
            m = self.members[start:start + CHUNK]
            below = np.searchsorted(self.nonmembers, m, side="left")
            hit = below < self.n_nonmembers
            hit[hit] = self.nonmembers[below[hit]] == m[hit]  # a non-member ties this member's score
            tied = np.zeros(m.size, dtype=np.int64)
            tied[hit] = np.searchsorted(self.nonmembers, m[hit], side="right") - below[hit]
            twice_u += 2 * int(below.sum()) + int(tied.sum())
            tpr = (self.n_members - start - np.arange(m.size)) / self.n_members
            best = max(best, float(np.max(tpr - (self.n_nonmembers - below) / self.n_nonmembers)))
        return twice_u / (2.0 * self.n_members * self.n_nonmembers), best

    def auc(self) -> float:
        """P[member score > non-member score] + P[equal] / 2 (the trapezoidal ROC area, ties one half)."""
        return self._scan[0]

    def advantage(self) -> float:
        """max over thresholds of TPR - FPR (thresholds at every member score, and +infinity: 0)."""
        return self._scan[1]

    def tpr_at_fpr(self, target: float) -> float:
        """TPR of the last ROC point with FPR <= ``target``: the members strictly above the (k+1)-th highest
        non-member score, k = floor(target n_nonmembers) (the module docstring's rule)."""
        if not 0 <= target <= 1:
            raise ConfigError(f"fpr target: must lie in [0, 1], got {target!r}")
        k = int(np.floor((target + 1e-12) * self.n_nonmembers))
        if k >= self.n_nonmembers:
            return 1.0
        cut = self.nonmembers[self.n_nonmembers - 1 - k]
        return float(self.members_at_least(cut, strict=True)) / self.n_members

    def roc(self, max_points: int = 4000) -> Roc:
        """The ROC polyline: at each distinct non-member value v (descending), the point with v excluded then
        included (ties are diagonal segments). With more than ``max_points`` distinct values, the vertices at
        ``max_points`` non-member values spread evenly on a log scale of FPR (for plots and reports)."""
        n = self.n_nonmembers
        if n > max_points:  # vertices at non-member ranks spread evenly in log FPR
            ranks = np.unique(np.geomspace(1, n, max_points).astype(np.int64))
            distinct = np.unique(self.nonmembers[n - ranks])[::-1]
        else:
            values = self.nonmembers[::-1]
            distinct = values[np.r_[True, values[1:] != values[:-1]]]
        before = (self.nonmembers_at_least(distinct, strict=True), self.members_at_least(distinct, strict=True))
        after = (self.nonmembers_at_least(distinct), self.members_at_least(distinct))
        fp = np.r_[0, np.column_stack([before[0], after[0]]).ravel(), self.n_nonmembers]
        tp = np.r_[0, np.column_stack([before[1], after[1]]).ravel(), self.n_members]
        thresholds = np.r_[np.inf, np.repeat(distinct, 2), -np.inf]
        return Roc(fp / self.n_nonmembers, tp / self.n_members, thresholds, self.n_members, self.n_nonmembers)

    def histogram(self, bins: int = 50) -> dict[str, list[float]]:
        """Counts of each side in ``bins`` equal bins spanning both sides' range (edges shared)."""
        lo = min(self.members[0], self.nonmembers[0])
        hi = max(self.members[-1], self.nonmembers[-1])
        edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
        counts = [np.diff(np.searchsorted(side, edges[:-1], side="left").tolist() + [side.size]).tolist()
                  for side in (self.members, self.nonmembers)]
        return {"edges": edges.tolist(), "members": counts[0], "nonmembers": counts[1]}

    def summary(self, targets: tuple[float, ...] = FPR_TARGETS) -> dict[str, object]:
        """AUC, balanced accuracy, advantage, TPR at each FPR target (with resolution flags) and counts."""
        resolution = 1.0 / self.n_nonmembers
        advantage = self.advantage()
        return {
            "auc": self.auc(),
            "balanced_accuracy": (1.0 + advantage) / 2.0,
            "advantage": advantage,
            "tpr_at_fpr": {fpr_key(t): self.tpr_at_fpr(t) for t in targets},
            "fpr_resolution": resolution,
            "fpr_resolved": {fpr_key(t): bool(t >= resolution) for t in targets},
            "n_members": self.n_members,
            "n_nonmembers": self.n_nonmembers,
        }


