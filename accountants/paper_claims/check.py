"""Checking one stated claim: does the paper's number come out of its own recipe, and what holds?

:func:`check_claim` evaluates a :class:`~privaudit.accountants.paper_claims.readings.PaperClaim` three ways:

- reproduction: the recipe's value at the stated noise against the stated number (``reproduced`` within
  the printed precision, else ``not reproduced``); for a noise claim, the scale of the noise that meets the
  target against the printed noise;
- the checked reading (the sound one where the paper's recipe differs from what its algorithm runs):
  ``reproduced``, ``optimistic`` (the paper's epsilon is smaller than what holds) or ``conservative``;
- every accountant on the checked reading's mechanism, and the tight verdict of
  :mod:`privaudit.accountants.paper_claims.verdict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from privaudit.accountants.base import EpsilonResult
from privaudit.accountants.paper_claims.readings import (TOLERANCE, PaperClaim, Reading, half_unit,
                                                         noise_rel_precision)
from privaudit.accountants.paper_claims.verdict import (PLD_INTERVALS, TightVerdict, finite, scale_needed,
                                                        tight_verdict)
from privaudit.accountants.registry import all_epsilons


@dataclass
class ClaimCheck:
    """What the accountants say about one :class:`PaperClaim`."""

    claim: PaperClaim
    recipe_value: float | None
    recipe_reason: str | None
    recipe_verdict: str
    recipe_gap: float | None
    value: float | None
    verdict: str
    gap: float | None
    epsilons: dict[str, EpsilonResult]
    noise_needed: dict[str, float | None]
    alternatives: list[tuple[str, float | None, str | None]]
    tight: TightVerdict | None = None

    def to_dict(self) -> dict[str, Any]:
        c = self.claim
        return {
            "id": c.id, "paper": c.paper, "source": c.source, "description": c.description, "kind": c.kind,
            "stated": c.stated, "target": c.target, "noise": list(c.noise),
            "recipe": {"reading": c.recipe.label, "accountant": c.recipe.accountant, "metric": c.recipe.metric,
                       "value": finite(self.recipe_value), "reason": self.recipe_reason,
                       "verdict": self.recipe_verdict, "relative_gap": self.recipe_gap},
            "checked": {"reading": c.checked.label, "accountant": c.checked.accountant, "metric": c.checked.metric,
                        "value": finite(self.value), "verdict": self.verdict, "relative_gap": self.gap},
            "epsilon": {name: r.to_dict() for name, r in self.epsilons.items()},
            "noise_needed": self.noise_needed,
            "alternatives": [{"reading": label, "value": finite(v), "reason": why}
                             for label, v, why in self.alternatives],
            "verdict": None if self.tight is None else self.tight.to_dict(),
            "notes": list(c.notes),
        }


@dataclass
class _Assessment:
    value: float | None
    result: EpsilonResult
    verdict: str
    gap: float | None
    scale: float | None = None  # noise scale needed to meet the target (kind "noise")


def _assess(reading: Reading, claim: PaperClaim) -> _Assessment:
    """Value of ``reading`` at the stated noise and its verdict against the stated number."""
    value, result = reading.value(claim.noise_values)
    if value is None:
        return _Assessment(None, result, "not applicable", None)
    stated = float(claim.stated if claim.kind != "noise" else claim.target)
    gap = value / stated - 1 if stated else None
    if claim.kind == "bound":
        return _Assessment(value, result, "reproduced" if value < stated else "optimistic", gap)
    if claim.kind == "noise":
        scale = scale_needed(reading, claim, stated)
        if abs(scale - 1) <= max(noise_rel_precision(claim), TOLERANCE):
            verdict = "reproduced"
        else:
            verdict = "optimistic" if scale > 1 else "conservative"
        return _Assessment(value, result, verdict, gap, scale)
    if abs(gap) <= TOLERANCE or _within_printed_noise(reading, claim, stated):
        return _Assessment(value, result, "reproduced", gap)
    return _Assessment(value, result, "optimistic" if value > stated else "conservative", gap)


def _within_printed_noise(reading: Reading, claim: PaperClaim, stated: float) -> bool:
    """Whether the stated epsilon lies between the reading's values at the ends of the printed noise's
    precision (widened by half a unit of the stated number's last digit)."""
    half, r = half_unit(claim.stated), noise_rel_precision(claim)
    hi, _ = reading.value([(1 - r) * z for z in claim.noise_values])  # less noise, larger value
    lo, _ = reading.value([(1 + r) * z for z in claim.noise_values])
    return lo is not None and hi is not None and lo - half <= stated <= hi + half


def _accountant_options(reading: Reading) -> dict[str, dict[str, Any]]:
    """Options of every accountant for the checked reading: its own accountant's, its RDP conversion, and
    the coarse PLD discretisation (refined by the tight verdict where needed)."""
    options: dict[str, dict[str, Any]] = {}
    if reading.accountant in ("rdp", "tree", "gaussian"):
        options[reading.accountant] = dict(reading.options)
    if "conversion" in reading.options:
        options.setdefault("rdp", {})["conversion"] = reading.options["conversion"]
        options.setdefault("tree", {})["conversion"] = reading.options["conversion"]
    options.setdefault("pld", {})["value_discretization_interval"] = PLD_INTERVALS[0]
    return options


def check_claim(claim: PaperClaim, *, accountants: Sequence[str] | None = None) -> ClaimCheck:
    """Evaluate one paper claim under its recipe, its sound reading and every accountant."""
    recipe = _assess(claim.recipe, claim)
    checked = recipe if claim.sound is None else _assess(claim.sound, claim)
    recipe_verdict = "not reproduced" if recipe.verdict in ("optimistic", "conservative") else recipe.verdict
    reading = claim.checked
    options = _accountant_options(reading)
    names = list(accountants) if accountants is not None else None
    epsilons = {k: v for k, v in all_epsilons(reading.build(claim.noise_values), options=options).items()
                if names is None or k in names}
    noise_needed: dict[str, float | None] = {}
    if claim.kind == "noise":
        for label, assessment in (("recipe", recipe), ("checked", checked)):
            scale = assessment.scale
            noise_needed[label] = None if scale is None else scale * claim.noise_values[0]
    alternatives = []
    for alt in claim.alternatives:
        v, r = alt.value(claim.noise_values)
        alternatives.append((alt.label, v, r.reason))
    all_results = epsilons if names is None else all_epsilons(reading.build(claim.noise_values), options=options)
    tight = None if checked.value is None else tight_verdict(claim, all_results)
    return ClaimCheck(claim=claim, recipe_value=recipe.value, recipe_reason=recipe.result.reason,
                      recipe_verdict=recipe_verdict, recipe_gap=recipe.gap, value=checked.value,
                      verdict=checked.verdict, gap=checked.gap, epsilons=epsilons, noise_needed=noise_needed,
                      alternatives=alternatives, tight=tight)
