"""Utility loss (ALM paper Def. 6.1) and the privacy–utility curve of the three mechanisms (Sec. 6.1).

Utility loss: L_util = 1 - M(y_noisy, y_GT) / M(y, y_GT) with M the accuracy of the head on the
evaluation queries, y the unprotected head's predictions and y_noisy the protected head's. The
released head is random, so the curve reports the mean (and standard deviation) of L_util over
``draws`` independent noise draws. The same standard noise draws are scaled for every epsilon
(common random numbers), so differences between epsilons are not noise in the estimate. Laplace rows are the
snapped release ALM makes (:mod:`privaudit.defenses.alm.snapping`): the same unit draws, snapped at each epsilon's lambda.
"""

from __future__ import annotations

from typing import Iterable

import torch

from privaudit.core.errors import ConfigError, check_positive
from privaudit.defenses.alm.mechanisms import GAUSSIAN_CALIBRATIONS, MECHANISMS, calibrate_noise, standard_noise
from privaudit.defenses.alm.snapping import DEFAULT_CLAMP_FLOOR, snap, unit_laplace


def utility_loss(metric_protected: float | torch.Tensor, metric_unprotected: float) -> float | torch.Tensor:
    """Def. 6.1: 1 - M(protected) / M(unprotected)."""
    if metric_unprotected <= 0:
        raise ValueError("utility_loss: the unprotected metric must be positive")
    return 1.0 - metric_protected / metric_unprotected


def head_accuracy(weights: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Accuracy of heads W (..., K, D) on features x (N, D) with the bias column appended; shape (...)."""
    logits = torch.einsum("nd,...kd->...nk", x.to(weights.dtype), weights)
    return (logits.argmax(dim=-1) == y).to(weights.dtype).mean(dim=-1)


def privacy_utility_curve(weights: torch.Tensor, x_eval: torch.Tensor, y_eval: torch.Tensor, *, l1: float, l2: float,
                          epsilons: Iterable[float], delta: float, gen: torch.Generator, draws: int = 20,
                          mechanisms: Iterable[str] = MECHANISMS,
                          gaussian: Iterable[str] = GAUSSIAN_CALIBRATIONS,
                          clamp_bound: float = DEFAULT_CLAMP_FLOOR) -> list[dict]:
    """One row per (mechanism, epsilon): noise scale and the utility loss over ``draws`` noise draws.

    Logistic and Laplace noise use the L1 sensitivity ``l1`` (Laplace: snapped with ``clamp_bound`` B, its
    epsilon including the overhead); Gaussian noise the L2 sensitivity ``l2`` and ``delta``, once per
    calibration in ``gaussian`` (``zcdp``: the discrete Gaussian's sound calibration; ``classical``: the paper's
    formula, the row's ``epsilon_claimed`` what that noise gives). Logistic and Gaussian rows add the continuous
    noise at the released scale (common random numbers): the release itself is on a grid 2^-40 s (logistic) or
    sigma / 4096 (Gaussian) fine, so its utility is the same to that resolution. A Laplace row whose lambda breaks
    the snapping theorem's lambda < B < 2^46 lambda is
    reported ``valid`` False with the reason and no utility (no release is made there).
    """
    check_positive("draws", draws)
    clean = float(head_accuracy(weights, x_eval, y_eval))
    epsilons = [float(e) for e in epsilons]
    rows = []
    for mechanism in mechanisms:
        shape = (draws, *weights.shape)
        base = unit_laplace(shape, gen) if mechanism == "laplace" else standard_noise(mechanism, shape, gen)
        calibrations = list(gaussian) if mechanism == "gaussian" else ["pure"]
        for calibration in calibrations:
            for eps in epsilons:
                try:
                    cal = calibrate_noise(mechanism, eps, l1=l1, l2=l2, delta=delta,
                                          gaussian=calibration if mechanism == "gaussian" else "zcdp",
                                          clamp_bound=clamp_bound, coordinates=int(weights.numel()))
                except ConfigError as exc:  # snapping outside Thm. 1's lambda < B < 2^46 lambda: no release
                    if mechanism != "laplace":
                        raise
                    rows.append({"mechanism": mechanism, "epsilon": eps, "delta": 0.0, "norm": "l1",
                                 "sensitivity": l1, "scale": float("nan"), "noise_std": float("nan"),
                                 "valid": False, "reason": str(exc), "accuracy_clean": clean,
                                 "accuracy_mean": float("nan"), "utility_loss_mean": float("nan"),
                                 "utility_loss_std": float("nan"), "draws": draws})
                    continue
                if mechanism == "laplace":
                    noisy = snap(weights.unsqueeze(0), base, cal.scale, clamp_bound)
                else:
                    noisy = weights.unsqueeze(0) + cal.scale * base
                acc = head_accuracy(noisy, x_eval, y_eval)
                loss = utility_loss(acc, clean)
                rows.append({
                    "mechanism": mechanism if mechanism != "gaussian" else f"gaussian-{calibration}",
                    "epsilon": eps, "epsilon_claimed": cal.epsilon, "delta": cal.delta, "norm": cal.norm, "sensitivity": cal.sensitivity,
                    "scale": cal.scale, "noise_std": cal.std, "valid": cal.valid,
                    "accuracy_clean": clean, "accuracy_mean": float(acc.mean()),
                    "utility_loss_mean": float(loss.mean()), "utility_loss_std": float(loss.std()) if draws > 1 else 0.0,
                    "draws": draws,
                })
    return rows
