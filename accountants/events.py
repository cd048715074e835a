"""Mechanism descriptions as composable, immutable events.

privaudit reuses dp-accounting's ``DpEvent`` classes (Gaussian, Laplace, Poisson and
without-replacement sampling, self- and mixed composition, single-epoch tree aggregation, ...) and adds
only what they lack: :class:`LogisticDpEvent`, the additive logistic mechanism of the ALM paper
(Thm. 4.1), :class:`DiscreteGaussianDpEvent`, the discrete Gaussian on a grid, :class:`SnappingDpEvent`, Laplace noise released through Mironov's snapping mechanism, and :class:`TreeAggregationDpEvent`, DP-FTRL's tree aggregation over several epochs without
restarting the tree (Kairouz et al. 2021, App. D.2), which DP-FTRL-FedEmb uses.

Noise multipliers are always relative to the L2 (Gaussian) or L1 (Laplace, logistic) sensitivity of the
privatised quantity *under the claim's neighbouring relation*: std / max ||f(D) - f(D')|| over neighbours
D, D'. A sum of per-unit contributions clipped to norm C has sensitivity C under add/remove but 2C under
replace-one, so the same noise std is a noise multiplier half as large under replace-one.

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
    #: what a release on a grid pays beyond 1 / noise_multiplier: d Lambda / s for d coordinates rounded to the grid
    #: step Lambda (ALM's exact discrete-logistic release, :mod:`privaudit.defenses.alm.grid`); 0 over the reals
    overhead: float = 0.0


@attr.define(frozen=True)
class DiscreteGaussianDpEvent(DpEvent):
    """The discrete Gaussian N_Z(0, sigma_g^2) per coordinate of a query rounded to a grid (Canonne, Kamath & Steinke
    2020, "The discrete Gaussian for differential privacy").

    ``noise_multiplier`` is sigma / (Delta_2 + sqrt(d) Lambda): the noise over the L2 sensitivity of the grid points
    (rounding to the grid step Lambda adds at most sqrt(d) Lambda). It is rho-zCDP with rho = 1 / (2 z^2) (CKS 2020,
    Thm. 14), i.e. (alpha, alpha / (2 z^2))-RDP for every alpha > 1; the continuous Gaussian's privacy loss
    distribution and analytic curve are not claimed for it.
    """

    noise_multiplier: float


@attr.define(frozen=True)
class SnappingDpEvent(DpEvent):
    """Laplace noise of scale lambda per coordinate released through Mironov's snapping mechanism (CCS 2012, Sec. 5.2).

    ``noise_multiplier`` is lambda / Delta_1 (L1 sensitivity); ``overhead`` is the floating-point price
    d 2^-49 B / lambda of its d coordinates at clamp bound B (Thm. 1, per coordinate). Pure epsilon-DP with
    epsilon = 1 / noise_multiplier + overhead. Only that pure guarantee is proven: its outputs lie on a grid,
    so the real Laplace mechanism's RDP curve or privacy loss distribution does not describe it.
    """

    noise_multiplier: float
    overhead: float


@attr.define(frozen=True)
class TreeAggregationDpEvent(DpEvent):
    """DP-FTRL tree aggregation of Gaussian noise over ``total_steps`` leaves in one tree (no restart).

    Each unit contributes to at most ``max_participation`` leaves, any two of them at least
    ``min_separation`` leaves apart (``min_separation = y - x - 1`` for consecutive participations at
    steps x < y: one participation per epoch of E steps gives ``E - 1``). ``noise_multiplier`` is the
    noise std of every tree node over the per-leaf sensitivity. Kairouz et al. 2021 ("Practical and
    private (deep) learning without sampling or shuffling"), App. D.2 (DP-FTRL-NoTreeRestart); the
    restarted variant is dp-accounting's ``SingleEpochTreeAggregationDpEvent``.
    """

    noise_multiplier: float
    total_steps: int
    max_participation: int
    min_separation: int


_EXTRA_EVENTS: dict[str, type[DpEvent]] = {"LogisticDpEvent": LogisticDpEvent,
                                           "DiscreteGaussianDpEvent": DiscreteGaussianDpEvent,
                                           "SnappingDpEvent": SnappingDpEvent,
                                           "TreeAggregationDpEvent": TreeAggregationDpEvent}


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


def effective_gaussian_noise(event: DpEvent) -> float | None:
    """Noise multiplier of the single Gaussian equivalent to a composition of unsampled Gaussians, or None.

    Gaussians (z_1, ..., z_k) released on the same data are together exactly one Gaussian mechanism with
    z = (sum_i z_i^-2)^-1/2: the pair of output distributions for the worst-case neighbours is
    N(0, I) vs N(mu, I) with ||mu||^2 = sum_i z_i^-2 (McMahan et al. 2018, "A general approach to adding
    differential privacy to iterative training procedures", Sec. 3). ``SelfComposed(G(z), n)`` is z / sqrt(n).
    Returns None if ``event`` is anything else (sampling, Laplace, ...); "sampling" everything (Poisson
    with q = 1, or all N of N without replacement) is no sampling.
    """
    if isinstance(event, PoissonSampledDpEvent) and event.sampling_probability == 1:
        return effective_gaussian_noise(event.event)
    if isinstance(event, SampledWithoutReplacementDpEvent) and event.sample_size == event.source_dataset_size:
        return effective_gaussian_noise(event.event)
    if isinstance(event, GaussianDpEvent):
        return float(event.noise_multiplier) if event.noise_multiplier > 0 else 0.0
    if isinstance(event, SelfComposedDpEvent):
        z = effective_gaussian_noise(event.event)
        if z is None:
            return None
        return 0.0 if z == 0 else z / event.count ** 0.5 if event.count > 0 else float("inf")
    if isinstance(event, ComposedDpEvent):
        inv = 0.0
        for child in event.events:
            z = effective_gaussian_noise(child)
            if z is None:
                return None
            if z == 0:
                return 0.0
            inv += z ** -2
        return inv ** -0.5 if inv > 0 else float("inf")
    return None


def describe(event: DpEvent) -> str:
    """A one-line human-readable description of an event."""
    name = type(event).__name__.replace("DpEvent", "")
    if isinstance(event, SnappingDpEvent):
        return f"Snapping(z={event.noise_multiplier:.4g}, overhead={event.overhead:.3g})"
    if isinstance(event, LogisticDpEvent) and event.overhead:
        return f"Logistic(z={event.noise_multiplier:.4g}, grid overhead={event.overhead:.3g})"
    if isinstance(event, (GaussianDpEvent, LaplaceDpEvent, LogisticDpEvent, DiscreteGaussianDpEvent)):
        return f"{name}(z={event.noise_multiplier:.4g})"
    if isinstance(event, SelfComposedDpEvent):
        inner = describe(event.event)
        if isinstance(event.event, ComposedDpEvent) and len(event.event.events) > 1:
            inner = f"({inner})"
        return f"{inner} x {event.count}"
    if isinstance(event, ComposedDpEvent):
        return " + ".join(describe(e) for e in event.events)
    if isinstance(event, PoissonSampledDpEvent):
        return f"Poisson(q={event.sampling_probability:.4g})[{describe(event.event)}]"
    if isinstance(event, SampledWithoutReplacementDpEvent):
        return (f"WOR({event.sample_size}/{event.source_dataset_size})[{describe(event.event)}]")
    if isinstance(event, TreeAggregationDpEvent):
        return (f"Tree(z={event.noise_multiplier:.4g}, steps={event.total_steps}, "
                f"k={event.max_participation}, sep={event.min_separation})")
    if isinstance(event, SingleEpochTreeAggregationDpEvent):
        return f"TreeRestart(z={event.noise_multiplier:.4g}, steps={event.step_counts})"
    return name
