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
"""

from __future__ import annotations

from dataclasses import dataclass

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
    from sklearn.metrics import roc_auc_score

    scores, membership = _check(scores, membership)
    return float(roc_auc_score(membership, scores))


def balanced_accuracy(scores: np.ndarray, membership: np.ndarray) -> float:
    """max over thresholds of (TPR + 1 - FPR) / 2 (oracle threshold; see the module docstring)."""
    r = roc(scores, membership)
    return float(np.max((r.tpr + 1.0 - r.fpr) / 2.0))


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
    """AUC, balanced accuracy, TPR at each FPR target (with resolution flags) and counts."""
    r = roc(scores, membership)
    resolution = 1.0 / r.n_nonmembers
    return {
        "auc": auc(scores, membership),
        "balanced_accuracy": float(np.max((r.tpr + 1.0 - r.fpr) / 2.0)),
        "tpr_at_fpr": {fpr_key(t): tpr_at_fpr_from_roc(r, t) for t in targets},
        "fpr_resolution": resolution,
        "fpr_resolved": {fpr_key(t): bool(t >= resolution) for t in targets},
        "n_members": r.n_members,
        "n_nonmembers": r.n_nonmembers,
    }


def plot_roc(curves: dict[str, Roc], path: str, title: str = "") -> str:
    """Write a log-log ROC plot (one curve per entry, chance line dashed) to ``path`` (PNG/PDF/SVG)."""
    import io

    import matplotlib
    from sklearn.metrics import auc as area  # trapezoidal area; np.trapezoid needs numpy >= 2

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from privaudit.core.io import atomic_write_bytes

    fig, ax = plt.subplots(figsize=(4.2, 3.6))
    floor = min(0.5 / max(r.n_nonmembers, 1) for r in curves.values())
    for name, r in curves.items():
        pts = loglog_roc(r, floor)
        ax.plot(pts["fpr"], pts["tpr"], label=f"{name} (AUC {area(r.fpr, r.tpr):.3f})")
    ax.plot([floor, 1], [floor, 1], ls="--", color="grey", lw=1, label="chance")
    ax.set(xscale="log", yscale="log", xlim=(floor, 1), ylim=(floor, 1), xlabel="FPR", ylabel="TPR", title=title)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buffer = io.BytesIO()
    fmt = path.rsplit(".", 1)[-1] if "." in path else "png"
    fig.savefig(buffer, format=fmt)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return path
