"""What an adversary who sees only the final model can hope to show: the last-iterate heuristic of DP-SGD.

The accountants bound DP-SGD as if every step's noised sum were released (adaptive composition). A released
model is only the last iterate. Steinke, Nasr, Ganesh, Balle, Choquette-Choo, Jagielski, Hayes, Thakurta, Smith &
Terzis ("The last iterate advantage: empirical auditing and principled heuristic analysis of differentially
private SGD", ICLR 2025, arXiv 2410.06186) analyse DP-SGD with **linear** losses, where the final model is
exactly a post-processing of the sum of the steps' noised sums. Projected on the target's gradient direction
and divided by the sensitivity, that sum is

    P = K + N(0, T z^2)   against   Q = N(0, T z^2),

K ~ Binomial(T, q) the number of steps that sample the target, z the claim's noise multiplier (std over the
sensitivity under the claim's relation). Under add/remove (Poisson rate q) the target's clipped gradient is
C u or absent; under replace-one (batches of b out of n, q = b / n, each step sampled afresh as the claim's
event states) the replaced example's gradient is 0 and its replacement's 2C u, the pair the replace-one
accountant's dominating pair attains (:func:`privaudit.accountants.pld.pld._without_replacement_pld`): in units of
the sensitivity both are the pair above. The heuristic epsilon is this pair's exact (eps, delta) profile, both
directions (:func:`last_iterate_delta`, :func:`last_iterate_epsilon`).

What it is, and what it is not:

* **Not an upper bound.** It is the privacy of DP-SGD's final iterate *for linear losses*; the paper gives
  (contrived) losses whose final iterate leaks more, up to the full composition. It must never decide a
  verdict, and it is not an accountant (it is not in :data:`privaudit.accountants.ACCOUNTANTS`).
* **Attainable.** A linear loss is a valid loss, and its final iterate is the pair above: an adversary who
  plants a target with a constant gradient (a gradient canary, Cebere, Bellet & Papernot 2024) and sees only
  the final model faces exactly this pair. So for the worst-case loss, the final model's epsilon is at least
  the heuristic; and since the pair is a post-processing of the releases the accountants bound, it is at most
  the claim's epsilon (tested).
* **Plain SGD's final iterate.** The pair is the final model when each update is the learning rate times the noised
  sum. Momentum weighs the steps unequally and Adam rescales them (the project's defenses train with Adam by
  default), so there it is the plain-SGD, linear-loss reference, not that optimizer's own final-iterate epsilon
  (which the claim still bounds: every optimizer's iterate is a post-processing of the noised sums).
* **Not monotone in T.** Each step's noise also hides the other steps' contributions: at small T a longer run can
  have the smaller heuristic (q = 0.02, z = 1: T = 1 above T = 2 and 5, tested); over many steps it grows.
* **A yardstick for black-box audits.** An audit that sees only the released model (loss, LiRA, RMIA, input
  canaries) measures a lower bound that the heuristic predicts the reach of: the paper finds final-model audits
  with natural data below it, and the gap between the claim and the heuristic is what hiding the iterates buys
  for linear losses. A black-box bound far below the heuristic is an audit short of power, not evidence of more
  privacy than the heuristic.

Computation. The likelihood ratio p(x) / q(x) = sum_k w_k exp((k x - k^2 / 2) / (T z^2)) is
increasing in x (every k >= 0), so the optimal test is a threshold: H_{e^eps}(P || Q) = P(X > x*) -
e^eps Q(X > x*) with log p(x*) - log q(x*) = eps, and H_{e^eps}(Q || P) = Q(X < x') - e^eps P(X < x') with
log q(x') - log p(x') = eps. Both are exact up to the binomial's tails left out (mass below
:data:`TAIL_MASS`) and the root finders' tolerances; epsilon(delta) is the root of the larger of the two,
which is decreasing in eps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from privaudit.accountants.base import EpsilonResult, NotApplicable
from privaudit.accountants.claim import RELATIONS, PrivacyClaim
from privaudit.accountants.events import (DpEvent, NonPrivateDpEvent, PoissonSampledDpEvent,
                                          SampledWithoutReplacementDpEvent, SelfComposedDpEvent, describe,
                                          effective_gaussian_noise)
from privaudit.core.errors import ConfigError, check_positive, one_of

#: The name the heuristic's results carry (it is not an accountant: no verdict rests on it).
NAME = "last-iterate"
#: Binomial mass left out of K's two tails together: it changes either hockey-stick divergence by at most
#: (1 + e^eps) times this, far below any delta a claim states.
TAIL_MASS = 1e-20
#: Largest epsilon searched; a pair with delta(EPS_MAX) still above the target answers infinity.
EPS_MAX = 1e3


@dataclass(frozen=True)
class LastIteratePair:
    """The linear-loss final iterate's pair: T steps, sampling rate q, noise multiplier z, the claim's relation."""

    sample_rate: float
    noise_multiplier: float
    steps: int
    relation: str = "add-remove"

    def __post_init__(self) -> None:
        if not 0 < self.sample_rate <= 1:
            raise ConfigError(f"sample_rate: must lie in (0, 1], got {self.sample_rate!r}")
        check_positive("noise_multiplier", self.noise_multiplier, finite=True)
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise ConfigError(f"steps: must be an integer >= 1, got {self.steps!r}")
        if self.relation not in RELATIONS:
            raise one_of("relation", self.relation, RELATIONS)

    @cached_property
    def components(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """(log weights, P's means, Q's means, std) of the two Gaussian mixtures, in sensitivity units: K's values
        whose probability is at least TAIL_MASS / (T + 1) (the pmf is unimodal, so the rest, of total mass at most
        TAIL_MASS, lies in the two tails; scipy's binomial quantiles fail that far out)."""
        from scipy.stats import binom

        t, q = self.steps, self.sample_rate
        if q == 1.0:
            k = np.array([float(t)])
            logw = np.zeros(1)
        else:
            k = np.arange(t + 1, dtype=float)
            logw = binom.logpmf(k, t, q)
            keep = logw >= math.log(TAIL_MASS / (t + 1))
            k, logw = k[keep], logw[keep]
        return logw, k, np.zeros_like(k), self.noise_multiplier * math.sqrt(t)

    def to_dict(self) -> dict[str, Any]:
        return {"sample_rate": self.sample_rate, "noise_multiplier": self.noise_multiplier, "steps": self.steps,
                "relation": self.relation}


def _log_density(x: float, logw: np.ndarray, means: np.ndarray, std: float) -> float:
    """log of sum_k w_k exp(-(x - m_k)^2 / (2 std^2)) (the common Gaussian constant left out)."""
    a = logw - (x - means) ** 2 / (2 * std * std)
    top = a.max()
    return float(top + math.log(np.exp(a - top).sum()))


def _log_tail(x: float, logw: np.ndarray, means: np.ndarray, std: float, upper: bool) -> float:
    """log P(X > x) (``upper``) or log P(X < x) of the mixture."""
    from scipy.special import logsumexp
    from scipy.stats import norm

    z = (x - means) / std
    return float(logsumexp(logw + (norm.logsf(z) if upper else norm.logcdf(z))))


def _divergence(log_p: float, log_q: float, epsilon: float) -> float:
    """P(S) - e^eps Q(S) from the logs of P(S) and Q(S), 0 when negative (no overflow at large eps)."""
    if epsilon + log_q >= log_p:
        return 0.0
    return math.exp(log_p) * -math.expm1(epsilon + log_q - log_p)


def _threshold(llr, eps: float, centre: float, scale: float) -> float | None:
    """The x with llr(x) = eps (llr increasing), or None when llr stays below eps everywhere."""
    from scipy.optimize import brentq

    lo, hi = centre - scale, centre + scale
    for _ in range(200):
        if llr(lo) < eps:
            break
        lo -= scale
        scale *= 2
    else:
        return None
    for _ in range(200):
        if llr(hi) > eps:
            return float(brentq(lambda x: llr(x) - eps, lo, hi, xtol=1e-12, rtol=4 * np.finfo(float).eps))
        if hi - lo > 1e6 * (1 + abs(centre)):
            return None  # llr is bounded above by eps (e.g. Q || P beyond log(1 / (1 - q)^T))
        hi += scale
        scale *= 2
    return None


def last_iterate_delta(pair: LastIteratePair, epsilon: float) -> dict[str, float]:
    """The pair's hockey-stick divergences at e^epsilon, each direction: {"P||Q": .., "Q||P": .., "delta": max}."""
    if epsilon < 0:
        raise ConfigError(f"epsilon: must be >= 0, got {epsilon!r}")
    logw, mp, mq, std = pair.components
    centre, scale = float((mp.mean() + mq.mean()) / 2), 10 * std + float(mp.max() - mq.min())

    def llr(x: float) -> float:
        return _log_density(x, logw, mp, std) - _log_density(x, logw, mq, std)

    out: dict[str, float] = {}
    x = _threshold(llr, epsilon, centre, scale)
    out["P||Q"] = 0.0 if x is None else _divergence(
        _log_tail(x, logw, mp, std, True), _log_tail(x, logw, mq, std, True), epsilon)
    x = _threshold(lambda v: -llr(-v), epsilon, -centre, scale)  # q/p > e^eps  <=>  x < -(that root)
    out["Q||P"] = 0.0 if x is None else _divergence(
        _log_tail(-x, logw, mq, std, False), _log_tail(-x, logw, mp, std, False), epsilon)
    out["delta"] = max(out["P||Q"], out["Q||P"])
    return out


def last_iterate_epsilon_of(pair: LastIteratePair, delta: float, tol: float = 1e-7) -> float:
    """The smallest epsilon with both of the pair's divergences at most ``delta`` (``math.inf`` beyond EPS_MAX)."""
    from scipy.optimize import brentq

    if not 0 < delta < 1:
        raise ConfigError(f"delta: must lie in (0, 1), got {delta!r}")

    def excess(eps: float) -> float:
        return last_iterate_delta(pair, eps)["delta"] - delta

    if excess(0.0) <= 0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0:
        if hi >= EPS_MAX:
            return math.inf
        hi = min(2 * hi, EPS_MAX)
    return float(brentq(excess, hi / 2 if hi > 1 else 0.0, hi, xtol=tol))


def pair_of(claim: PrivacyClaim) -> LastIteratePair:
    """The claim's linear-loss final-iterate pair, or :class:`NotApplicable` with the reason."""
    event: DpEvent = claim.event
    steps = 1
    if isinstance(event, SelfComposedDpEvent):
        steps, event = int(event.count), event.event
    q = 1.0
    if isinstance(event, PoissonSampledDpEvent):
        if claim.relation != "add-remove":
            raise NotApplicable("last-iterate: Poisson sampling is analysed under add/remove only")
        q, event = float(event.sampling_probability), event.event
    elif isinstance(event, SampledWithoutReplacementDpEvent):
        if claim.relation != "replace-one":
            raise NotApplicable("last-iterate: sampling without replacement is analysed under replace-one only")
        q, event = event.sample_size / event.source_dataset_size, event.event
    # Gaussians released together on the step's batch are one Gaussian (z_eff); anything else (a second sampler
    # among them) is not DP-SGD's step.
    z = effective_gaussian_noise(event)
    if z is None:
        raise NotApplicable(f"last-iterate: defined for T steps of one sampled Gaussian (DP-SGD), not "
                            f"{describe(claim.event)}")
    if z <= 0:
        raise NotApplicable("last-iterate: no noise (epsilon is infinite)")
    return LastIteratePair(q, float(z), steps, claim.relation)


def last_iterate_epsilon(claim: PrivacyClaim) -> EpsilonResult:
    """The heuristic's epsilon at the claim's delta, as an :class:`EpsilonResult` named :data:`NAME` (not
    applicable, with the reason, for anything but T steps of one sampled Gaussian, and for delta = 0)."""
    if isinstance(claim.event, NonPrivateDpEvent):
        return EpsilonResult(NAME, math.inf, claim.delta, claim.relation, claim.unit, reason="no privacy mechanism")
    try:
        pair = pair_of(claim)
        if claim.delta <= 0:
            raise NotApplicable("last-iterate: a Gaussian pair has no finite epsilon at delta = 0")
    except NotApplicable as exc:
        return EpsilonResult(NAME, None, claim.delta, claim.relation, claim.unit, reason=str(exc))
    eps = last_iterate_epsilon_of(pair, claim.delta)
    if math.isinf(eps):
        return EpsilonResult(NAME, None, claim.delta, claim.relation, claim.unit,
                             reason=f"last-iterate: epsilon above {EPS_MAX:g} (not searched further)")
    return EpsilonResult(NAME, eps, claim.delta, claim.relation, claim.unit,
                         details={**pair.to_dict(), "heuristic": "Steinke et al. 2025, linear losses; not a bound"})
