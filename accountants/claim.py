"""The privacy claim a defense makes: what mechanism, over which neighbouring relation and unit."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from privaudit.accountants.events import DpEvent, NonPrivateDpEvent, describe, event_from_dict, event_to_dict
from privaudit.core.errors import ConfigError, one_of

RELATIONS = ("add-remove", "replace-one")
UNITS = ("example", "user")


@dataclass(frozen=True)
class PrivacyClaim:
    """A mechanism (a composable ``DpEvent``) together with the context accountants need.

    Attributes:
        event: the whole training run as one event (sampling, noise, composition). Noise multipliers are
            std / sensitivity *under ``relation``* (a sum of C-clipped contributions: C under add/remove,
            2C under replace-one), see :mod:`privaudit.accountants.events`.
        relation: neighbouring relation, ``add-remove`` or ``replace-one``.
        unit: the privacy unit, ``example`` or ``user``.
        delta: the delta the claim is stated at.
        paper_accountant: how the source paper accounted for it, e.g. ``rdp:balle2020`` or ``pure``.
        sampler: the batch sampler actually used (``poisson``, ``without-replacement``, ...) or None.
        source: where the claim comes from (paper, section / theorem).
        notes: caveats that a reader of the epsilon must see (sampled sensitivity, uncovered cases, ...).
        params: the parameters the event was built from (noise multiplier, steps, rates, sensitivities).
    """

    event: DpEvent
    relation: str
    unit: str
    delta: float
    paper_accountant: str = "rdp"
    sampler: str | None = None
    source: str = ""
    notes: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise one_of("claim.relation", self.relation, RELATIONS)
        if self.unit not in UNITS:
            raise one_of("claim.unit", self.unit, UNITS)
        if not 0 <= self.delta < 1:
            raise ConfigError(f"claim.delta: must lie in [0, 1), got {self.delta!r}")

    @property
    def is_private(self) -> bool:
        return not isinstance(self.event, NonPrivateDpEvent)

    @property
    def mechanism(self) -> str:
        return describe(self.event)

    def with_notes(self, *notes: str) -> "PrivacyClaim":
        return replace(self, notes=self.notes + tuple(notes))

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism, "event": event_to_dict(self.event), "relation": self.relation,
            "unit": self.unit, "delta": self.delta, "paper_accountant": self.paper_accountant,
            "sampler": self.sampler, "source": self.source, "notes": list(self.notes), "params": dict(self.params),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PrivacyClaim":
        return cls(event=event_from_dict(data["event"]), relation=data["relation"], unit=data["unit"],
                   delta=float(data["delta"]), paper_accountant=data.get("paper_accountant", "rdp"),
                   sampler=data.get("sampler"), source=data.get("source", ""),
                   notes=tuple(data.get("notes", ())), params=dict(data.get("params", {})))

    @classmethod
    def non_private(cls, *, delta: float = 0.0, source: str = "no privacy mechanism") -> "PrivacyClaim":
        """The claim of a model trained without any privacy mechanism (epsilon = infinity)."""
        return cls(event=NonPrivateDpEvent(), relation="add-remove", unit="example", delta=delta,
                   paper_accountant="none", source=source)
