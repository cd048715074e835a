"""Mironov's snapping mechanism: a Laplace release that stays pure DP in floating point.

Why. The textbook float64 Laplace release m + b * log(u) (u a 53-bit uniform) leaks through the last bits of
its output: which doubles can occur near an output y depends on m, so the output's low-order bits identify the
input (Mironov 2012, "On significance of the least significant bits for differential privacy", CCS, Sec. 4);
the release audit refutes ALM's plain float Laplace option this way (docs/notes/defenses-attacks.md).

The mechanism (Mironov 2012, Sec. 5.2, eq. of the snapping mechanism), per coordinate::

    f~(D) = clamp_B( round_Lambda( clamp_B(f(D)) (+) S (x) lambda (x) LN(U*) ) )

* ``clamp_B`` clamps to [-B, B]; ``round_Lambda`` rounds to the nearest multiple of Lambda, the smallest power of
  two >= lambda (ties towards +inf); (+), (x) are IEEE float64 operations;
* S is a uniform sign; U* is uniform on the doubles in (0, 1), each double drawn with probability equal to the
  length of the real interval that rounds down to it. Built as the paper suggests: a significand 1.m with 52
  uniform bits times 2^-e, the exponent e >= 1 geometric with parameter 1/2 (counted exactly from random bits);
* LN is the natural logarithm *correctly rounded* (the proof needs exact rounding): computed in 64-bit-significand
  extended precision and, where that result lies too close to a rounding midpoint of the doubles to decide
  (about 1% of draws), recomputed to 50 significant digits with :mod:`decimal` (166 bits, beyond the 118 bits that
  the worst cases of the double-precision logarithm need, Lefevre & Muller; so the rounding is exact).

Guarantee (Mironov 2012, Thm. 1, Sec. 5.2): for f of sensitivity 1 the snapping mechanism is
(1/lambda + 2^-49 B/lambda)-DP when lambda < B < 2^46 lambda (the proof ends with the tighter
((1 + 12 B eta)/lambda + 2 eta), eta = 2^-53, which the theorem rounds up using B > lambda). For sensitivity
Delta, the theorem applied to f / Delta with (lambda / Delta, B / Delta) gives Delta/lambda + 2^-49 B/lambda under
the same condition (every term is a ratio of the three; in the proof the sensitivity enters only through the
real-arithmetic ratio e^{|x - x'| / lambda} of the clamped inputs, the rest bounds float rounding errors that do not
involve f). Clamping f(D) is 1-Lipschitz, so |clamp_B(x) - clamp_B(x')| <= |x - x'|: the sensitivity is unchanged.

Vector releases (:func:`snapping_epsilon`): the coordinates are released independently, so pure DP composes
(basic composition): a pair whose coordinates differ by Delta_j pays sum_j (Delta_j / lambda + 2^-49 B / lambda)
over the coordinates that differ, at most Delta_1 / lambda + d 2^-49 B / lambda for L1 sensitivity
Delta_1 = max sum_j Delta_j and d released coordinates (coordinates with equal inputs have identical output
distributions and pay nothing, but a neighbouring pair may move all of them). :func:`snapping_scale` calibrates
lambda = (Delta_1 + d 2^-49 B) / eps so that the total, overhead included, is exactly the claimed eps.

Source of the paper's statement: the paper itself is not in /work/shared/papers; the theorem and its last proof
line are quoted as in public implementations' notes (Covington, Harvard Privacy Tools snapping notes; IBM
diffprivlib's Snapping). Randomness: seeded ``torch.Generator`` (reproducible, not cryptographic), like every
other noise in privaudit; the theorem assumes ideal random bits.
"""

from __future__ import annotations

import math
from decimal import Context, Decimal

import numpy as np
import torch

from privaudit.core.errors import ConfigError, check_positive

#: the theorem's per-coordinate overhead factor: eps = Delta / lambda + OVERHEAD_FACTOR * B / lambda
OVERHEAD_FACTOR = 2.0 ** -49
#: the theorem's condition lambda < B < MAX_BOUND_RATIO * lambda
MAX_BOUND_RATIO = 2.0 ** 46
#: floor of the default clamp bound (a public constant; see :func:`default_clamp_bound`)
DEFAULT_CLAMP_FLOOR = 2.0 ** 10

_EXT_MARGIN = 2.0 ** -60  # relative error allowed for the extended-precision log (8 ulps of a 64-bit significand)
_DECIMAL = Context(prec=50)


# -- parameters ---------------------------------------------------------------------------------------
def grid_step(lam: float) -> float:
    """Lambda: the smallest power of two >= ``lam`` (exact, from the binary exponent)."""
    check_positive("lambda", lam)
    mantissa, exponent = math.frexp(lam)  # lam = mantissa 2^exponent, mantissa in [0.5, 1)
    return lam if mantissa == 0.5 else math.ldexp(1.0, exponent)


def check_clamp_bound(clamp_bound: float, lam: float) -> None:
    """Thm. 1's condition lambda < B < 2^46 lambda; ConfigError naming ``clamp_bound`` otherwise."""
    if isinstance(clamp_bound, bool) or not isinstance(clamp_bound, (int, float)) or not math.isfinite(clamp_bound):
        raise ConfigError(f"clamp_bound: must be a finite number, got {clamp_bound!r}")
    if not lam < clamp_bound < MAX_BOUND_RATIO * lam:
        raise ConfigError(f"clamp_bound: must lie in (lambda, 2^46 lambda) = ({lam:.6g}, {MAX_BOUND_RATIO * lam:.6g}) "
                          f"for the snapping mechanism's guarantee (Mironov 2012, Thm. 1) at the noise scale lambda "
                          f"= {lam:.6g}; got {clamp_bound!r}")


def snapping_overhead(lam: float, clamp_bound: float, coordinates: int) -> float:
    """The epsilon the snapping pays beyond Delta_1 / lambda: d 2^-49 B / lambda (Thm. 1, per coordinate)."""
    check_positive("coordinates", coordinates)
    return coordinates * OVERHEAD_FACTOR * clamp_bound / lam


def snapping_epsilon(sensitivity: float, lam: float, clamp_bound: float, coordinates: int) -> float:
    """Pure epsilon of the snapped release of ``coordinates`` values with L1 sensitivity ``sensitivity``.

    Delta_1 / lambda + d 2^-49 B / lambda (Thm. 1 per coordinate, basic composition over the d coordinates);
    checks the theorem's condition on B.
    """
    check_positive("sensitivity", sensitivity)
    check_clamp_bound(clamp_bound, lam)
    return sensitivity / lam + snapping_overhead(lam, clamp_bound, coordinates)


def snapping_scale(epsilon: float, sensitivity: float, clamp_bound: float, coordinates: int) -> float:
    """lambda with :func:`snapping_epsilon` = ``epsilon``: (Delta_1 + d 2^-49 B) / eps; checks Thm. 1's condition."""
    check_positive("epsilon", epsilon)
    check_positive("sensitivity", sensitivity)
    check_positive("coordinates", coordinates)
    lam = (sensitivity + coordinates * OVERHEAD_FACTOR * clamp_bound) / epsilon
    check_clamp_bound(clamp_bound, lam)
    return lam


def default_clamp_bound(num_classes: int, head_l2: float) -> float:
    """B from public quantities only: max(2^10, a power of two >= sqrt(2 ln K / lambda_reg)).

    ALM's head is the minimiser W* of F(W) = mean CE + (lambda_reg / 2) ||W||_F^2 (:mod:`privaudit.defenses.alm.head`);
    F(W*) <= F(0) = ln K and CE >= 0, so ||W*||_F <= sqrt(2 ln K / lambda_reg): every weight lies in
    [-B, B] and the clamp never binds on the fine-tuned head (the Newton solution is within 2 tol / lambda_reg of
    W*; the power-of-two rounding leaves room for it). K and lambda_reg are public configuration. The floor 2^10
    keeps Thm. 1's lambda < B for any noise scale below 1024; its overhead d 2^-39 / lambda is negligible.
    """
    check_positive("num_classes", num_classes)
    check_positive("head_l2", head_l2)
    norm = math.sqrt(2.0 * math.log(max(int(num_classes), 2)) / head_l2)
    return max(DEFAULT_CLAMP_FLOOR, math.ldexp(1.0, math.frexp(norm * (1 + 1e-6) + 1e-6)[1]))


# -- sampling -----------------------------------------------------------------------------------------
def _geometric_half(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """e >= 1 with P(e = k) = 2^-k, exactly: 1 + the number of leading zeros of a stream of random bits.

    32 random bits at a time (exact in float64, whose binary exponent is then the bit length); capped at 1074.
    """
    e = torch.ones(shape, dtype=torch.int64)
    pending = torch.ones(shape, dtype=torch.bool)
    offset = 0
    while bool(pending.any()) and offset < 1074:
        word = torch.randint(0, 2 ** 32, shape, generator=gen, dtype=torch.int64).double()
        bits = torch.frexp(word).exponent.to(torch.int64)  # bit length of the word (0 for 0)
        done = pending & (word > 0)
        e = torch.where(done, offset + 33 - bits, e)
        pending = pending & (word == 0)
        offset += 32
    return torch.where(pending, torch.full_like(e, 1074), e)


def full_grid_uniform(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """U*: a double in (0, 1) drawn with probability equal to the length of the reals that round down to it.

    (1 + M 2^-52) 2^-e with M uniform on 52 bits and e geometric(1/2) (Mironov 2012, Sec. 5.2): every binade
    [2^-e, 2^-e+1) is chosen with its length's probability and the doubles inside it are equally likely.
    """
    mantissa = 1.0 + torch.randint(0, 2 ** 52, shape, generator=gen, dtype=torch.int64).double() * 2.0 ** -52
    return torch.ldexp(mantissa, -_geometric_half(shape, gen).double())


def correctly_rounded_log(u: torch.Tensor) -> torch.Tensor:
    """ln(u) rounded to the nearest double (exact rounding, as the proof of Thm. 1 requires), float64.

    Extended precision first; where its value lies within its own error bound of a midpoint between two
    doubles, 50 significant decimal digits decide (float(Decimal) rounds correctly).
    """
    x = u.detach().double().cpu().numpy().reshape(-1)
    out = np.log(x)
    if np.finfo(np.longdouble).nmant >= 63:
        ext = np.log(x.astype(np.longdouble))
        out = ext.astype(np.float64)
        other = np.nextafter(out, np.where(ext > out, np.inf, -np.inf))
        mid = (out.astype(np.longdouble) + other.astype(np.longdouble)) / 2  # exact with a 64-bit significand
        unsure = np.abs(ext - mid) <= np.abs(ext) * _EXT_MARGIN
    else:  # no extended precision here: decide every value in decimal
        unsure = np.ones(x.shape, dtype=bool)
    for i in np.flatnonzero(unsure):
        out[i] = float(_DECIMAL.ln(Decimal(float(x[i]))))
    return torch.from_numpy(out).reshape(u.shape)


def unit_laplace(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """S LN(U*): the snapping mechanism's unit Laplace draws (S a uniform sign), float64."""
    sign = torch.randint(0, 2, shape, generator=gen, dtype=torch.int64).double() * 2.0 - 1.0
    return sign * correctly_rounded_log(full_grid_uniform(shape, gen))


# -- the mechanism ------------------------------------------------------------------------------------
def round_to_grid(x: torch.Tensor, step: float) -> torch.Tensor:
    """The nearest multiple of ``step`` (a power of two), ties towards +inf; exact in float64.

    x / step is exact (a power of two), its floor k and fraction x / step - k are exact, so no rounding error
    enters the choice; k step is exact while |k| < 2^53.
    """
    t = x / step
    k = torch.floor(t)
    return (k + (t - k >= 0.5).double()) * step


def snap(values: torch.Tensor, unit_noise: torch.Tensor, lam: float, clamp_bound: float) -> torch.Tensor:
    """clamp_B(round_Lambda(clamp_B(values) + lam * unit_noise)) elementwise (Sec. 5.2), float64.

    ``unit_noise``: draws of :func:`unit_laplace` (broadcast against ``values``). Every output is a multiple of
    Lambda = :func:`grid_step` (lam) or exactly +-B.
    """
    check_clamp_bound(clamp_bound, lam)
    b = float(clamp_bound)
    noisy = values.double().clamp(-b, b) + lam * unit_noise.double()
    return round_to_grid(noisy, grid_step(lam)).clamp(-b, b)


def snapping_release(values: torch.Tensor, lam: float, clamp_bound: float, gen: torch.Generator) -> torch.Tensor:
    """The snapping mechanism on every coordinate of ``values`` with fresh draws (Mironov 2012, Sec. 5.2)."""
    return snap(values, unit_laplace(tuple(values.shape), gen), lam, clamp_bound)


def snapped_log_mass(r: torch.Tensor, half_cell: float) -> torch.Tensor:
    """log P[snapped output = y] as a function of r = (y - m) / lambda and h = Lambda / (2 lambda), float64.

    The output y (a grid point away from +-B) has the mass of the real Laplace(m, lambda) on the cell
    [y - Lambda/2, y + Lambda/2): e^{-|r|} sinh(h) for |r| >= h, 1 - e^{-h} cosh(r) inside. The exact
    log-likelihood of the released grid value: the step audit's test statistic for the snapped release.
    """
    r = r.double()
    a = r.abs()
    h = float(half_cell)
    outer = -a + math.log(math.sinh(h))
    inner = torch.log1p(-math.exp(-h) * torch.cosh(torch.minimum(a, torch.full_like(a, h))))
    return torch.where(a >= h, outer, inner)
