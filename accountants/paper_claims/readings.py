"""A number a paper states (:class:`PaperClaim`) and the readings of its mechanism (:class:`Reading`).

A reading turns noise multipliers into the :class:`~privaudit.accountants.claim.PrivacyClaim` one way of
accounting describes, and names the accountant that reads it. The mechanism builders below are the shapes
the papers' mechanisms take: DP-SGD-shaped sampled Gaussians (:func:`sgd_mechanism`), DP-FTRL tree
aggregation (:func:`tree_mechanism`) and one Gaussian release (:func:`gaussian_mechanism`).

Numbers are kept as printed (strings) so that their precision is known: a stated number is reproduced
when our value lies within half a unit of its last printed digit (:func:`half_unit`, also allowing the
noise multiplier's printed precision, :func:`noise_rel_precision`) or within :data:`TOLERANCE`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Mapping, Sequence

from privaudit.accountants.base import EpsilonResult
from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import GaussianDpEvent, TreeAggregationDpEvent
from privaudit.accountants.registry import get_accountant
from privaudit.accountants.sampled_gaussian import sampled_gaussian_claim

TOLERANCE = 0.005  # relative agreement that counts as reproduced, on top of printed precision

Build = Callable[[Sequence[float]], PrivacyClaim]


@dataclass(frozen=True)
class Reading:
    """One way to account for a claim: noise multipliers -> claim, and the accountant that reads it."""

    label: str
    build: Build
    accountant: str = "rdp"
    options: Mapping[str, Any] = field(default_factory=dict)
    metric: str = "epsilon"  # or "rho" (zCDP, from the tree accountant's details)

    def value(self, noise: Sequence[float]) -> tuple[float | None, EpsilonResult]:
        result = get_accountant(self.accountant, **dict(self.options)).epsilon(self.build(noise))
        if result.epsilon is None:
            return None, result
        if self.metric == "rho":
            return float((result.details or {})["rho"]), result
        return result.epsilon, result


@dataclass(frozen=True)
class PaperClaim:
    """A number a paper states, with its parameters and readings.

    ``kind``: ``"epsilon"`` (the paper states ``stated`` for noise ``noise``), ``"noise"`` (the paper states
    noise ``noise`` as calibrated to ``target``), or ``"bound"`` (the paper states value < ``stated``).
    ``recipe``: the mechanism and accountant as the paper describes its own accounting; ``sound``: the
    mechanism as the algorithm runs it, where that differs; ``alternatives``: other readings that explain
    the number. Numbers are kept as printed (strings) so their precision is known.
    """

    id: str
    paper: str
    source: str
    description: str
    kind: str
    stated: str
    noise: tuple[str, ...]
    recipe: Reading
    sound: Reading | None = None
    target: str | None = None
    alternatives: tuple[Reading, ...] = ()
    notes: tuple[str, ...] = ()
    noise_exact: bool = False  # the noise is a chosen instance, not a printed (rounded) number

    @property
    def noise_values(self) -> tuple[float, ...]:
        return tuple(float(z) for z in self.noise)

    @property
    def checked(self) -> Reading:
        return self.sound or self.recipe


def half_unit(printed: str) -> float:
    """Half a unit of the last printed digit: "0.3812" -> 5e-5, "10" -> 0.5."""
    exponent = Decimal(printed).as_tuple().exponent
    return 0.5 * 10.0 ** int(exponent)


def noise_rel_precision(claim: PaperClaim) -> float:
    """The relative precision of the claim's printed noise multipliers (0 for a chosen, exact instance)."""
    return 0.0 if claim.noise_exact else max(half_unit(z) / float(z) for z in claim.noise)


def sgd_mechanism(*, steps: int, delta: float, sampling: str, relation: str, dataset_size: int, batch_size: int,
                  unit: str = "example", composition: str = "joint", sensitivity: float = 1.0,
                  source: str = "") -> Build:
    """noise multipliers (one per mechanism per step) -> claim; ``sensitivity`` divides them (noise std is
    sigma x clip, the relation's sensitivity is ``sensitivity`` x clip)."""
    def build(noise: Sequence[float]) -> PrivacyClaim:
        zs = [z / sensitivity for z in noise]
        return sampled_gaussian_claim(zs if len(zs) > 1 else zs[0], steps, delta, dataset_size=dataset_size,
                                      batch_size=batch_size, sampling=sampling, relation=relation, unit=unit,
                                      composition=composition, source=source)
    return build


def tree_mechanism(*, steps: int, participations: int, separation: int, delta: float, sensitivity: float = 2.0,
                   source: str = "") -> Build:
    """noise multiplier -> DP-FTRL tree aggregation without restart, user level, add/remove; the noise
    multiplier is divided by the per-leaf ``sensitivity`` (in clip norms)."""
    def build(noise: Sequence[float]) -> PrivacyClaim:
        event = TreeAggregationDpEvent(noise[0] / sensitivity, steps, participations, separation)
        return PrivacyClaim(event, "add-remove", "user", delta, paper_accountant="tree", source=source)
    return build


def gaussian_mechanism(delta: float) -> Build:
    """noise multiplier -> one release of the Gaussian mechanism (add/remove, example level)."""
    def build(noise: Sequence[float]) -> PrivacyClaim:
        return PrivacyClaim(GaussianDpEvent(noise[0]), "add-remove", "example", delta, paper_accountant="gaussian")
    return build
