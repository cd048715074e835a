"""The typed records of a run: a cell's result (:class:`CellRecord`, its :class:`AttackRecord` per attack and its
:class:`CellClaim`) and its gate evidence (:class:`CellGate` and its :class:`Comparison` rows, the run's
:class:`SuiteGate`). Frozen; each is read from JSON data by ``from_dict``, which checks it against its closed schema
(:mod:`privaudit.audit.report.schema`: a field of the wrong type, a missing one and one the record does not have each
raise :class:`~privaudit.audit.report.schema.SchemaError` naming the field), and written back by ``to_dict``, which
gives the same data, key for key in the same order (the bytes of ``report.json`` and ``cell.json`` do not change).

A record's fields are in the order the report writes them. An optional field may be absent from the JSON, which is
not the same as null: a record remembers which fields it has (:attr:`Record.present`), and one built in code has
those it is given (a field left out is ``None`` on the record and absent from its JSON). :meth:`Record.updated` (or
:func:`dataclasses.replace`) returns a copy with some fields replaced. The free-form sections (a cell's ``utility``,
``details`` and ``claim_checks``, an attack's ``details``, a gate's ``released_noise``) stay JSON data: read them,
never change them (a record read by ``from_dict`` holds its own copy, and ``to_dict`` gives a fresh one).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Mapping

from privaudit.audit.report import schema


class _Absent:
    """The default of an optional field: absent from the record's JSON (and ``None`` on the record)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


def _json(value: Any) -> Any:
    """JSON data of ``value``: records through ``to_dict``, tuples as lists, every container a fresh copy."""
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    return value


@dataclass(frozen=True, kw_only=True)
class Record:
    """A frozen record with ``from_dict`` (checked against :attr:`SPEC`) and ``to_dict``."""

    SPEC: ClassVar[schema.Obj]
    #: Fields that hold records: name -> ("one" | "list" | "map", the record class).
    NESTED: ClassVar[dict[str, tuple[str, type[Record]]]] = {}

    #: The fields the record's JSON has. Built in code, those given (not left :data:`ABSENT`); a copy
    #: (:func:`dataclasses.replace`, :meth:`updated`) passes its original's, plus every field it sets to a value.
    present: frozenset[str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        given, present = self.present, set()
        for f in self._fields():
            value = getattr(self, f)
            if value is ABSENT:
                object.__setattr__(self, f, None)
                continue
            if given is None or f in given or value is not None:
                present.add(f)
            if isinstance(value, list):
                object.__setattr__(self, f, tuple(value))
        object.__setattr__(self, "present", frozenset(present))

    @classmethod
    def _fields(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name != "present"]

    @classmethod
    def from_dict(cls, data: Any, where: str = ""):
        """The record of JSON data ``data``, checked against :attr:`SPEC` (a SchemaError naming the field at
        ``where`` otherwise)."""
        schema.validate(cls.SPEC, data, where)
        return cls._build(data)

    @classmethod
    def _build(cls, data: Mapping[str, Any]):
        kwargs = {}
        for name, value in data.items():
            shape, record = cls.NESTED.get(name, (None, None))
            if value is None or shape is None:
                kwargs[name] = _json(value)
            elif shape == "one":
                kwargs[name] = record._build(value)
            elif shape == "list":
                kwargs[name] = tuple(record._build(v) for v in value)
            else:
                kwargs[name] = {k: record._build(v) for k, v in value.items()}
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The record's JSON data: its fields present, in order."""
        return {f: _json(getattr(self, f)) for f in self._fields() if f in self.present}

    def updated(self, **changes: Any):
        """A copy with ``changes`` (they become present, null included) and every other field as it is (absent stays
        absent)."""
        return replace(self, present=self.present | set(changes), **changes)


@dataclass(frozen=True, kw_only=True)
class CellClaim(Record):
    """What a cell's claim says, as the report shows it (the claim in full, with its event, is in the cell's
    ``details.claim``: :attr:`CellRecord.claim_in_full`)."""

    SPEC: ClassVar[schema.Obj] = schema.CLAIM

    mechanism: str
    relation: str | None
    unit: str | None
    paper_accountant: str | None
    delta: float | None
    sampler: str | None
    source: str | None
    notes: tuple[str, ...] | None


@dataclass(frozen=True, kw_only=True)
class AttackRecord(Record):
    """One attack's result in a cell: its metrics, its bounds (the (eps, delta) one, and where the attack reports
    them the bounds against the claim's own mechanism and its trajectory), its scores' file and its details (each
    bound in full: :attr:`bound`, :attr:`mechanism_bound`, :attr:`trajectory_bound`)."""

    SPEC: ClassVar[schema.Obj] = schema.ATTACK

    auc: float | None
    tpr_at_fpr: Mapping[str, float | None] | None
    eps_lower_bound: float | None
    eps_lb_method: str | None
    n_members: int | None
    n_nonmembers: int | None
    eps_lb_mechanism: float | None = ABSENT
    eps_lb_mechanism_method: str | None = ABSENT
    eps_lb_trajectory: float | None = ABSENT
    eps_lb_trajectory_method: str | None = ABSENT
    variant: str | None
    scores: str | None
    details: Mapping[str, Any] | None

    def _detail(self, key: str) -> Mapping[str, Any] | None:
        return (self.details or {}).get(key)

    @property
    def bound(self) -> Mapping[str, Any]:
        """The (eps, delta) bound in full (empty without one)."""
        return self._detail("bound") or {}

    @property
    def mechanism_bound(self) -> Mapping[str, Any] | None:
        return self._detail("mechanism_bound")

    @property
    def trajectory_bound(self) -> Mapping[str, Any] | None:
        return self._detail("trajectory_bound")


@dataclass(frozen=True, kw_only=True)
class Comparison(Record):
    """One row of a cell's gate: a bound (an attack's, or a step-audit pair's ``mu``: ``quantity``) against the claim
    it is compared with, the bound at the gate's family-wise level and the verdict (``pending`` until the family is
    known, ``consistent``, ``exceeds``, ``caught``, ``secondary`` or ``not comparable``, with the reason)."""

    SPEC: ClassVar[schema.Obj] = schema.COMPARISON

    attack: str
    eps_lower_bound: float | None
    method: str | None
    quantity: str | None = ABSENT
    epsilon: float | None
    accountant: str | None
    gate_eps_lower_bound: float | None
    gate_confidence: float | None
    verdict: str
    reason: str | None
    eps_lb_any_mechanism: float | None = ABSENT
    eps_lb_mechanism: float | None = ABSENT
    relation: str | None = ABSENT
    unit: str | None = ABSENT
    claim_epsilon: float | None = ABSENT


@dataclass(frozen=True, kw_only=True)
class CellGate(Record):
    """A cell's gate: pass or fail, the reasons, the comparisons, for a positive control whether (and by what) it was
    caught, and the released-noise checks (absent for a cell that errored)."""

    SPEC: ClassVar[schema.Obj] = schema.CELL_GATE
    NESTED: ClassVar[dict[str, tuple[str, type[Record]]]] = {"comparisons": ("list", Comparison)}

    status: str
    reasons: tuple[str, ...]
    comparisons: tuple[Comparison, ...]
    control: bool | None = ABSENT
    caught: bool | None = ABSENT
    caught_by: tuple[str, ...] | None = ABSENT
    released_noise: tuple[Mapping[str, Any], ...] | None = ABSENT


@dataclass(frozen=True, kw_only=True)
class CellRecord(Record):
    """A cell's result: its identity, claim, every accountant's epsilon, utility, each attack's result, details (the
    claim in full, the accountants' full results, the error of a cell that failed), its claim checks (a DP cell) and,
    once judged, its gate.

    Read from a report or a cell's ``cell.json`` it has every field the schema requires; a cell that errored, read
    back from its ``error.json`` alone (:func:`privaudit.audit.verify.evidence.load_cells`), has its id, error and
    empty results only."""

    SPEC: ClassVar[schema.Obj] = schema.CELL
    NESTED: ClassVar[dict[str, tuple[str, type[Record]]]] = {
        "claim": ("one", CellClaim), "attacks": ("map", AttackRecord), "gate": ("one", CellGate)}

    id: str
    dataset: str | None = ABSENT
    defense: str | None = ABSENT
    target_epsilon: float | None = ABSENT
    delta: float | None = ABSENT
    seed: int | None = ABSENT
    claim: CellClaim | None = ABSENT
    epsilon: Mapping[str, float | None] | None = ABSENT
    utility: Mapping[str, Any] | None = ABSENT
    attacks: Mapping[str, AttackRecord] | None = ABSENT
    details: Mapping[str, Any] | None = ABSENT
    claim_checks: Mapping[str, Any] | None = ABSENT
    gate: CellGate | None = ABSENT

    @classmethod
    def from_run(cls, record: Mapping[str, Any], where: str = "") -> CellRecord:
        """The record a run built (numpy numbers, non-finite floats), made JSON-safe as every report and cell.json
        writes it (:func:`privaudit.core.io.strict`: non-finite numbers become null), then read by :meth:`from_dict`."""
        from privaudit.core.io import strict

        return cls.from_dict(strict(record), where)

    @property
    def error(self) -> str | None:
        """The error of a cell that failed (None: it ran)."""
        return (self.details or {}).get("error")

    @property
    def infinite(self) -> bool:
        """Whether an accountant found the claim's epsilon infinite (no privacy claim)."""
        return any((d or {}).get("infinite") for d in ((self.details or {}).get("epsilon") or {}).values())

    @property
    def claim_in_full(self) -> Mapping[str, Any]:
        """The whole claim (its event and parameters: what the gate re-derives a release's multiplier from)."""
        return (self.details or {}).get("claim") or {}

    @property
    def trace_mismatches(self) -> list[Mapping[str, Any]]:
        """Where the cell's training trace does not match its claim (its claim checks)."""
        return list(((self.claim_checks or {}).get("trace") or {}).get("mismatches") or [])

    @property
    def step_audit(self) -> Mapping[str, Any] | None:
        """The cell's own step audit (its claim checks), or None."""
        return (self.claim_checks or {}).get("step_audit") or None

    def with_gate(self, gate: CellGate) -> CellRecord:
        return self.updated(gate=gate)


@dataclass(frozen=True, kw_only=True)
class SuiteGate(Record):
    """The gate of a whole run: pass or fail, every reason, notes on how to read it, the family-wise error rate it
    states, and how many positive controls there are and were caught."""

    SPEC: ClassVar[schema.Obj] = schema.GATE

    status: str
    reasons: tuple[str, ...]
    notes: tuple[str, ...]
    family_wise_error: float | None
    controls: int
    controls_caught: int

    def with_reasons(self, reasons: list[str] | tuple[str, ...]) -> SuiteGate:
        """This gate with ``reasons`` added (it fails when it has any)."""
        every = (*self.reasons, *reasons)
        return self.updated(reasons=every, status="fail" if every else "pass")


RECORDS = (CellClaim, AttackRecord, Comparison, CellGate, CellRecord, SuiteGate)
