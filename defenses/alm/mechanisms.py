"""Additive noise mechanisms of the ALM paper and their calibration: logistic, Laplace, Gaussian.

* Logistic (ALM paper Def. 4.1, Thm. 4.1, Remark 4.1): i.i.d. Logistic(0, s) per coordinate on a
  query of L1 sensitivity Delta_1 is pure eps-DP with eps = Delta_1 / s (the privacy loss
  (f(x)-f(y))/s + 2 log((1+e^{(f(y)-z)/s}) / (1+e^{(f(x)-z)/s})) is at most |f(x)-f(y)|/s, with
  equality as z -> +-inf, so the bound is tight). Its standard deviation is pi s / sqrt(3)
  ~ 1.814 s, against sqrt(2) b ~ 1.414 b for Laplace noise of the same epsilon (b = s): at equal
  epsilon the logistic mechanism adds 28% more noise than Laplace.
* Laplace (Remark 4.2): scale b = Delta_1 / eps, pure eps-DP over the reals. Released through Mironov's
  snapping mechanism (:mod:`privaudit.defenses.alm.snapping`): the plain float64 Laplace release leaks through its last bits
  (the release audit refutes it: docs/notes/defenses-attacks.md), so it is no longer a release option. The
  snapped release clamps to [-B, B] (``clamp_bound``) and rounds to a power-of-two grid; its pure epsilon is
  Delta_1 / lambda + d 2^-49 B / lambda (Mironov 2012, Thm. 1, per coordinate), and lambda is calibrated so
  that this total, overhead included, is the claimed epsilon.
* Gaussian (Remark 4.2): the paper's sigma = sqrt(2 ln(1.25/delta)) Delta_2 / eps is Dwork & Roth's
  Thm. A.1, which is only proven for eps < 1; the paper uses it up to eps = 10. We calibrate with
  the exact analytic Gaussian mechanism (Balle & Wang 2018, Thm. 8): the smallest sigma with
  Phi(Delta/(2 sigma) - eps sigma/Delta) - e^eps Phi(-Delta/(2 sigma) - eps sigma/Delta) <= delta,
  valid for every eps, and offer the classical formula (flagged invalid for eps >= 1) for
  comparison with the paper.

Noise is drawn on the CPU from a seeded ``torch.Generator`` in float64 (inverse-CDF sampling).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from privaudit.accountants.gaussian import (analytic_gaussian_epsilon, analytic_gaussian_noise_multiplier,
                                  classical_gaussian_epsilon, classical_gaussian_noise_multiplier)
from privaudit.core.errors import ConfigError, check_positive, one_of
from privaudit.defenses.alm.snapping import grid_step, snapping_epsilon, snapping_overhead, snapping_release, snapping_scale

MECHANISMS = ("logistic", "laplace", "gaussian")
GAUSSIAN_CALIBRATIONS = ("analytic", "classical")

_LOGISTIC_STD = math.pi / math.sqrt(3.0)  # std of Logistic(0, 1)
_LAPLACE_STD = math.sqrt(2.0)  # std of Laplace(0, 1)


# -- sampling ---------------------------------------------------------------------------------------
def _open_uniform(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Uniform(0, 1) samples strictly inside the interval (float64)."""
    tiny = torch.finfo(torch.float64).tiny
    return torch.rand(shape, generator=gen, dtype=torch.float64).clamp(tiny, 1.0 - 2 ** -53)


def standard_noise(mechanism: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Unit-scale noise: Logistic(0, 1), Laplace(0, 1) or N(0, 1), float64, by inverse CDF.

    The Laplace draws here are the plain float64 ones (53-bit uniforms): adding them to a value is the release
    that leaks through its last bits (Mironov 2012); ALM releases Laplace noise only through the snapping
    mechanism (:func:`add_noise`).
    """
    if mechanism == "logistic":
        u = _open_uniform(shape, gen)
        return torch.log(u) - torch.log1p(-u)  # F^{-1}(u) = log(u / (1 - u))
    if mechanism == "laplace":
        u = _open_uniform(shape, gen) - 0.5
        return -torch.sign(u) * torch.log1p(-2.0 * u.abs())
    if mechanism == "gaussian":
        return torch.randn(shape, generator=gen, dtype=torch.float64)
    raise one_of("mechanism", mechanism, MECHANISMS)


def add_noise(values: torch.Tensor, mechanism: str, scale: float, gen: torch.Generator, *,
              clamp_bound: float | None = None) -> torch.Tensor:
    """The release: ``values`` + scale x i.i.d. unit noise per coordinate (Def. 4.1, Remark 4.2), float64.

    Laplace: the snapping mechanism with lambda = ``scale`` and B = ``clamp_bound`` (required), outputs on the
    grid of multiples of the smallest power of two >= scale, within [-B, B]. The one implementation of the noise
    ALM releases with (:meth:`privaudit.defenses.alm.defense.ALM.fit`); the step audit draws its releases through it,
    with a leading batch dimension for many draws.
    """
    check_positive("scale", scale)
    if mechanism == "laplace":
        if clamp_bound is None:
            raise ConfigError("clamp_bound: the Laplace release (snapping mechanism) needs a clamp bound B > 0")
        return snapping_release(values, scale, clamp_bound, gen)
    return values.double() + scale * standard_noise(mechanism, tuple(values.shape), gen)


def log_density(mechanism: str, x: torch.Tensor) -> torch.Tensor:
    """log p(x) of the unit-scale noise, elementwise (float64): the optimal test's ingredient.

    Logistic: -|x| - 2 log(1 + e^{-|x|}) (Def. 4.1; symmetric, so |x| keeps it stable in both tails);
    Laplace: -|x| - log 2; Gaussian: -x^2 / 2 - log(2 pi) / 2.
    """
    x = x.double()
    if mechanism == "logistic":
        a = x.abs()
        return -a - 2.0 * torch.log1p(torch.exp(-a))
    if mechanism == "laplace":
        return -x.abs() - math.log(2.0)
    if mechanism == "gaussian":
        return -0.5 * x * x - 0.5 * math.log(2.0 * math.pi)
    raise one_of("mechanism", mechanism, MECHANISMS)


def noise_std(mechanism: str, scale: float) -> float:
    """Per-coordinate standard deviation of the mechanism's noise at scale s, b or sigma."""
    factor = {"logistic": _LOGISTIC_STD, "laplace": _LAPLACE_STD, "gaussian": 1.0}
    if mechanism not in factor:
        raise one_of("mechanism", mechanism, MECHANISMS)
    return factor[mechanism] * scale


# -- calibration ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NoiseCalibration:
    """The noise one mechanism adds to meet (epsilon, delta) at the given sensitivities.

    ``scale`` is s (logistic), lambda (Laplace) or sigma (Gaussian); ``noise_multiplier`` = scale /
    sensitivity in the mechanism's norm (L1 for logistic and Laplace, L2 for Gaussian); ``valid``
    is False when the calibration formula is not a proven guarantee at this epsilon. Laplace (snapping):
    ``clamp_bound`` B, ``grid`` Lambda, ``coordinates`` d and ``overhead`` d 2^-49 B / lambda, the part of
    ``epsilon`` the floating-point-safe release pays beyond Delta_1 / lambda (Mironov 2012, Thm. 1).
    """

    mechanism: str
    epsilon: float
    delta: float
    norm: str
    sensitivity: float
    noise_multiplier: float
    scale: float
    std: float
    calibration: str
    valid: bool
    clamp_bound: float | None = None
    grid: float | None = None
    coordinates: int | None = None
    overhead: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def snapped_calibration(epsilon: float | None, *, l1: float, clamp_bound: float, coordinates: int,
                        noise_multiplier: float | None = None) -> NoiseCalibration:
    """The snapped Laplace release at total pure ``epsilon`` (or at ``noise_multiplier`` = lambda / Delta_1).

    lambda = (Delta_1 + d 2^-49 B) / eps, so Delta_1 / lambda + d 2^-49 B / lambda = eps (Mironov 2012, Thm. 1
    per coordinate, composed over the d coordinates); with a noise multiplier z, lambda = z Delta_1 and epsilon is
    that sum. Both check Thm. 1's lambda < B < 2^46 lambda (ConfigError naming ``clamp_bound``).
    """
    check_positive("sensitivity_l1", l1)
    if noise_multiplier is None:
        lam = snapping_scale(float(epsilon), l1, clamp_bound, coordinates)
        eps = float(epsilon)
    else:
        check_positive("noise_multiplier", noise_multiplier)
        lam = noise_multiplier * l1
        eps = snapping_epsilon(l1, lam, clamp_bound, coordinates)
    # the std of the unrounded noise; rounding to the grid adds at most Lambda / 2 per coordinate
    return NoiseCalibration("laplace", eps, 0.0, "l1", l1, lam / l1, lam, noise_std("laplace", lam), "snapping", True,
                            float(clamp_bound), grid_step(lam), int(coordinates),
                            snapping_overhead(lam, clamp_bound, coordinates))


def calibrate_noise(mechanism: str, epsilon: float, *, l1: float, l2: float, delta: float = 0.0,
                    gaussian: str = "analytic", clamp_bound: float | None = None,
                    coordinates: int | None = None) -> NoiseCalibration:
    """Noise scale of ``mechanism`` for (epsilon, delta) given L1 / L2 sensitivities (ALM Sec. 4).

    Laplace is the snapped release (:func:`snapped_calibration`) and needs ``clamp_bound`` and ``coordinates``.
    """
    check_positive("epsilon", epsilon)
    if mechanism == "laplace":
        if clamp_bound is None or coordinates is None:
            raise ConfigError("clamp_bound: the Laplace release (snapping mechanism) needs a clamp bound and the "
                              "number of released coordinates")
        return snapped_calibration(epsilon, l1=l1, clamp_bound=clamp_bound, coordinates=coordinates)
    if mechanism == "logistic":
        z = 1.0 / epsilon  # Thm. 4.1 (logistic: eps = Delta_1 / s)
        return NoiseCalibration(mechanism, epsilon, 0.0, "l1", l1, z, z * l1, noise_std(mechanism, z * l1),
                                "pure", True)
    if mechanism == "gaussian":
        if gaussian == "analytic":
            z, valid = analytic_gaussian_noise_multiplier(epsilon, delta), True
        elif gaussian == "classical":
            z, valid = classical_gaussian_noise_multiplier(epsilon, delta), epsilon < 1.0
        else:
            raise one_of("gaussian_calibration", gaussian, GAUSSIAN_CALIBRATIONS)
        return NoiseCalibration(mechanism, epsilon, delta, "l2", l2, z, z * l2, z * l2, gaussian, valid)
    raise one_of("mechanism", mechanism, MECHANISMS)


def epsilon_of_noise(mechanism: str, noise_multiplier: float, *, delta: float = 0.0,
                     gaussian: str = "analytic") -> float:
    """Epsilon a mechanism achieves at noise multiplier scale / sensitivity (inverse of calibration).

    Laplace: the real-arithmetic Laplace mechanism's 1 / z, without the snapping overhead (which depends on B,
    the sensitivity and the coordinate count: :func:`privaudit.defenses.alm.snapping.snapping_epsilon`).
    """
    check_positive("noise_multiplier", noise_multiplier)
    if mechanism in ("logistic", "laplace"):
        return 1.0 / noise_multiplier
    if mechanism == "gaussian":
        if gaussian == "analytic":
            return analytic_gaussian_epsilon(noise_multiplier, delta)
        if gaussian == "classical":
            return classical_gaussian_epsilon(noise_multiplier, delta)
        raise one_of("gaussian_calibration", gaussian, GAUSSIAN_CALIBRATIONS)
    raise one_of("mechanism", mechanism, MECHANISMS)
