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
  realised norm lies in the lower alpha / (2 T) tail of that law did not add the noise it records (a
  Bonferroni correction over the T steps).
* *Sampling.* Under Poisson sampling at rate q each of the n units joins a step independently, so the realised
  batch size is Binomial(n, q), independent across steps. A step whose size lies in the upper alpha / (4 T)
  tail, or a total over all steps in the upper alpha / 4 tail of Binomial(n T, q), was sampled at a larger rate
  than the claim's (the total catches a small excess spread over many steps).

A correct run fails a measured check with probability at most alpha (union bound); the gate states it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from scipy import stats

from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import (ComposedDpEvent, DpEvent, GaussianDpEvent, PoissonSampledDpEvent,
                                          SampledWithoutReplacementDpEvent, SelfComposedDpEvent, describe)
from privaudit.core.errors import ConfigError

#: The measured checks' total level per run (the chance that a correct run fails them).
TRACE_ALPHA = 1e-6
#: Columns recorded once per step, and the run-level fields.
STEP_FIELDS = ("batch_size", "noise_std", "sensitivity", "multiplier", "units", "noise_norm")
RUN_FIELDS = ("unit", "sampler", "population", "sample_rate", "batch_size_configured", "dim", "clip")
_REL_TOL = 1e-9


@dataclass(frozen=True)
class TrainingTrace:
    """What a run did: run-level fields (:data:`RUN_FIELDS`) and one list per :data:`STEP_FIELDS`, one entry
    per step taken. ``noise_norm`` entries may be None (not observed); ``dim`` is the noise vector's length."""

    unit: str
    sampler: str
    population: int
    sample_rate: float
    batch_size_configured: int
    dim: int
    clip: float
    columns: dict[str, list[float | None]]

    def __post_init__(self) -> None:
        lengths = {k: len(self.columns.get(k, ())) for k in STEP_FIELDS}
        if len(set(lengths.values())) != 1:
            raise ConfigError(f"trace: every step column needs one entry per step, got lengths {lengths}")

    @property
    def steps(self) -> int:
        return len(self.columns["batch_size"])

    def step(self, t: int) -> dict[str, Any]:
        return {k: self.columns[k][t] for k in STEP_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("columns")
        return {**d, "steps": self.steps, **{k: list(v) for k, v in self.columns.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainingTrace":
        missing = [k for k in RUN_FIELDS + STEP_FIELDS if k not in data]
        if missing:
            raise ConfigError(f"trace: missing field(s) {', '.join(missing)}")
        return cls(**{k: data[k] for k in RUN_FIELDS}, columns={k: list(data[k]) for k in STEP_FIELDS})

    @classmethod
    def from_history(cls, history: dict[str, list[float]], **run: Any) -> "TrainingTrace":
        """The trace from a training history holding the :data:`STEP_FIELDS` per step (``run``: the run fields)."""
        missing = [k for k in STEP_FIELDS if k not in history]
        if missing:
            raise ConfigError(f"trace: the training history has no {', '.join(missing)}")
        return cls(**run, columns={k: list(history[k]) for k in STEP_FIELDS})


@dataclass(frozen=True)
class TraceMismatch:
    """One discrepancy: the step (1-based; None for the run as a whole), the field, both values, a sentence."""

    step: int | None
    field: str
    claimed: Any
    observed: Any
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ClaimedStep:
    """A claimed step event read as (sampler, rate, population, batch, noise multiplier)."""

    sampler: str
    rate: float
    population: int | None
    batch: int | None
    multiplier: float


def claimed_steps(event: DpEvent) -> list[ClaimedStep | str]:
    """The claim's event as its sequence of steps (self-compositions and compositions unrolled); a step that is
    not a (sampled) Gaussian is kept as its description (a string), which :func:`check_trace` reports."""
    if isinstance(event, SelfComposedDpEvent):
        return claimed_steps(event.event) * int(event.count)
    if isinstance(event, ComposedDpEvent):
        return [s for e in event.events for s in claimed_steps(e)]
    if isinstance(event, GaussianDpEvent):
        return [ClaimedStep("none", 1.0, None, None, float(event.noise_multiplier))]
    inner = getattr(event, "event", None)
    if isinstance(event, PoissonSampledDpEvent) and isinstance(inner, GaussianDpEvent):
        return [ClaimedStep("poisson", float(event.sampling_probability), None, None, float(inner.noise_multiplier))]
    if isinstance(event, SampledWithoutReplacementDpEvent) and isinstance(inner, GaussianDpEvent):
        n, b = int(event.source_dataset_size), int(event.sample_size)
        return [ClaimedStep("without-replacement", b / n, n, b, float(inner.noise_multiplier))]
    return [describe(event)]


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
    z = min(float(row["multiplier"]), float(row["noise_std"]) / float(row["sensitivity"]))
    if z < claimed.multiplier * (1 - _REL_TOL):
        out.append(TraceMismatch(n, "noise_multiplier", claimed.multiplier, z,
                                 f"step {n}: noise multiplier {z:.6g} (noise std {row['noise_std']:.6g} at "
                                 f"sensitivity {row['sensitivity']:.6g}) is below the claimed "
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
    """Each step's realised noise norm against chi^2_d at its recorded std (lower tail, alpha / (2 T))."""
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


def _sampling_checks(trace: TrainingTrace, claimed: Sequence[ClaimedStep | str], alpha: float) -> list[TraceMismatch]:
    """Poisson steps' realised batch sizes against Binomial(n, q_claim): per step at alpha / (4 T), in total at
    alpha / 4 (upper tails)."""
    rates = [c.rate for c in claimed[:trace.steps] if isinstance(c, ClaimedStep) and c.sampler == "poisson"]
    if trace.sampler != "poisson" or len(rates) < trace.steps or trace.population < 1:
        return []
    out, n, steps = [], trace.population, trace.steps
    sizes = [int(b) for b in trace.columns["batch_size"]]
    for t, (b, q) in enumerate(zip(sizes, rates)):
        p = float(stats.binom.sf(b - 1, n, q))
        if p < alpha / (4 * steps):
            out.append(TraceMismatch(t + 1, "batch_size", n * q, b,
                                     f"step {t + 1}: batch of {b} of {n} units; the claimed rate {q:.6g} gives "
                                     f"{n * q:.4g} on average (binomial p = {p:.2g})"))
    q_mean, total = sum(rates) / steps, sum(sizes)
    p = float(stats.binom.sf(total - 1, n * steps, q_mean))
    if p < alpha / 4:
        out.append(TraceMismatch(None, "batch_size", n * steps * q_mean, total,
                                 f"the {steps} steps drew {total} units; the claimed rates give "
                                 f"{n * steps * q_mean:.4g} on average (binomial p = {p:.2g}): sampled at a larger "
                                 "rate than claimed"))
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
    return out + _noise_checks(trace, alpha) + _sampling_checks(trace, claimed, alpha)
