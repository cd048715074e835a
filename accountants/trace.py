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
noise std over sensitivity: composing releases only lowers the effective multiplier, 1 / z^2 = sum 1 / z_i^2); a Poisson step's configured rate is at most the claim's, a without-replacement step's population is
the claim's and its batch at most the claim's. A per-step claim the trace cannot be read against (an event that
is not a sampled Gaussian) is itself a mismatch.

Measured checks, each at level ``alpha`` in total (the chance that a correct run fails them):

* *Noise.* The noise vector of a step is N(0, sigma^2 I_d), so ||noise||^2 / sigma^2 ~ chi^2_d. A step whose
  realised norm lies in the lower alpha / (4 T) tail of that law did not add the noise it records (a
  Bonferroni correction over the T steps; alpha / 4 in all).
* *The noise's joint law within a step* (:mod:`privaudit.accountants.noise_law`, alpha / 4 in all): its |values|
  repeated at a lag or in a group, its correlation at any lag within a tensor and between tensors of one size,
  beyond what independent coordinates give.
* *Sampling, as drawn* (:mod:`privaudit.accountants.as_run`, alpha / 2 in all): each step's drawn size and their
  total against Binomial(n, q), two-sided; the disjoint step pairs' overlaps and the units' inclusion counts against
  the claim's sampling; repeated batches.

The code as it ran (:mod:`privaudit.accountants.as_run`, exact): the clipped units' norms against the clip, a
normaliser that changes with the batch, a step that reused another's noise, replayed neighbours whose releases
differ by more than the claimed sensitivity.

A correct run fails a measured check with probability at most alpha (union bound); the gate states it.
"""

from __future__ import annotations

from typing import Any, Sequence

from scipy import stats

from privaudit.accountants.as_run import as_run_findings
from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.noise_law import noise_law_findings
from privaudit.accountants.trace_record import (RUN_FIELDS, STEP_FIELDS, ClaimedStep, TraceMismatch,  # noqa: F401
                                                TrainingTrace, claimed_steps)

#: The measured checks' total level per run (the chance that a correct run fails them).
TRACE_ALPHA = 1e-6
_REL_TOL = 1e-9


def _exact_step(t: int, claimed: ClaimedStep | str, trace: TrainingTrace) -> list[TraceMismatch]:
    """The exact checks of step t (0-based) against its claimed event (module docstring)."""
    n, row = t + 1, trace.step(t)
    if isinstance(claimed, str):
        return [TraceMismatch(n, "event", claimed, None, f"step {n}: the claim's step event ({claimed}) is not a "
                                                       "sampled Gaussian; the trace cannot be checked against it")]
    out = []
    if claimed.sampler not in ("none", trace.sampler):
        out.append(TraceMismatch(n, "sampler", claimed.sampler, trace.sampler,
                                 f"step {n}: sampled {trace.sampler}, the claim accounts {claimed.sampler}"))
    gradient = float(row["noise_std"]) / float(row["sensitivity"])
    z = min(float(row["multiplier"]), gradient)
    if z < claimed.multiplier * (1 - _REL_TOL):
        how = (f"noise std {row['noise_std']:.6g} at sensitivity {row['sensitivity']:.6g}" if z == gradient else
               f"its Gaussian releases composed; the gradient's alone {gradient:.6g}")
        out.append(TraceMismatch(n, "noise_multiplier", claimed.multiplier, z,
                                 f"step {n}: noise multiplier {z:.6g} ({how}) is below the claimed "
                                 f"{claimed.multiplier:.6g}"))
    if claimed.sampler == "poisson" and trace.sample_rate > claimed.rate * (1 + _REL_TOL):
        out.append(TraceMismatch(n, "sample_rate", claimed.rate, trace.sample_rate,
                                 f"step {n}: sampled at rate {trace.sample_rate:.6g}, above the claimed "
                                 f"{claimed.rate:.6g}"))
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


def _noise_checks(trace: TrainingTrace, alpha: float) -> list[TraceMismatch]:
    """Each step's realised noise norm against chi^2_d at its recorded std (lower tail, ``alpha`` / (2 T): the trace's
    alpha / (4 T))."""
    out, level = [], alpha / (2 * max(1, trace.steps))
    for t in range(trace.steps):
        row = trace.step(t)
        norm, std = row["noise_norm"], float(row["noise_std"])
        if norm is None or std <= 0 or trace.dim < 1:
            continue
        p = float(stats.chi2.cdf((float(norm) / std) ** 2, trace.dim))
        if p < level:
            out.append(TraceMismatch(t + 1, "noise_norm", std * trace.dim ** 0.5, norm,
                                     f"step {t + 1}: the noise added has norm {float(norm):.6g}, about "
                                     f"{float(norm) / (std * trace.dim ** 0.5):.3g} of what std {std:.6g} on "
                                     f"{trace.dim} coordinates gives (chi-square p = {p:.2g} < {level:.2g})"))
    return out


def check_trace(claim: PrivacyClaim, trace: TrainingTrace | dict[str, Any], *,
                alpha: float = TRACE_ALPHA) -> list[TraceMismatch]:
    """Every discrepancy between what training did and the claim's event (module docstring); empty when none."""
    if isinstance(trace, dict):
        trace = TrainingTrace.from_dict(trace)
    claimed = claimed_steps(claim.event)
    out = []
    if trace.steps > len(claimed):
        out.append(TraceMismatch(len(claimed) + 1, "steps", len(claimed), trace.steps,
                                 f"training ran {trace.steps} steps; the claim composes {len(claimed)}: steps "
                                 f"{len(claimed) + 1}-{trace.steps} are not accounted"))
    for t in range(min(trace.steps, len(claimed))):
        out += _exact_step(t, claimed[t], trace)
    return (out + _noise_checks(trace, alpha / 2) + noise_law_findings(trace, alpha / 4)
            + as_run_findings(trace, claimed, alpha / 2))
