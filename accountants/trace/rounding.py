"""The float rounding an exact check allows: each tolerance derived from the dtype the compared value was computed in.

An exact check (the trace's noise multiplier against the claim's, the sampling rate, a clipped unit's norm against the
clip, the normaliser, a replayed neighbour's distance) compares a value the code computed with one the claim states.
The code computed it in some precision: float32 when any operand was a float32 tensor (a clip given as a tensor, as
Opacus' adaptive clip makes it after its first update), float64 for Python floats. A tolerance below that precision's
resolution refutes honest code for its rounding; one far above it hides real shortfalls. So every tolerance here is
a multiple of the unit roundoff u of the least precise dtype among the operands (u = eps / 2: 2^-24 in float32,
2^-53 in float64):

* a value from a short chain of roundings (a cast of z and of C to the dtype, their product, a quotient, a cast
  back): each rounding moves it by at most u relative, so :data:`ULPS` units in the last place (2 ULPS roundings)
  bound it, :func:`relative_tolerance`;
* a norm or sum over k terms (:func:`sum_rounding`): Higham & Mary's probabilistic bound (SIAM J. Sci. Comput. 41(5),
  2019, Thm. 2.4), exp(lam sqrt(k) u + k u^2 / (1 - u)) - 1, which holds with probability at least
  1 - 2 k exp(-lam^2 (1 - u)^2 / 2) (about 1e-18 at lam = 10 and k = 10^4) under their model of independent,
  mean-zero rounding errors.

:func:`below` judges a value that must not fall below a bound: within the tolerance it is *rounding* (not a
refutation), beyond it a shortfall; :func:`digits` gives the significant digits that show a difference of a given size.
"""

from __future__ import annotations

import math
from typing import Any

#: Units in the last place an exact check allows a value computed in a short chain of float operations (each
#: rounding is at most half an ULP: eight roundings).
ULPS = 4
#: Machine epsilon (one ULP at 1) of the float dtypes the code may compute in.
EPS = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}
#: The dtype a Python float computes in, and a check assumes where a trace records none.
DEFAULT = "float64"
#: Higham & Mary's lambda (:func:`sum_rounding`).
LAMBDA = 10.0


def dtype_name(value: Any) -> str:
    """The float dtype ``value`` computes in: a tensor's or array's own (``float32``, ...), float64 for a Python
    number; an integer tensor (a count) computes exactly, float64 here."""
    dtype = getattr(value, "dtype", None)
    name = str(dtype).replace("torch.", "") if dtype is not None else DEFAULT
    return name if name in EPS else DEFAULT


def least_precise(*names: str | None) -> str:
    """The dtype of largest epsilon among ``names`` (None and unknown names count as float64)."""
    known = [n for n in names if n in EPS] or [DEFAULT]
    return max(known, key=lambda n: EPS[n])


def unit_roundoff(dtype: str | None) -> float:
    """u = eps / 2 of ``dtype`` (float64 where unknown)."""
    return EPS.get(dtype or DEFAULT, EPS[DEFAULT]) / 2


def sum_rounding(dtype: str | None, terms: int) -> float:
    """The relative error of a sum (or a norm) of ``terms`` terms in ``dtype``: Higham & Mary's probabilistic gamma
    (module docstring); 0 for fewer than two terms."""
    if terms < 2:
        return 0.0
    u = unit_roundoff(dtype)
    return math.expm1(LAMBDA * math.sqrt(terms) * u + terms * u * u / (1 - u))


def relative_tolerance(dtype: str | None, terms: int = 0) -> float:
    """The relative tolerance of an exact check on a value computed in ``dtype``: :data:`ULPS` ULPs, plus the
    rounding of a sum of ``terms`` terms where the value is a norm or a sum (:func:`sum_rounding`)."""
    return ULPS * 2 * unit_roundoff(dtype) + sum_rounding(dtype, terms)


def below(observed: float, bound: float, tolerance: float) -> str:
    """How ``observed`` stands against a ``bound`` it must not fall below: ``ok`` (at or above it), ``rounding``
    (below by at most ``tolerance`` relative) or ``short`` (below by more)."""
    if observed >= bound:
        return "ok"
    return "rounding" if observed >= bound * (1 - tolerance) else "short"


def above(observed: float, bound: float, tolerance: float) -> str:
    """As :func:`below` for a value that must not exceed ``bound``: ``ok``, ``rounding`` or ``excess``."""
    if observed <= bound:
        return "ok"
    return "rounding" if observed <= bound * (1 + tolerance) else "excess"


def digits(difference: float) -> int:
    """Significant digits that show a relative ``difference`` between two printed values (two beyond its order),
    6 to 17."""
    if not difference > 0 or not math.isfinite(difference):
        return 6 if difference == math.inf else 17
    return int(min(17, max(6, math.ceil(-math.log10(difference)) + 2)))


def relative_gap(observed: float, bound: float) -> float:
    """|observed - bound| / |bound| (inf for a zero bound and a nonzero difference)."""
    if bound == 0:
        return 0.0 if observed == 0 else math.inf
    return abs(observed - bound) / abs(bound)
