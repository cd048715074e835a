"""The record of an epsilon lower bound (:class:`EpsilonLowerBound`) and the neighbouring relations and
privacy units a bound can be stated at.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from privaudit.core.errors import ConfigError


RELATION = "add-remove"


UNIT = "example"


#: The neighbouring relations and privacy units a bound can be stated at (accountants.claim.RELATIONS).
RELATIONS = ("add-remove", "replace-one")


UNITS = ("example", "user")


@dataclass(frozen=True)
class EpsilonLowerBound:
    """A lower bound on epsilon with everything needed to read and reproduce it.

    ``label`` is the one-line description reports print as ``eps_lb_method``; ``counts`` holds the
    sample counts the bound was computed from (m, r, v for one run; trials and errors for multi run).
    """

    epsilon: float
    method: str
    label: str
    confidence: float
    delta: float
    counts: dict[str, float] = field(default_factory=dict)
    relation: str = RELATION
    notes: tuple[str, ...] = ()
    unit: str = UNIT

    def __post_init__(self) -> None:
        check_relation_unit(self.relation, self.unit)

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d


def check_relation_unit(relation: str, unit: str, supported: Sequence[tuple[str, str]] | None = None,
                        what: str = "this bound") -> None:
    """Reject a (relation, unit) that is unknown, or that ``what`` does not support, naming both.

    Never falls back to another relation: a bound stated at the wrong relation is not comparable with
    the claim, and a silent substitution would gate a claim against a bound on a different quantity.
    """
    if relation not in RELATIONS or unit not in UNITS:
        raise ConfigError(f"relation/unit: {what} cannot be stated at relation={relation!r}, unit={unit!r}; "
                          f"accepted relations: {', '.join(RELATIONS)}; units: {', '.join(UNITS)}")
    if supported is not None and (relation, unit) not in supported:
        ok = "; ".join(f"relation={r}, unit={u}" for r, u in supported)
        raise ConfigError(f"relation/unit: {what} does not support relation={relation!r}, unit={unit!r}; "
                          f"it supports {ok}")


def check_delta(delta: float) -> None:
    if not 0 <= delta < 1:
        raise ConfigError(f"delta: must lie in [0, 1), got {delta!r}")
