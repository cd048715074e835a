"""Additive noise mechanisms of the ALM paper and their calibration: logistic, Laplace, Gaussian.

Every release here is sound in floating point: its outputs lie on a grid that every input reaches, so no output is
impossible under a neighbour (the reachability test, :mod:`privaudit.attacks.step.reachability`). The textbook float64
releases x + s xi are not: 77% (epsilon 1) to 99% (epsilon 8) of the float64 logistic release's outputs on the
digits head cannot be produced from a neighbour (Mironov 2012, "On significance of the least significant bits for
differential privacy"). :class:`FloatLogisticRelease` keeps that textbook sampler, for the tests and the audit
that catch it; ALM never releases with it.

* Logistic (ALM paper Def. 4.1, Thm. 4.1, Remark 4.1): i.i.d. Logistic(0, s) per coordinate on a query of L1
  sensitivity Delta_1 is pure eps-DP with eps = Delta_1 / s (the privacy loss is at most |f(x)-f(y)|/s, with
  equality as z -> +-inf, so the bound is tight). Its standard deviation is pi s / sqrt(3) ~ 1.814 s, against
  sqrt(2) b ~ 1.414 b for Laplace noise of the same epsilon: at equal epsilon the logistic mechanism adds 28% more
  noise than Laplace. Released exactly on a grid (:mod:`privaudit.defenses.alm.grid`): the clamped input rounded
  to a power-of-two step Lambda plus an exact discrete logistic; pure eps = (Delta_1 + d Lambda) / s, the grid's
  cost d Lambda / s (below d 2^-40 + d B 2^-52 / s) included in the claim, s calibrated so the total is the
  target.
* Laplace (Remark 4.2): released through Mironov's snapping mechanism (:mod:`privaudit.defenses.alm.snapping`):
  clamp to [-B, B], round to a power-of-two grid; pure eps = Delta_1 / lambda + d 2^-49 B / lambda (Mironov 2012,
  Thm. 1, per coordinate), lambda calibrated so that this total, overhead included, is the claimed epsilon.
* Gaussian (Remark 4.2): the paper's sigma = sqrt(2 ln(1.25/delta)) Delta_2 / eps is Dwork & Roth's Thm. A.1,
  only proven for eps < 1. Released exactly on a grid as a discrete Gaussian (Canonne, Kamath & Steinke 2020),
  whose guarantee is its zCDP (Thm. 14): rho = (Delta_2 + sqrt(d) Lambda)^2 / (2 sigma^2), converted to (eps,
  delta) by the RDP accountant's conversion. ``zcdp`` (default) calibrates sigma to that; ``classical`` sets sigma
  by the paper's formula and claims the epsilon it actually gives.

Every release clamps to [-B, B] (``clamp_bound``; ALM's default B provably never binds on its head).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from privaudit.accountants.rdp.conversions import rdp_to_dp
from privaudit.accountants.gaussian import classical_gaussian_noise_multiplier
from privaudit.core.errors import ConfigError, check_positive, one_of
from privaudit.defenses.alm.grid import (GridNoise, gaussian_grid, grid_noise, grid_overhead, grid_release,
                                         logistic_grid, on_grid)
from privaudit.defenses.alm.snapping import (grid_step, snap, snapping_epsilon, snapping_overhead, snapping_release,
                                             snapping_scale)

MECHANISMS = ("logistic", "laplace", "gaussian")
GAUSSIAN_CALIBRATIONS = ("zcdp", "classical")

_LOGISTIC_STD = math.pi / math.sqrt(3.0)  # std of Logistic(0, 1)
_LAPLACE_STD = math.sqrt(2.0)  # std of Laplace(0, 1)


# -- sampling ---------------------------------------------------------------------------------------
def _open_uniform(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Uniform(0, 1) samples strictly inside the interval (float64): k 2^-53, k = 0 moved up to the smallest
    normal double."""
    tiny = torch.finfo(torch.float64).tiny
    return torch.rand(shape, generator=gen, dtype=torch.float64).clamp(tiny, 1.0 - 2 ** -53)


def logit(u: torch.Tensor) -> torch.Tensor:
    """log(u) - log1p(-u): the logistic quantile function as the textbook float64 sampler computes it."""
    return torch.log(u) - torch.log1p(-u)


def standard_noise(mechanism: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Unit-scale float64 noise: Logistic(0, 1), Laplace(0, 1) or N(0, 1), by inverse CDF (Gaussian: torch).

    Continuous-valued draws for the privacy-utility curve's common random numbers; adding them to a value is the
    textbook float release that leaks through its last bits (Mironov 2012): ALM releases only through
    :func:`add_noise`.
    """
    if mechanism == "logistic":
        return logit(_open_uniform(shape, gen))
    if mechanism == "laplace":
        u = _open_uniform(shape, gen) - 0.5
        return -torch.sign(u) * torch.log1p(-2.0 * u.abs())
    if mechanism == "gaussian":
        return torch.randn(shape, generator=gen, dtype=torch.float64)
    raise one_of("mechanism", mechanism, MECHANISMS)


# -- releases: a sampler and a description of its support --------------------------------------------
class GridRelease:
    """The exact grid release of :mod:`privaudit.defenses.alm.grid` (logistic or Gaussian): every multiple of
    Lambda in [-B, B] is reachable from every input, so :meth:`support` is the reachability test."""

    def __init__(self, noise: GridNoise):
        self.noise = noise
        self.description = (f"{noise.mechanism} released exactly on the grid Lambda = {noise.grid:.4g} within "
                            f"[-{noise.clamp_bound:.4g}, {noise.clamp_bound:.4g}]")

    def draw(self, values: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        return grid_release(values, self.noise, gen)

    def support(self, y: torch.Tensor) -> torch.Tensor:
        """Whether each output can be released from any input (the grid's support does not depend on it)."""
        return on_grid(y, self.noise)


class SnappedLaplaceRelease:
    """Mironov's snapping mechanism (:mod:`privaudit.defenses.alm.snapping`): outputs are multiples of Lambda
    within [-B, B], or +-B; every such output is reachable from every input (Thm. 1's pure DP)."""

    def __init__(self, lam: float, clamp_bound: float):
        self.lam, self.clamp_bound, self.grid = float(lam), float(clamp_bound), grid_step(lam)
        self.description = (f"Laplace through Mironov's snapping mechanism, lambda = {lam:.4g}, grid "
                            f"{self.grid:.4g}, B = {clamp_bound:.4g}")

    def draw(self, values: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        return snapping_release(values, self.lam, self.clamp_bound, gen)

    def support(self, y: torch.Tensor) -> torch.Tensor:
        y = y.double()
        t = y / self.grid
        return torch.isfinite(y) & (((t == torch.floor(t)) & (y.abs() <= self.clamp_bound))
                                    | (y.abs() == self.clamp_bound))


class FloatLogisticRelease:
    """The textbook float64 logistic release x + s (log u - log1p(-u)), u = k 2^-53 (k = 0 moved to the
    smallest normal double): what ALM released before its grid release, kept to show and test the leak.

    Its outputs are not a grid: which doubles it can produce depends on x. :meth:`at` is the release as a
    function of the sampler's randomness k, nondecreasing in k, so the reachability test inverts it by bisection
    (:func:`privaudit.attacks.step.reachability.reachable`).
    """

    #: the sampler's randomness: k in [0, 2^53)
    randomness = (0, 2 ** 53 - 1)

    def __init__(self, scale: float):
        self.scale = float(scale)
        self.description = f"textbook float64 logistic x + s (log u - log1p(-u)), s = {scale:.4g}, u = k 2^-53"

    def draw(self, values: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        return values.double() + self.scale * logit(_open_uniform(tuple(values.shape), gen))

    def at(self, values: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """The release of ``values`` when the uniform is k 2^-53 (elementwise, float64)."""
        tiny = torch.finfo(torch.float64).tiny
        u = (k.double() * 2.0 ** -53).clamp(tiny, 1.0 - 2 ** -53)
        return values.double() + self.scale * logit(u)


def release_of(mechanism: str, scale: float, clamp_bound: float, grid: float | None = None):
    """The release ALM makes with ``mechanism`` at noise scale ``scale`` (s, lambda or sigma) and clamp bound B:
    an object with ``draw(values, gen)`` and a description of its support for the reachability test. The one
    place that chooses it: :func:`add_noise` draws through it and the release audit checks its support."""
    check_positive("scale", scale)
    if clamp_bound is None:
        raise ConfigError(f"clamp_bound: the {mechanism} release needs a clamp bound B > 0")
    if mechanism == "laplace":
        return SnappedLaplaceRelease(scale, clamp_bound)
    if mechanism in ("logistic", "gaussian"):
        return GridRelease(_grid_noise_at(mechanism, scale, clamp_bound, grid))
    raise one_of("mechanism", mechanism, MECHANISMS)


def _grid_noise_at(mechanism: str, scale: float, clamp_bound: float, grid: float | None) -> GridNoise:
    """The grid noise whose scale is ``scale`` (a calibrated, already representable one: kept as is)."""
    if mechanism == "gaussian" and grid is not None:
        ratio2 = (scale / grid) ** 2
        if abs(ratio2 - round(ratio2)) < 1e-6 * ratio2:  # sigma = sqrt(integer) Lambda, as calibrated
            return GridNoise("gaussian", float(grid), float(clamp_bound), int(round(ratio2)), 1)
    return grid_noise(mechanism, scale, clamp_bound, grid)


def add_noise(values: torch.Tensor, mechanism: str, scale: float, gen: torch.Generator, *,
              clamp_bound: float | None = None, grid: float | None = None) -> torch.Tensor:
    """The release: ``values`` plus ``mechanism``'s noise at ``scale`` per coordinate (Def. 4.1, Remark 4.2), float64.

    Through :func:`release_of`: logistic and Gaussian exactly on the grid Lambda (``grid``, default from the
    scale), Laplace through the snapping mechanism; every output within [-B, B] (``clamp_bound``, required). The one
    implementation of the noise ALM releases with (:meth:`privaudit.defenses.alm.defense.ALM.fit`); the release
    audit draws its releases through it, with a leading batch dimension for many draws.
    """
    return release_of(mechanism, scale, clamp_bound, grid).draw(values, gen)


def log_density(mechanism: str, x: torch.Tensor) -> torch.Tensor:
    """log p(x) of the unit-scale noise, elementwise (float64): the optimal test's ingredient.

    Logistic: -|x| - 2 log(1 + e^{-|x|}) (Def. 4.1; symmetric, so |x| keeps it stable in both tails);
    Laplace: -|x| - log 2; Gaussian: -x^2 / 2 - log(2 pi) / 2. The grid releases' mass functions are these
    densities at the grid points over one normaliser, so the same log-likelihood ratio is exact for them.
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

    ``scale`` is s (logistic), lambda (Laplace) or sigma (Gaussian); ``noise_multiplier`` the one the claim's
    event carries: s / Delta_1 (logistic), lambda / Delta_1 (Laplace), sigma / (Delta_2 + sqrt(d) Lambda)
    (Gaussian on its grid); ``valid`` is False when the calibration is not a proven guarantee. ``clamp_bound`` B,
    ``grid`` Lambda, ``coordinates`` d and ``overhead``: the part of ``epsilon`` the floating-point-safe release
    pays beyond the real mechanism's (logistic: d Lambda / s; Laplace: d 2^-49 B / lambda, Mironov 2012 Thm. 1;
    Gaussian: 0, its grid enters the noise multiplier, and ``grid_cost`` is sqrt(d) Lambda / Delta_2).
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
    grid_cost: float = 0.0

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
    overhead = snapping_overhead(lam, clamp_bound, coordinates)
    return NoiseCalibration("laplace", eps, 0.0, "l1", l1, lam / l1, lam, noise_std("laplace", lam), "snapping", True,
                            float(clamp_bound), grid_step(lam), int(coordinates), overhead, overhead / eps)


def logistic_calibration(epsilon: float | None, *, l1: float, clamp_bound: float, coordinates: int,
                         noise_multiplier: float | None = None) -> NoiseCalibration:
    """The exact grid logistic release at pure ``epsilon`` (or at ``noise_multiplier`` = s / Delta_1).

    Lambda from the real mechanism's scale (:func:`privaudit.defenses.alm.grid.logistic_grid`), then s = (Delta_1
    + d Lambda) / eps rounded up to what the integer sampler represents: the claimed eps = (Delta_1 + d Lambda) / s
    is at most the target (equal to 12 significant digits). With a noise multiplier z: s = z Delta_1, eps = 1 / z +
    d Lambda / s.
    """
    check_positive("sensitivity_l1", l1)
    check_positive("coordinates", coordinates)
    if noise_multiplier is None:
        check_positive("epsilon", epsilon)
        lam = logistic_grid(l1 / float(epsilon), clamp_bound)
        target = (l1 + grid_overhead("logistic", lam, coordinates)) / float(epsilon)
    else:
        check_positive("noise_multiplier", noise_multiplier)
        lam = logistic_grid(noise_multiplier * l1, clamp_bound)
        target = noise_multiplier * l1
    s = grid_noise("logistic", target, clamp_bound, lam).scale
    overhead = grid_overhead("logistic", lam, coordinates) / s
    eps = l1 / s + overhead
    return NoiseCalibration("logistic", eps, 0.0, "l1", l1, s / l1, s, noise_std("logistic", s), "grid", True,
                            float(clamp_bound), lam, int(coordinates), overhead, overhead / eps)


def discrete_gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """(eps at ``delta``) of rho-zCDP with rho = 1 / (2 z^2): the RDP accountant's default orders and conversion
    (the number its ``rdp`` accountant reports for :class:`privaudit.accountants.events.DiscreteGaussianDpEvent`)."""
    from privaudit.accountants.rdp.rdp import DEFAULT_ORDERS

    check_positive("noise_multiplier", noise_multiplier)
    check_positive("delta", delta)
    orders = [a for a in DEFAULT_ORDERS if a > 1]
    return rdp_to_dp(orders, [a / (2 * noise_multiplier ** 2) for a in orders], delta)[0]


def discrete_gaussian_noise_multiplier(epsilon: float, delta: float) -> float:
    """The smallest z (to 1e-10 relative) with :func:`discrete_gaussian_epsilon` (z, delta) <= epsilon."""
    check_positive("epsilon", epsilon)
    lo, hi = 1e-3, 1.0
    while discrete_gaussian_epsilon(hi, delta) > epsilon:
        lo, hi = hi, hi * 2
    while hi - lo > 1e-10 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if discrete_gaussian_epsilon(mid, delta) > epsilon else (lo, mid)
    return hi


def gaussian_calibration(epsilon: float | None, *, l2: float, delta: float, clamp_bound: float, coordinates: int,
                         gaussian: str = "zcdp", noise_multiplier: float | None = None) -> NoiseCalibration:
    """The exact discrete Gaussian release on its grid at (``epsilon``, ``delta``).

    z from the calibration (``zcdp``: the smallest with the zCDP's epsilon <= target; ``classical``: the paper's
    sqrt(2 ln(1.25/delta)) / eps), or ``noise_multiplier`` = sigma / Delta_2 given; sigma = z (Delta_2 + sqrt(d)
    Lambda), rounded up so that sigma^2 / Lambda^2 is an integer; the claim's z = sigma / (Delta_2 + sqrt(d) Lambda)
    and its epsilon the zCDP's at delta (for ``classical`` too: the claim is what the noise gives).
    """
    check_positive("sensitivity_l2", l2)
    check_positive("coordinates", coordinates)
    if gaussian not in GAUSSIAN_CALIBRATIONS:
        raise one_of("gaussian_calibration", gaussian, GAUSSIAN_CALIBRATIONS)
    if noise_multiplier is not None:
        check_positive("noise_multiplier", noise_multiplier)
        lam = gaussian_grid(noise_multiplier * l2, clamp_bound)
        sigma = noise_multiplier * l2
    else:
        check_positive("epsilon", epsilon)
        z = (discrete_gaussian_noise_multiplier(float(epsilon), delta) if gaussian == "zcdp"
             else classical_gaussian_noise_multiplier(float(epsilon), delta))
        lam = gaussian_grid(z * l2, clamp_bound)
        sigma = z * (l2 + grid_overhead("gaussian", lam, coordinates))
    noise = grid_noise("gaussian", sigma, clamp_bound, lam)
    effective = l2 + grid_overhead("gaussian", lam, coordinates)
    z_claim = noise.scale / effective
    eps = discrete_gaussian_epsilon(z_claim, delta)
    return NoiseCalibration("gaussian", eps, delta, "l2", l2, z_claim, noise.scale, noise.scale, gaussian, True,
                            float(clamp_bound), lam, int(coordinates), 0.0, effective / l2 - 1.0)


def calibrate_noise(mechanism: str, epsilon: float, *, l1: float, l2: float, delta: float = 0.0,
                    gaussian: str = "zcdp", clamp_bound: float | None = None,
                    coordinates: int | None = None) -> NoiseCalibration:
    """Noise scale of ``mechanism`` for (epsilon, delta) given L1 / L2 sensitivities (ALM Sec. 4), released as
    :func:`add_noise` releases it; every mechanism needs ``clamp_bound`` and the number of released ``coordinates``
    (the floating-point-safe releases pay per coordinate)."""
    check_positive("epsilon", epsilon)
    if mechanism not in MECHANISMS:
        raise one_of("mechanism", mechanism, MECHANISMS)
    if clamp_bound is None or coordinates is None:
        raise ConfigError(f"clamp_bound: the {mechanism} release needs a clamp bound and the number of released "
                          "coordinates")
    if mechanism == "laplace":
        return snapped_calibration(epsilon, l1=l1, clamp_bound=clamp_bound, coordinates=coordinates)
    if mechanism == "logistic":
        return logistic_calibration(epsilon, l1=l1, clamp_bound=clamp_bound, coordinates=coordinates)
    return gaussian_calibration(epsilon, l2=l2, delta=delta, clamp_bound=clamp_bound, coordinates=coordinates,
                                gaussian=gaussian)


def epsilon_at(cal: NoiseCalibration, sensitivity: float) -> float:
    """The epsilon the release ``cal`` describes gives at another sensitivity (in its norm), grid cost included."""
    check_positive("sensitivity", sensitivity)
    if cal.mechanism == "gaussian":
        effective = sensitivity + grid_overhead("gaussian", cal.grid, cal.coordinates)
        return discrete_gaussian_epsilon(cal.scale / effective, cal.delta)
    return sensitivity / cal.scale + cal.overhead


def epsilon_of_noise(mechanism: str, noise_multiplier: float, *, delta: float = 0.0) -> float:
    """Epsilon of the real-arithmetic mechanism at noise multiplier z (logistic and Laplace 1 / z; Gaussian: the
    zCDP's at ``delta``), without the grid's cost (:func:`epsilon_at` includes it)."""
    check_positive("noise_multiplier", noise_multiplier)
    if mechanism in ("logistic", "laplace"):
        return 1.0 / noise_multiplier
    if mechanism == "gaussian":
        return discrete_gaussian_epsilon(noise_multiplier, delta)
    raise one_of("mechanism", mechanism, MECHANISMS)
