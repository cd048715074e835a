"""Mechanism descriptions as composable, immutable events.

privaudit reuses dp-accounting's ``DpEvent`` classes (Gaussian, Laplace, Poisson and
without-replacement sampling, self- and mixed composition, tree aggregation, ...) and adds only what
they lack: :class:`LogisticDpEvent`, the additive logistic mechanism of the ALM paper (Thm. 4.1).

Events serialise to plain dicts (``{"type": ClassName, field: value, ...}``) for claims and reports.
"""

from __future__ import annotations

from typing import Any

import attr
import dp_accounting
from dp_accounting import (  # noqa: F401 - re-exported vocabulary
    ComposedDpEvent,
    DpEvent,
    GaussianDpEvent,
    LaplaceDpEvent,
    NonPrivateDpEvent,
    NoOpDpEvent,
    PoissonSampledDpEvent,
    SampledWithoutReplacementDpEvent,
    SelfComposedDpEvent,
    SingleEpochTreeAggregationDpEvent,
)


@attr.define(frozen=True)
class LogisticDpEvent(DpEvent):
    """Additive logistic noise Logistic(0, s) per coordinate on a query of L1 sensitivity Delta.

    ``noise_multiplier`` is s / Delta. The mechanism is pure epsilon-DP with epsilon = Delta / s
    = 1 / noise_multiplier (ALM paper, Thm. 4.1 and Remark 4.1), like Laplace noise of the same scale.
    """

    noise_multiplier: float


_EXTRA_EVENTS: dict[str, type[DpEvent]] = {"LogisticDpEvent": LogisticDpEvent}


def _event_class(name: str) -> type[DpEvent]:
    if name in _EXTRA_EVENTS:
        return _EXTRA_EVENTS[name]
    cls = getattr(dp_accounting, name, None)
    if not (isinstance(cls, type) and issubclass(cls, DpEvent)):
        raise ValueError(f"unknown event type {name!r}")
    return cls


def event_to_dict(event: DpEvent) -> dict[str, Any]:
    """``{"type": ClassName, **fields}`` with nested events converted recursively."""
    out: dict[str, Any] = {"type": type(event).__name__}
    for field in attr.fields(type(event)):
        value = getattr(event, field.name)
        if isinstance(value, DpEvent):
            value = event_to_dict(value)
        elif isinstance(value, (list, tuple)):
            value = [event_to_dict(v) if isinstance(v, DpEvent) else v for v in value]
        elif hasattr(value, "name") and hasattr(value, "value"):  # enums
            value = value.name
        out[field.name] = value
    return out


def event_from_dict(data: dict[str, Any]) -> DpEvent:
    """Inverse of :func:`event_to_dict`."""
    data = dict(data)
    cls = _event_class(data.pop("type"))
    kwargs = {}
    for field in attr.fields(cls):
        if field.name not in data:
            continue
        value = data[field.name]
        if isinstance(value, dict) and "type" in value:
            value = event_from_dict(value)
        elif isinstance(value, list):
            value = [event_from_dict(v) if isinstance(v, dict) and "type" in v else v for v in value]
        kwargs[field.name] = value
    return cls(**kwargs)


def describe(event: DpEvent) -> str:
    """A one-line human-readable description of an event."""
    name = type(event).__name__.replace("DpEvent", "")
    if isinstance(event, (GaussianDpEvent, LaplaceDpEvent, LogisticDpEvent)):
        return f"{name}(z={event.noise_multiplier:.4g})"
    if isinstance(event, SelfComposedDpEvent):
        return f"{describe(event.event)} x {event.count}"
    if isinstance(event, ComposedDpEvent):
        return " + ".join(describe(e) for e in event.events)
    if isinstance(event, PoissonSampledDpEvent):
        return f"Poisson(q={event.sampling_probability:.4g})[{describe(event.event)}]"
    if isinstance(event, SampledWithoutReplacementDpEvent):
        return (f"WOR({event.sample_size}/{event.source_dataset_size})[{describe(event.event)}]")
    return name
