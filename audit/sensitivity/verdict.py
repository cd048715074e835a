"""Distances between the outputs of two neighbours, the numerical tolerance, and the verdict.

A claim says ``sup_{D ~ D'} ||f(D) - f(D')|| <= bound``. The search reports the largest distance it
found (``observed``) and the verdict compares it with the bound:

* ``violated`` — ``observed - bound > tolerance``: the witness pair proves the claim false for the
  code as written (a sound lower bound on the sensitivity exceeds the claimed upper bound).
* ``holds`` — the claim has a closed form, the search covered every configuration it was asked to
  try, and ``observed <= bound + tolerance``; ``observed / bound`` is the tightness ratio. This is
  evidence, not proof: a search cannot certify a supremum.
* ``inconclusive`` — the bound has no closed form (a *sampled* sensitivity: exceeding it is a
  violation, not exceeding it decides nothing), or the budget ran out before every configuration
  was searched.
* ``error`` — building or searching some setting raised (the exception is named in the result's
  ``config.errors``), and no setting violated the bound: the check did not do its work, and the
  gate fails on it (a violation found at another setting stays ``violated``, and the gate still
  fails on the error).

Tolerance. Both outputs are computed in floating point; a rounding error must never read as a
violation. Each output coordinate is the result of accumulated sums and products, whose error is at
most gamma_k = k u / (1 - k u) times the sum of the magnitudes involved (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., Eq. 3.4 / Lemma 3.1), u the unit roundoff of the
output's dtype (2^-24 for float32, 2^-53 for float64). Allowing k = :data:`ROUNDING_DEPTH` = 256
accumulated operations, the distance of two outputs of norms a and b can be off by at most about
k u (a + b), and the bound itself (a float64 expression) by k u_64 bound. So

    tolerance = 256 * u(dtype) * (||f(D)|| + ||f(D')|| + bound)

in the claim's norm: about 1.5e-5 relative for float32 outputs, 5.7e-14 for float64. A buggy bound
is off by a constant factor, far above this.
"""

from __future__ import annotations

import math

import torch

from privaudit.core.errors import one_of

NORMS = ("l1", "l2")
VERDICTS = ("holds", "violated", "inconclusive", "error")
ROUNDING_DEPTH = 256


def vector_norm(v: torch.Tensor, norm: str) -> float:
    """||v|| in float64 (``l1`` or ``l2``) of a flattened tensor."""
    v = v.detach().reshape(-1).double()
    if norm == "l2":
        return float(torch.linalg.vector_norm(v, 2))
    if norm == "l1":
        return float(v.abs().sum())
    raise one_of("norm", norm, NORMS)


def distance(fa: torch.Tensor, fb: torch.Tensor, norm: str) -> float:
    """||f(D) - f(D')|| in float64; outputs of different shapes are a bug in the quantity."""
    if fa.shape != fb.shape:
        raise ValueError(f"neighbouring outputs have different shapes {tuple(fa.shape)} and {tuple(fb.shape)}")
    return vector_norm(fa.detach().double() - fb.detach().double(), norm)


def unit_roundoff(dtype: torch.dtype) -> float:
    """u = 2^-p for a floating dtype with p significand bits (eps / 2)."""
    if not dtype.is_floating_point:
        return 0.0
    return torch.finfo(dtype).eps / 2.0


def tolerance(fa: torch.Tensor, fb: torch.Tensor, bound: float, norm: str) -> float:
    """The margin below which a difference between observed and bound is rounding (see module doc)."""
    u = max(unit_roundoff(fa.dtype), unit_roundoff(fb.dtype))
    u64 = unit_roundoff(torch.float64)
    scale = vector_norm(fa, norm) + vector_norm(fb, norm)
    return ROUNDING_DEPTH * (u * scale + u64 * abs(bound))


def is_violation(observed: float, bound: float, tol: float) -> bool:
    """observed exceeds bound by more than the tolerance (a non-finite observation always does)."""
    if math.isnan(observed) or math.isinf(observed):
        return True
    return observed - bound > tol


def display(verdict_key: str) -> str:
    """How a verdict reads in tables: a search that found no violation has not *proved* the bound, so the key
    ``holds`` (kept in JSON and suites) is shown as "not refuted"."""
    return {"holds": "not refuted"}.get(verdict_key, verdict_key)


def verdict(observed: float | None, bound: float | None, tol: float, *, closed_form: bool, covered: bool) -> str:
    """``violated`` / ``holds`` / ``inconclusive`` (see module doc)."""
    if observed is None or bound is None:
        return "inconclusive"
    if is_violation(observed, bound, tol):
        return "violated"
    if closed_form and covered:
        return "holds"
    return "inconclusive"


def recorded_verdict(result: dict) -> str:
    """A saved result's verdict recomputed from its numbers (the gate's check of saved evidence): the observed
    distance, the bound and the tolerance of the reported setting, the claim's closed form and whether every
    setting was covered (none skipped, none errored); a setting that errored makes it ``error`` unless the bound
    is violated. A non-finite observation is saved as null; with a witness on record it stays ``violated``."""
    config = result.get("config") or {}
    errors = config.get("errors") or []
    settings = config.get("settings") or []
    covered = bool(settings) and all(s.get("covered") for s in settings) and not errors \
        and not config.get("skipped_settings")
    observed, bound = result.get("observed"), result.get("bound")
    if observed is None and bound is not None and result.get("verdict") == "violated" and result.get("witness"):
        return "violated"
    v = verdict(observed, bound, float(config.get("tolerance") or 0.0), closed_form=bool(config.get("closed_form")),
                covered=covered)
    return "error" if errors and v != "violated" else v
