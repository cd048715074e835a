"""The training trace (what each step of a run actually did) checked against the claim's DpEvent.

A claim is an event: T steps, each a sampled Gaussian mechanism (:mod:`privaudit.accountants.events`). Its
epsilon is only the run's if training ran exactly those steps. A DP training loop therefore records, for every
step it takes, what it used (:class:`TrainingTrace`): the sampler and its rate, the realised batch size, the
noise standard deviation added to the gradient sum and the sensitivity it was calibrated to, the step's
effective noise multiplier over all its Gaussian releases, the number of clipped units and the realised norm
of the noise vector. :func:`check_trace` compares the trace with the claim step by step and returns one
:class:`TraceMismatch` per discrepancy, naming the step and the field.

Exact checks (no error probability): the trace has no more steps than the claim composes; every step's
sampler is the claim's; its noise multiplier is at least the claim's for that step (more noise is only more
private; the step's multiplier is the smaller of its recorded effective multiplier and its gradient release's
noise std over sensitivity: composing releases only lowers the effective multiplier, 1 / z^2 = sum 1 / z_i^2; the
step's other Gaussian releases, its ``releases`` column, are named when the claim leaves them out); a Poisson step's
configured rate is at most the claim's, a without-replacement step's population is the claim's and its batch at most
the claim's. A per-step claim the trace cannot be read against (an event that is not a sampled Gaussian) is itself a
mismatch.

*At the precision the code ran in* (:mod:`privaudit.accountants.trace.rounding`): the multiplier and the rate are
compared with a tolerance of a few units in the last place of the least precise dtype their operands were computed in
(the trace's ``precision``: float32 where the noise std or the clip was a float32 tensor). A value short of the claim by
no more than that is rounding, not a refutation: :func:`trace_rounding` states it with the epsilon it would cost (the
claim's accountant at the rounded values); beyond it, the mismatch states the relative difference and the tolerance,
and prints its values to enough digits to show the difference.

Measured checks, each at level ``alpha`` in total (the chance that a correct run fails them):

* *Noise.* The noise vector of a step is N(0, sigma^2 I_d), so ||noise||^2 / sigma^2 ~ chi^2_d. A step whose
  realised norm lies in the lower alpha / (4 T) tail of that law did not add the noise it records (a
  Bonferroni correction over the T steps; alpha / 4 in all).
* *The noise's joint law within a step* (:mod:`privaudit.accountants.trace.noise_law`, alpha / 4 in all): its |values|
  repeated at a lag or in a group, its correlation at any lag within a tensor and between tensors of one size,
  beyond what independent coordinates give.
* *Sampling, as drawn* (:mod:`privaudit.accountants.trace.as_run`, alpha / 2 in all): each step's drawn size and their
  total against Binomial(n, q), two-sided; the disjoint step pairs' overlaps and the units' inclusion counts against
  the claim's sampling; repeated batches.

The code as it ran (:mod:`privaudit.accountants.trace.as_run`, exact): the clipped units' norms against the clip, a
normaliser that changes with the batch, a step that reused another's noise, replayed neighbours whose releases
differ by more than the claimed sensitivity.

A correct run fails a measured check with probability at most alpha (union bound); the gate states it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from scipy import stats

from privaudit.accountants.trace import rounding
from privaudit.accountants.trace.as_run import as_run_findings
from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import (ComposedDpEvent, DpEvent, GaussianDpEvent, PoissonSampledDpEvent,
                                          SampledWithoutReplacementDpEvent, SelfComposedDpEvent)
from privaudit.accountants.trace.noise_law import noise_law_findings
from privaudit.accountants.trace.trace_record import (RUN_FIELDS, STEP_FIELDS, ClaimedStep, TraceMismatch,  # noqa: F401
                                                TrainingTrace, claimed_steps)
from privaudit.core.errors import ConfigError

#: The measured checks' total level per run (the chance that a correct run fails them).
TRACE_ALPHA = 1e-6


def _exact_step(t: int, claimed: ClaimedStep | str, trace: TrainingTrace, rounded: list[TraceMismatch]
                ) -> list[TraceMismatch]:
    """The exact checks of step t (0-based) against its claimed event (module docstring); a value short of the claim
    by no more than its rounding goes to ``rounded`` instead."""
    n, row = t + 1, trace.step(t)
    if isinstance(claimed, str):
        return [TraceMismatch(n, "event", claimed, None, f"step {n}: the claim's step event ({claimed}) is not a "
                                                       "sampled Gaussian; the trace cannot be checked against it")]
    out = []
    if claimed.sampler not in ("none", trace.sampler):
        out.append(TraceMismatch(n, "sampler", claimed.sampler, trace.sampler,
                                 f"step {n}: sampled {trace.sampler}, the claim accounts {claimed.sampler}"))
    out += _multiplier_check(n, row, claimed.multiplier, trace, rounded)
    if claimed.sampler == "poisson":
        dtype = trace.computed_in("sample_rate")
        tol = rounding.relative_tolerance(dtype)
        verdict = rounding.above(trace.sample_rate, claimed.rate, tol)
        if verdict != "ok":
            d = rounding.digits(rounding.relative_gap(trace.sample_rate, claimed.rate))
            (out if verdict == "excess" else rounded).append(TraceMismatch(
                n, "sample_rate", claimed.rate, trace.sample_rate,
                f"step {n}: sampled at rate {trace.sample_rate:.{d}g}, above the claimed {claimed.rate:.{d}g} by "
                f"{rounding.relative_gap(trace.sample_rate, claimed.rate):.3g} relative, "
                f"{'within' if verdict == 'rounding' else 'beyond'} {dtype} rounding (tolerance {tol:.2g})"))
    if claimed.sampler == "without-replacement":
        if trace.population != claimed.population:
            out.append(TraceMismatch(n, "population", claimed.population, trace.population,
                                     f"step {n}: sampled from {trace.population} units, the claim from "
                                     f"{claimed.population}"))
        if row["batch_size"] > claimed.batch:
            out.append(TraceMismatch(n, "batch_size", claimed.batch, row["batch_size"],
                                     f"step {n}: batch of {int(row['batch_size'])}, above the claimed "
                                     f"{claimed.batch}"))
    return out


def _multiplier_check(n: int, row: dict[str, Any], claimed: float, trace: TrainingTrace,
                      rounded: list[TraceMismatch]) -> list[TraceMismatch]:
    """Step n's noise multiplier, the smaller of its releases composed and its gradient's alone (noise std over
    sensitivity), against the claimed one, at the precision the stds were computed in."""
    gradient = float(row["noise_std"]) / float(row["sensitivity"])
    z = min(float(row["multiplier"]), gradient)
    dtype = trace.computed_in("noise")
    tol = rounding.relative_tolerance(dtype)
    verdict = rounding.below(z, claimed, tol)
    if verdict == "ok":
        return []
    d = rounding.digits(rounding.relative_gap(z, claimed))
    if z == gradient:
        how = f"noise std {float(row['noise_std']):.{d}g} at sensitivity {float(row['sensitivity']):.{d}g}"
    else:
        how = composed_releases(gradient, (trace.column("releases") or [None] * trace.steps)[n - 1], claimed, d, tol)
    message = (f"step {n}: noise multiplier {z:.{d}g} ({how}) is below the claimed {claimed:.{d}g} by "
               f"{rounding.relative_gap(z, claimed):.3g} relative, {'within' if verdict == 'rounding' else 'beyond'} "
               f"{dtype} rounding (tolerance {tol:.2g})")
    found = TraceMismatch(n, "noise_multiplier", claimed, z, message)
    if verdict == "rounding":
        rounded.append(found)
        return []
    return [found]


def composed_releases(gradient: float, releases: Sequence[dict[str, Any]] | None, claimed: float, d: int,
                      tolerance: float = 0.0) -> str:
    """How a step's Gaussian releases compose (1 / z^2 = sum 1 / z_i^2): the gradient's multiplier and each other
    release's std and sensitivity, and what the claim leaves out of them: all of them when it is at least the
    gradient's alone (to ``tolerance``), else the fraction of their sensitivity it accounts."""
    if not releases:
        return f"its Gaussian releases composed; the gradient's alone {gradient:.{d}g}"
    names = ", ".join(str(r["name"]) for r in releases)
    each = "; ".join(f"{r['name']}: std {float(r['std']):.4g} at sensitivity {float(r['sensitivity']):.4g}"
                     for r in releases)
    others = sum((float(r["sensitivity"]) / float(r["std"])) ** 2 for r in releases if float(r["std"]) > 0)
    room = claimed ** -2 - gradient ** -2
    if claimed >= gradient * (1 - tolerance) or others <= 0:
        left = f": the claim leaves out {names}"
    elif room < others * (1 - 1e-6):
        left = (f": the claim accounts {names} at {math.sqrt(room / others):.3g} of the sensitivity one unit moved "
                "them by")
    else:
        left = ""
    return f"the gradient's {gradient:.{d}g} composed with {each}{left}"


def _noise_checks(trace: TrainingTrace, alpha: float) -> list[TraceMismatch]:
    """Each step's realised noise norm against chi^2_d at its recorded std (lower tail, ``alpha`` / (2 T): the trace's
    alpha / (4 T))."""
    out, level = [], alpha / (2 * max(1, trace.steps))
    rows = [(t, r["noise_norm"], float(r["noise_std"])) for t, r in enumerate(map(trace.step, range(trace.steps)))]
    read = [(t, norm, std) for t, norm, std in rows if not (norm is None or std <= 0 or trace.dim < 1)]
    cdf = stats.chi2.cdf([(float(norm) / std) ** 2 for _, norm, std in read], trace.dim) if read else []  # at once
    for (t, norm, std), p in zip(read, map(float, cdf)):
        if p < level:
            out.append(TraceMismatch(t + 1, "noise_norm", std * trace.dim ** 0.5, norm,
                                     f"step {t + 1}: the noise added has norm {float(norm):.6g}, about "
                                     f"{float(norm) / (std * trace.dim ** 0.5):.3g} of what std {std:.6g} on "
                                     f"{trace.dim} coordinates gives (chi-square p = {p:.2g} < {level:.2g})"))
    return out


def check_trace(claim: PrivacyClaim, trace: TrainingTrace | dict[str, Any], *,
                alpha: float = TRACE_ALPHA) -> list[TraceMismatch]:
    """Every discrepancy between what training did and the claim's event (module docstring); empty when none. A
    value short of the claim by no more than its rounding is not one (:func:`trace_rounding`)."""
    trace = trace if isinstance(trace, TrainingTrace) else TrainingTrace.from_dict(trace)
    claimed = claimed_steps(claim.event)
    return (_exact(claimed, trace)[0] + _noise_checks(trace, alpha / 2) + noise_law_findings(trace, alpha / 4)
            + as_run_findings(trace, claimed, alpha / 2))


def trace_rounding(claim: PrivacyClaim, trace: TrainingTrace | dict[str, Any]) -> list[TraceMismatch]:
    """The exact checks' values short of the claim by no more than the rounding of the precision they were computed
    in: not refutations (module docstring); each field's first, and the epsilon they would cost
    (:func:`rounding_cost`) in the first one's message."""
    trace = trace if isinstance(trace, TrainingTrace) else TrainingTrace.from_dict(trace)
    rounded = _exact(claimed_steps(claim.event), trace)[1]
    if not rounded:
        return []
    first: dict[str, TraceMismatch] = {}
    for m in rounded:
        first.setdefault(m.field, m)
    notes = list(first.values())
    cost = rounding_cost(claim, rounded)
    return [TraceMismatch(notes[0].step, notes[0].field, notes[0].claimed, notes[0].observed,
                          f"{notes[0].message}: rounding, not a refutation ({len(rounded)} value(s) in all); {cost}")
            ] + notes[1:]


def _exact(claimed: Sequence[ClaimedStep | str], trace: TrainingTrace
           ) -> tuple[list[TraceMismatch], list[TraceMismatch]]:
    """(the exact checks' discrepancies, their values within rounding) over the run (module docstring)."""
    out: list[TraceMismatch] = []
    rounded: list[TraceMismatch] = []
    if trace.steps > len(claimed):
        out.append(TraceMismatch(len(claimed) + 1, "steps", len(claimed), trace.steps,
                                 f"training ran {trace.steps} steps; the claim composes {len(claimed)}: steps "
                                 f"{len(claimed) + 1}-{trace.steps} are not accounted"))
    for t in range(min(trace.steps, len(claimed))):
        out += _exact_step(t, claimed[t], trace, rounded)
    return out, rounded


def rounding_cost(claim: PrivacyClaim, rounded: Sequence[TraceMismatch]) -> str:
    """The epsilon the roundings would cost: the claim's event with every noise multiplier scaled by the largest
    multiplier shortfall and every Poisson rate by the largest rate excess, by the claim's accountant (RDP where it
    names none of privaudit's), beside the claim's own epsilon there."""
    from privaudit.accountants.registry import ACCOUNTANTS, epsilon

    z = min([float(m.observed) / float(m.claimed) for m in rounded if m.field == "noise_multiplier"] + [1.0])
    q = max([float(m.observed) / float(m.claimed) for m in rounded if m.field == "sample_rate"] + [1.0])
    name = str(claim.paper_accountant).split(":")[0].split(" ")[0]
    name = name if name in ACCOUNTANTS else "rdp"
    try:
        before = epsilon(claim, name)
        after = epsilon(dataclasses.replace(claim, event=scaled_event(claim.event, z, q)), name)
    except (ConfigError, ValueError) as exc:
        return f"the epsilon it would cost was not computed ({type(exc).__name__}: {exc})"
    if not (before.applicable and after.applicable):
        return f"the epsilon it would cost was not computed ({name} does not apply)"
    return (f"at the rounded values the claim's epsilon by {name} is {after.epsilon:.10g}, against "
            f"{before.epsilon:.10g} as claimed ({after.epsilon - before.epsilon:+.3g})")


def scaled_event(event: DpEvent, z: float, q: float) -> DpEvent:
    """``event`` with every Gaussian's noise multiplier times ``z`` and every Poisson rate times ``q`` (at most 1)."""
    if isinstance(event, GaussianDpEvent):
        return GaussianDpEvent(float(event.noise_multiplier) * z)
    if isinstance(event, SelfComposedDpEvent):
        return SelfComposedDpEvent(scaled_event(event.event, z, q), event.count)
    if isinstance(event, ComposedDpEvent):
        return ComposedDpEvent([scaled_event(e, z, q) for e in event.events])
    if isinstance(event, PoissonSampledDpEvent):
        return PoissonSampledDpEvent(min(1.0, float(event.sampling_probability) * q), scaled_event(event.event, z, q))
    if isinstance(event, SampledWithoutReplacementDpEvent):
        return SampledWithoutReplacementDpEvent(event.source_dataset_size, event.sample_size,
                                                scaled_event(event.event, z, q))
    return event
