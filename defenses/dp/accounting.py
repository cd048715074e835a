"""From mechanisms to a calibrated :class:`PrivacyClaim`.

A DP step releases one or more Gaussian mechanisms computed on the *same* sampled batch: the
clipped gradient sum, and for DPCL a noised similarity matrix or noised feature statistics. Mechanism
k adds N(0, (z_k Delta_k)^2) to a query of L2 sensitivity Delta_k. Releasing them together is exactly
one Gaussian mechanism with noise multiplier

    z_eff = (sum_k z_k^-2)^-1/2,

because the stacked query (f_k / (z_k Delta_k))_k has sensitivity sqrt(sum_k z_k^-2) under unit noise.
The step event is therefore ``Sampled(Gaussian(z_eff))`` with the sampler actually used. (Accounting
each mechanism as separately subsampled and composing, as DPCL Sec. 4.2.2 does, treats one shared
subsample as independent ones; at leading order in the sampling rate that undercounts, e.g. DPCL at a
target of 10 would report 9.4-9.6. The claim records the paper's number for comparison.)

A *budget split* gives mechanism k the share w_k of 1/z_eff^2 (i.e. of the per-step RDP / zCDP
budget): z_k = z_eff / sqrt(w_k). Calibration searches the gradient's multiplier; the others follow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from dp_accounting import (ComposedDpEvent, DpEvent, GaussianDpEvent, NonPrivateDpEvent, PoissonSampledDpEvent,
                           SampledWithoutReplacementDpEvent, SelfComposedDpEvent)

from privaudit.accountants import PrivacyClaim, calibrate, epsilon
from privaudit.accountants.rdp.rdp import quiet_absl
from privaudit.core.errors import ConfigError, check_positive, one_of
from privaudit.defenses.training.sampling import steps_per_epoch

SAMPLERS = ("poisson", "without-replacement")

# A subset of dp-accounting's default RDP orders (integers), fast to evaluate also for sampling without
# replacement: calibrating on it never under-estimates epsilon under the default orders (a superset, so
# a smaller or equal minimum); a refinement on the default orders then removes the slack.
FAST_ORDERS = tuple(range(2, 33)) + (40, 48, 56, 63)


@dataclass(frozen=True)
class Mechanism:
    """One Gaussian mechanism of a step: its query's L2 sensitivity and budget share."""

    name: str
    sensitivity: float  # the sensitivity the noise is calibrated with
    share: float = 1.0  # share of the per-step budget 1 / z_eff^2
    source: str = ""  # paper, theorem / equation
    paper_sensitivity: float | None = None  # what the paper claims, recorded when it differs

    def __post_init__(self) -> None:
        check_positive(f"mechanism {self.name}: sensitivity", self.sensitivity)
        check_positive(f"mechanism {self.name}: share", self.share)


@dataclass(frozen=True)
class SamplingPlan:
    """How batches are drawn: the sampler, dataset size, (expected) batch size, steps.

    ``max_batch`` (Poisson only) caps the batch size a batch-size-dependent sensitivity bound is valid
    for: a larger batch is replaced by an empty one (the step then releases noise only), so the bound
    holds for every pair of neighbouring batches and the Poisson accountant applies unchanged.
    ``overflow`` is the probability that any step hits that case.
    """

    sampler: str
    n: int
    batch_size: int
    steps: int
    max_batch: int | None = None
    overflow: float = 0.0

    @property
    def sample_rate(self) -> float:
        return min(1.0, self.batch_size / self.n)

    @property
    def relation(self) -> str:
        return "add-remove" if self.sampler == "poisson" else "replace-one"

    def to_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler, "n": self.n, "batch_size": self.batch_size, "steps": self.steps,
                "sample_rate": self.sample_rate, "max_batch": self.max_batch, "overflow_probability": self.overflow}


def poisson_max_batch(n: int, sample_rate: float, steps: int, tolerance: float) -> tuple[int, float]:
    """Smallest b with steps * P[Binomial(n, q) > b] <= tolerance, and that probability."""
    from scipy.stats import binom

    if sample_rate >= 1.0:
        return n, 0.0
    b = int(math.ceil(n * sample_rate))
    while b < n and steps * binom.sf(b, n, sample_rate) > tolerance:
        b += 1
    return b, float(min(1.0, steps * binom.sf(b, n, sample_rate)))


def plan_sampling(sampler: str, n: int, batch_size: int, epochs: int, *, bounded: bool = False,
                  overflow_tolerance: float = 1e-9) -> SamplingPlan:
    """Sampling plan for ``epochs`` epochs of (expected) batch size ``batch_size`` over n examples.

    ``bounded`` asks for a ``max_batch`` (Poisson), for mechanisms whose sensitivity grows with the
    batch size; it is chosen so that batches overflow with total probability <= ``overflow_tolerance``.
    """
    if sampler not in SAMPLERS:
        raise one_of("sampler", sampler, SAMPLERS)
    check_positive("batch_size", batch_size)
    check_positive("epochs", epochs)
    batch = min(batch_size, n)
    steps = steps_per_epoch(n, batch) * epochs
    if sampler == "poisson" and bounded:
        b, overflow = poisson_max_batch(n, batch / n, steps, overflow_tolerance)
        return SamplingPlan(sampler, n, batch, steps, b, overflow)
    return SamplingPlan(sampler, n, batch, steps)


def noise_multipliers(mechanisms: Sequence[Mechanism], gradient_multiplier: float) -> dict[str, float]:
    """z_k for every mechanism given the first (gradient) mechanism's z: z_k = z_0 sqrt(w_0 / w_k)."""
    base = mechanisms[0]
    return {m.name: gradient_multiplier * math.sqrt(base.share / m.share) for m in mechanisms}


def effective_multiplier(multipliers: dict[str, float]) -> float:
    """z_eff = (sum_k z_k^-2)^-1/2 of Gaussian mechanisms released on the same batch (0 if any z_k = 0)."""
    if any(z <= 0 for z in multipliers.values()):
        return 0.0
    return sum(z ** -2 for z in multipliers.values()) ** -0.5


def sampled(event: DpEvent, plan: SamplingPlan) -> DpEvent:
    if plan.sampler == "poisson":
        return PoissonSampledDpEvent(plan.sample_rate, event)
    return SampledWithoutReplacementDpEvent(plan.n, plan.batch_size, event)


def run_event(plan: SamplingPlan, multipliers: dict[str, float]) -> DpEvent:
    """The whole run: ``steps`` self-composed sampled steps, each one Gaussian with z_eff."""
    z_eff = effective_multiplier(multipliers)
    if z_eff <= 0:
        return NonPrivateDpEvent()
    return SelfComposedDpEvent(sampled(GaussianDpEvent(z_eff), plan), plan.steps)


def separately_sampled_event(plan: SamplingPlan, multipliers: dict[str, float]) -> DpEvent:
    """The run as DPCL Sec. 4.2.2 accounts it: each mechanism subsampled on its own, then composed."""
    parts = [sampled(GaussianDpEvent(z), plan) for z in multipliers.values()]
    return SelfComposedDpEvent(ComposedDpEvent(parts), plan.steps)


# PLD's pessimistic discretisation is an upper bound at any interval; calibrating at 1e-3 (10x coarser than the
# reported 1e-4) costs a few hundredths of epsilon and is many times faster for low-noise, many-step runs.
CALIBRATION_OPTIONS = {"pld": {"value_discretization_interval": 1e-3}}


def calibrate_multiplier(template: Callable[[float], PrivacyClaim], target_epsilon: float,
                         accountant: str = "rdp") -> float:
    """Smallest gradient noise multiplier whose claim meets ``target_epsilon`` under ``accountant``.

    Other accountants (PLD) search below the RDP answer. With the RDP accountant, a fast bisection on
    :data:`FAST_ORDERS` is refined on the accountant's
    default orders (a superset, so the refined multiplier still meets the target there).
    """
    with quiet_absl():
        fast = calibrate(template, target_epsilon, "rdp", low=1e-2, high=1e4, rel_tol=1e-5, orders=FAST_ORDERS)
        if accountant != "rdp":
            # RDP upper-bounds the true epsilon, so its z meets the target; the tighter accountant's answer lies
            # below it (far below for sampling without replacement): search up to z_rdp, to relative 1e-3
            try:
                return calibrate(template, target_epsilon, accountant, low=1e-2, high=fast, rel_tol=1e-3,
                                 **CALIBRATION_OPTIONS.get(accountant, {}))
            except ConfigError:
                return calibrate(template, target_epsilon, accountant, low=1e-2, high=1e4, rel_tol=1e-5)
        full = epsilon(template(fast), "rdp").epsilon
        if full is None or full >= target_epsilon * (1 - 1e-3):
            return fast
        return calibrate(template, target_epsilon, "rdp", low=0.7 * fast, high=fast, rel_tol=1e-4)


def claim_epsilon(claim: PrivacyClaim, accountant: str = "rdp") -> float | None:
    with quiet_absl():
        return epsilon(claim, accountant).epsilon


def build_claim(plan: SamplingPlan, mechanisms: Sequence[Mechanism], gradient_multiplier: float, delta: float, *,
                paper_accountant: str, source: str, notes: Sequence[str] = (), params: dict[str, Any] | None = None,
                sampler_note: str | None = None) -> PrivacyClaim:
    """The claim of a run: its event, relation, delta, sampler, sensitivities and noise multipliers."""
    zs = noise_multipliers(mechanisms, gradient_multiplier)
    event = run_event(plan, zs)
    record: dict[str, Any] = {
        **plan.to_dict(),
        "noise_multipliers": zs,
        "effective_noise_multiplier": effective_multiplier(zs),
        "sensitivities": {m.name: m.sensitivity for m in mechanisms},
        "paper_sensitivities": {m.name: m.paper_sensitivity if m.paper_sensitivity is not None else m.sensitivity
                                for m in mechanisms},
        "budget_shares": {m.name: m.share for m in mechanisms},
        "mechanism_sources": {m.name: m.source for m in mechanisms},
        **(params or {}),
    }
    sampler = plan.sampler if sampler_note is None else f"{plan.sampler} ({sampler_note})"
    return PrivacyClaim(event=event, relation=plan.relation, unit="example", delta=delta,
                        paper_accountant=paper_accountant, sampler=sampler, source=source, notes=tuple(notes),
                        params=record)
