"""Noise calibration: the smallest noise multiplier whose claim meets a target epsilon.

Two ways to spend one budget on several mechanisms per step:

- :func:`calibrate` with a template that builds every mechanism from one z (equal noise, DPCL's SimCLR
  "noise scale of similarity matrix and gradient is set to be the same value", or fixed ratios between
  the noise multipliers). Works with every accountant, and with mechanisms that share a batch.
- :func:`calibrate_rdp_shares`: DPCL's "allocate the privacy budget" between separately accounted
  mechanisms (Sec. 5.2.2 equally between gradient and similarity; Sec. 5.3.2 1/3 to the gradient and 1/6
  to each of the two means and two variances). Read as a split of the RDP budget at the optimal order —
  mechanism k may use ``shares[k]`` of the total rho(alpha*) that converts to the target — it reproduces
  DPCL's published 0.3931 and 0.416. RDP only adds up over mechanisms accounted separately, so this is
  the ``composition="separate"`` model of :mod:`privaudit.accountants.sampled_gaussian` (not valid for a shared batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from scipy.optimize import brentq

from privaudit.accountants.base import Accountant
from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.rdp.conversions import epsilon_at_order
from privaudit.accountants.events import ComposedDpEvent, DpEvent
from privaudit.accountants.registry import get_accountant
from privaudit.core.errors import ConfigError, check_positive

if TYPE_CHECKING:
    from privaudit.accountants.rdp.rdp import RdpAccountant

_BIG = 1e300


def _epsilon_fn(acc: Accountant, template: Callable[[float], PrivacyClaim], name: str) -> Callable[[float], float]:
    def eps(z: float) -> float:
        try:
            result = acc.epsilon(template(z))
        except (MemoryError, OverflowError, FloatingPointError):
            return math.inf  # numerical accountants blow up far below the answer: "too little noise"
        if result.failed:
            return math.inf  # e.g. out of memory far below the answer: "too little noise"
        if result.epsilon is None:
            raise ConfigError(f"accountant {name!r} is not applicable: {result.reason}")
        return result.epsilon if not math.isnan(result.epsilon) else math.inf

    return eps


def smallest_passing(f: Callable[[float], float], target: float, low: float, high: float, rel_tol: float,
                      start: float = 1.0) -> float:
    """Smallest z in [low, high] with f(z) <= target for f decreasing in z.

    Brackets the answer geometrically from ``start`` (so accountants are never asked about absurd noise
    levels unless the answer lies there), then runs Brent's method on log z to relative precision ``rel_tol``.
    The returned z always satisfies f(z) <= target.
    """
    z = min(max(start, low), high)
    if f(z) > target:
        lo = z
        while True:
            if z >= high:
                raise ConfigError(f"target_epsilon: {target} is not reachable with noise multiplier <= {high}")
            z = min(z * 2, high)
            if f(z) <= target:
                hi = z
                break
            lo = z
    else:
        hi = z
        while True:
            if z <= low:
                return low
            z = max(z / 2, low)
            if f(z) > target:
                lo = z
                break
            hi = z

    def g(x: float) -> float:
        value = f(math.exp(x))
        return min(value, _BIG) - target

    root = brentq(g, math.log(lo), math.log(hi), xtol=rel_tol / 4, rtol=1e-12, maxiter=200)
    for candidate in (root, root + rel_tol / 4, root + rel_tol):
        if candidate < math.log(hi) and f(math.exp(candidate)) <= target:
            return math.exp(candidate)
    return hi


def calibrate(template: Callable[[float], PrivacyClaim], target_epsilon: float, accountant: str = "rdp",
              *, low: float = 1e-3, high: float = 1e4, rel_tol: float = 1e-6, **options) -> float:
    """Smallest noise multiplier z with epsilon(template(z)) <= target_epsilon under ``accountant``.

    ``template`` maps a noise multiplier to the full claim (sampling, steps, every mechanism of a step, so
    budgets split across several mechanisms calibrate jointly). Epsilon must decrease in z. ``options``
    go to the accountant (e.g. ``conversion="mironov"``). Relative precision ``rel_tol`` in z.
    """
    check_positive("target_epsilon", target_epsilon)
    acc = get_accountant(accountant, **options).upper_only()
    return smallest_passing(_epsilon_fn(acc, template, accountant), target_epsilon, low, high, rel_tol)


def _split_at_order(single: RdpAccountant, claims: Sequence[Callable[[float], PrivacyClaim]], shares: Sequence[float],
                    budget: float, low: float, high: float, rel_tol: float) -> list[float]:
    """Per mechanism k, the smallest z_k with rho_k(z_k) <= shares[k] x ``budget`` at the one order of the
    ``rdp`` accountant ``single`` (``claims[k]`` maps z to mechanism k's claim over the whole run)."""
    zs = []
    for claim_of, share in zip(claims, shares):
        def rho(z: float, claim_of=claim_of) -> float:
            return float(single.rdp_curve(claim_of(z))[0])
        zs.append(smallest_passing(rho, share * budget, low, high, rel_tol))
    return zs


@dataclass(frozen=True)
class RdpSplit:
    """Result of :func:`calibrate_rdp_shares`: one noise multiplier per mechanism, the order the budget was
    split at, and the epsilon of the composed claim (<= target)."""

    noise_multipliers: tuple[float, ...]
    order: float
    epsilon: float


def calibrate_rdp_shares(mechanisms: Sequence[Callable[[float], DpEvent]], shares: Sequence[float],
                         target_epsilon: float, delta: float, relation: str, *, unit: str = "example",
                         low: float = 1e-3, high: float = 1e4, rel_tol: float = 1e-7, search_width: int = 3,
                         **options) -> RdpSplit:
    """Split an RDP budget between separately accounted mechanisms (DPCL Sec. 5.2.2 and 5.3.2).

    ``mechanisms[k]`` maps a noise multiplier to mechanism k's event over the whole run (e.g.
    ``lambda z: SelfComposed(SampledWithoutReplacement(N, B, Gaussian(z)), T)``); the run is their
    composition. At an order alpha, the RDP budget that converts to exactly ``target_epsilon`` is
    R(alpha) = target - eps_alpha(0, delta); mechanism k gets the smallest z_k with rho_k(z_k, alpha) <=
    shares[k] R(alpha). alpha is searched around the optimal order of the equal-noise calibration
    (``search_width`` grid orders either side); the split with the least total noise wins. ``options`` go
    to the ``rdp`` accountant (orders, conversion, wor_bound).
    """
    from privaudit.accountants.rdp.rdp import RdpAccountant

    check_positive("target_epsilon", target_epsilon)
    if len(mechanisms) != len(shares) or not mechanisms:
        raise ConfigError("shares: need one share per mechanism")
    if any(s <= 0 for s in shares) or abs(sum(shares) - 1) > 1e-9:
        raise ConfigError(f"shares: must be positive and sum to 1, got {list(shares)}")
    acc = RdpAccountant(**options)

    def claim_of(event: DpEvent) -> PrivacyClaim:
        return PrivacyClaim(event, relation, unit, delta)

    def joint(zs: Sequence[float]) -> PrivacyClaim:
        return claim_of(ComposedDpEvent([m(z) for m, z in zip(mechanisms, zs)]))

    z_equal = calibrate(lambda z: joint([z] * len(mechanisms)), target_epsilon, "rdp", low=low, high=high,
                        rel_tol=rel_tol, **options)
    star = acc.epsilon(joint([z_equal] * len(mechanisms))).details["order"]
    index = acc.orders.index(star)
    candidates = [a for a in acc.orders[max(0, index - search_width): index + search_width + 1] if a > 1]
    best: tuple[float, float, tuple[float, ...]] | None = None
    for alpha in candidates:
        budget = target_epsilon - epsilon_at_order(alpha, 0.0, delta, acc.conversion)
        if budget <= 0:
            continue
        single = RdpAccountant(orders=(alpha,), conversion=acc.conversion, wor_bound=acc.wor_bound)
        zs = _split_at_order(single, [lambda z, m=m: claim_of(m(z)) for m in mechanisms], shares, budget, low, high,
                             rel_tol)
        if best is None or sum(zs) < best[0]:
            best = (sum(zs), alpha, tuple(zs))
    if best is None:
        raise ConfigError(f"target_epsilon: {target_epsilon} is not reachable at any order near {star}")
    _, alpha, zs = best
    eps = acc.epsilon(joint(zs)).epsilon
    return RdpSplit(noise_multipliers=zs, order=alpha, epsilon=float(eps))
