"""The accountant interface: each accountant states what it supports and turns a claim into epsilon."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Mapping

from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import DpEvent, NonPrivateDpEvent
from privaudit.core.errors import ConfigError


class NotApplicable(Exception):
    """The accountant cannot account for this claim; the message says why."""


def refuse(event: DpEvent, reasons: Mapping[type, str]) -> None:
    """Raise :class:`NotApplicable` with ``reasons[kind]`` when ``event`` is of a kind an accountant cannot
    account for (e.g. the logistic and snapping mechanisms, which only the ``pure`` accountant covers)."""
    for kind, reason in reasons.items():
        if isinstance(event, kind):
            raise NotApplicable(reason)


@dataclass(frozen=True)
class EpsilonResult:
    """An epsilon with everything needed to read it: accountant, delta, relation, unit.

    ``epsilon`` is None when the accountant is not applicable or failed (``reason`` says why; ``failed``
    tells the two apart: a numerical failure such as running out of memory is not a property of the claim),
    and ``math.inf`` for a claim with no privacy mechanism.
    """

    accountant: str
    epsilon: float | None
    delta: float
    relation: str
    unit: str
    reason: str | None = None
    details: dict[str, Any] | None = None
    failed: bool = False

    @property
    def applicable(self) -> bool:
        return self.epsilon is not None

    def to_dict(self) -> dict[str, Any]:
        eps = self.epsilon
        return {"accountant": self.accountant, "epsilon": None if eps is None or math.isinf(eps) else eps,
                "infinite": eps is not None and math.isinf(eps), "delta": self.delta, "relation": self.relation,
                "unit": self.unit, "reason": self.reason, "failed": self.failed, "details": self.details}


class Accountant(ABC):
    """Base class. Subclasses implement :meth:`_epsilon` and raise :class:`NotApplicable` with a reason."""

    name: str = ""

    def epsilon(self, claim: PrivacyClaim) -> EpsilonResult:
        """Epsilon of ``claim`` at ``claim.delta``, or a not-applicable result with the reason."""
        if isinstance(claim.event, NonPrivateDpEvent):
            return EpsilonResult(self.name, math.inf, claim.delta, claim.relation, claim.unit,
                                 reason="no privacy mechanism")
        try:
            eps, details = self._epsilon(claim)
        except NotApplicable as exc:
            return EpsilonResult(self.name, None, claim.delta, claim.relation, claim.unit, reason=str(exc))
        except ConfigError:
            raise
        except (ArithmeticError, MemoryError, RuntimeError, ValueError) as exc:
            # A numerical accountant that cannot finish (e.g. Opacus' PRV allocating its grid for a very long
            # run) fails alone: the caller keeps every other accountant's result.
            reason = "out of memory" if isinstance(exc, MemoryError) else f"{type(exc).__name__}: {exc}"
            return EpsilonResult(self.name, None, claim.delta, claim.relation, claim.unit,
                                 reason=f"failed: {reason}"[:300], failed=True)
        return EpsilonResult(self.name, float(eps), claim.delta, claim.relation, claim.unit, details=details)

    def upper_only(self) -> "Accountant":
        """This accountant without work that only refines a lower end (for searches that need the upper one)."""
        return self

    @abstractmethod
    def _epsilon(self, claim: PrivacyClaim) -> tuple[float, dict[str, Any] | None]:
        """Return (epsilon, details) or raise NotApplicable."""

    @staticmethod
    def walk(event: DpEvent):
        """All events nested in ``event`` (itself included), depth first."""
        yield event
        for child in getattr(event, "events", None) or ():
            yield from Accountant.walk(child)
        inner = getattr(event, "event", None)
        if isinstance(inner, DpEvent):
            yield from Accountant.walk(inner)
