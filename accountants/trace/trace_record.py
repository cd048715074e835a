"""The training trace's records: what each step of a DP run did (:class:`TrainingTrace`), one discrepancy with the
claim (:class:`TraceMismatch`), and the claim's event read as its steps (:func:`claimed_steps`). The checks are in
:mod:`privaudit.accountants.trace.trace` (the claim's bookkeeping) and :mod:`privaudit.accountants.trace.as_run` (the
code as it
ran)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from privaudit.accountants.events import (ComposedDpEvent, DpEvent, GaussianDpEvent, PoissonSampledDpEvent,
                                          SampledWithoutReplacementDpEvent, SelfComposedDpEvent, describe)
from privaudit.core.errors import ConfigError

#: Columns recorded once per step, and the run-level fields.
STEP_FIELDS = ("batch_size", "noise_std", "sensitivity", "multiplier", "units", "noise_norm")
RUN_FIELDS = ("unit", "sampler", "population", "sample_rate", "batch_size_configured", "dim", "clip")
#: Step columns of the code as it ran (:mod:`privaudit.accountants.trace.as_run`); a trace saved before them lacks them.
AS_RUN_FIELDS = ("unit_norm_max", "normalizer", "noise_digest", "tensor_noise_digests", "noise_law")
#: Step columns only some runs record: the unit-norm check's own relative slack where larger than float32's (an
#: Opacus recipe's ghost-clipped steps, :mod:`privaudit.defenses.watch.opacus_ghost`); the Gaussian releases a step made
#: besides the gradient (``releases``: per step a list of ``{"name", "std", "sensitivity", "values"}``, each composed
#: into the step's ``multiplier``: an adaptive clip's noisy count, DPCL's noisy similarity matrix).
OPTIONAL_FIELDS = ("unit_norm_slack", "releases")
#: The keys of a trace's ``precision`` (what each exact check's values were computed in,
#: :mod:`privaudit.accountants.trace.rounding`) and their values where a trace records none: ``noise`` (the least
#: precise dtype among the noise stds' and sensitivities' operands), ``sample_rate``, ``unit_norm`` (the clipped units')
#: with ``unit_norm_terms`` (the terms of the norm the code clipped by where the recorded norm is recomputed, else 0),
#: ``normalizer``.
PRECISION = {"noise": "float64", "sample_rate": "float64", "unit_norm": "float32", "unit_norm_terms": 0,
             "normalizer": "float64"}
_STEP_COLUMNS = STEP_FIELDS + AS_RUN_FIELDS + OPTIONAL_FIELDS


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
    columns: dict[str, list[Any]]
    #: The batches as drawn: ``counts`` (every unit's inclusion count), ``overlaps`` (disjoint step pairs'),
    #: ``digest`` (of every step's index set in order), ``step_digests``; None where not recorded.
    sampling: dict[str, Any] | None = None
    #: The replayed neighbours (:mod:`privaudit.accountants.trace.as_run`); None where not recorded.
    replays: list[dict[str, Any]] | None = None
    #: What the compared values were computed in (:data:`PRECISION`'s keys); None: :data:`PRECISION`.
    precision: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        lengths = {k: len(self.columns[k]) for k in _STEP_COLUMNS if k in self.columns}
        if len(set(lengths.values())) > 1 or any(k not in self.columns for k in STEP_FIELDS):
            raise ConfigError(f"trace: every step column needs one entry per step, got lengths {lengths}")

    @property
    def steps(self) -> int:
        return len(self.columns["batch_size"])

    def step(self, t: int) -> dict[str, Any]:
        return {k: self.columns[k][t] for k in STEP_FIELDS}

    def computed_in(self, key: str) -> Any:
        """The precision of one kind of value (:data:`PRECISION`), as recorded or by default."""
        return (self.precision or {}).get(key, PRECISION[key])

    def column(self, name: str) -> list[Any] | None:
        """An as-run or optional step column (:data:`AS_RUN_FIELDS`, :data:`OPTIONAL_FIELDS`), or None where the run
        did not record it."""
        return self.columns.get(name)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("columns")
        for k in ("sampling", "replays", "precision"):
            if d[k] is None:
                d.pop(k)
        return {**d, "steps": self.steps, **{k: list(v) for k, v in self.columns.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainingTrace":
        missing = [k for k in RUN_FIELDS + STEP_FIELDS if k not in data]
        if missing:
            raise ConfigError(f"trace: missing field(s) {', '.join(missing)}")
        columns = {k: list(data[k]) for k in _STEP_COLUMNS if k in data}
        return cls(**{k: data[k] for k in RUN_FIELDS}, columns=columns, sampling=data.get("sampling"),
                   replays=data.get("replays"), precision=data.get("precision"))

    @classmethod
    def from_history(cls, history: dict[str, list[Any]], **run: Any) -> "TrainingTrace":
        """The trace from a training history holding the :data:`STEP_FIELDS` (and any :data:`AS_RUN_FIELDS`) per
        step (``run``: the run fields, ``sampling``, ``replays`` and ``precision``)."""
        missing = [k for k in STEP_FIELDS if k not in history]
        if missing:
            raise ConfigError(f"trace: the training history has no {', '.join(missing)}")
        return cls(**run, columns={k: list(history[k]) for k in _STEP_COLUMNS if k in history})


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
