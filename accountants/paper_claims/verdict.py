"""The verdict taxonomy: is a stated number false, or can the paper's method merely not show it?

Every claim is judged on the *tightest sound accountant* for its checked reading (:func:`tight_verdict`,
:data:`VERDICTS`): the bracket [lower, upper] of the PLD of the reading's dominating pair (or an exact value:
the analytic Gaussian, zCDP of a Gaussian mechanism) decides between

- ``holds``: upper <= claimed (and the paper's method shows it too);
- ``holds; paper's method does not show it``: upper <= claimed < the paper's own accountant on the same
  mechanism (:func:`paper_method`);
- ``false``: even the lower end exceeds the claim (by how much, and the noise that would make it hold);
- ``undecided``: lower <= claimed < upper, or only an upper bound applies and it exceeds the claim;
- ``conservative``: upper < :data:`CONSERVATIVE` x claimed.

RDP is an upper bound only, so it can never make a claim ``false``. Claims compare at the paper's printed
precision: the claimed number plus half a unit of its last printed digit and
:data:`~privaudit.accountants.paper_claims.readings.TOLERANCE` relative (:func:`slack_of`). Every reason says the
tolerance it applied ("10.04, above the claimed 10 but within its printed precision (up to 10.55 ...)") and prints
each comparison with enough digits that it is true as printed (:func:`comparison`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from privaudit.accountants.base import EpsilonResult
from privaudit.accountants.calibrate import smallest_passing
from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.paper_claims.readings import TOLERANCE, PaperClaim, Reading, half_unit
from privaudit.accountants.registry import get_accountant

VERDICTS = ("holds", "holds; paper's method does not show it", "false", "undecided", "conservative")
CONSERVATIVE = 0.8  # tight upper end below this fraction of the claim: "conservative"
EXACT = {"gaussian"}  # accountants whose value is the mechanism's exact epsilon (a bracket of width 0)
PLD_INTERVALS = (1e-3, 1e-4)  # coarse first; refined when the claim lies inside the bracket


def finite(x: float | None) -> float | None:
    """``x`` for JSON: None for a missing, infinite or NaN value."""
    return None if x is None or math.isinf(x) or math.isnan(x) else x


@dataclass
class TightVerdict:
    """A claim judged on the tightest sound accountant's bracket [lower, upper] and the paper's own method
    (see the module doc). ``factor``: lower / claimed for ``false``, upper / claimed otherwise;
    ``noise_needed``: for ``false``, the noise multiplier that would make the claim hold."""

    verdict: str
    accountant: str
    lower: float | None
    upper: float
    claimed: float
    metric: str
    paper_accountant: str
    paper_value: float | None
    factor: float
    noise_needed: float | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "accountant": self.accountant, "bracket": [finite(self.lower),
                finite(self.upper)], "claimed": self.claimed, "metric": self.metric,
                "paper_method": {"accountant": self.paper_accountant, "value": finite(self.paper_value)},
                "factor": finite(self.factor), "noise_needed": finite(self.noise_needed), "reason": self.reason}


@dataclass(frozen=True)
class _Candidate:
    label: str
    upper: float
    lower: float | None
    accountant: str
    options: Mapping[str, Any]


def scale_needed(reading: Reading, claim: PaperClaim, target: float) -> float:
    """The factor by which every noise multiplier must be scaled for ``reading`` to meet ``target``."""
    def f(scale: float) -> float:
        value, _ = reading.value([scale * z for z in claim.noise_values])
        return math.inf if value is None else value

    return smallest_passing(f, target, 1e-3, 1e3, 1e-6)


def _noise_needed(claim: PaperClaim, reading: Reading, accountant: str, options: Mapping[str, Any],
                  target: float) -> float:
    """The first noise multiplier at which ``accountant`` shows ``target`` (all multipliers scaled together)."""
    def f(scale: float) -> float:
        built = reading.build([scale * z for z in claim.noise_values])
        result = get_accountant(accountant, **dict(options)).upper_only().epsilon(built)
        return math.inf if result.epsilon is None else result.epsilon

    return smallest_passing(f, target, 1.0, 1e3, 1e-4) * claim.noise_values[0]


def _tight_candidates(claim: PrivacyClaim, epsilons: Mapping[str, EpsilonResult],
                      claimed: float) -> list[_Candidate]:
    """Every accountant with a finite value, with its lower end where it has one; PLD refined if undecided."""
    out = []
    for name, result in epsilons.items():
        if result.epsilon is None or math.isinf(result.epsilon) or name == "pld":
            continue
        exact = name in EXACT and (result.details or {}).get("method") == "analytic"
        out.append(_Candidate(name, result.epsilon, result.epsilon if exact else None, name, {}))
    pld = epsilons.get("pld")
    for interval in PLD_INTERVALS:
        if interval != PLD_INTERVALS[0] or pld is None:
            pld = get_accountant("pld", value_discretization_interval=interval).epsilon(claim)
        if pld.epsilon is None or math.isinf(pld.epsilon):
            return out
        lower, upper = pld.details["epsilon_lower"], pld.epsilon
        if not lower <= claimed * (1 + TOLERANCE) < upper:
            break
    out.append(_Candidate(f"pld (discretisation {interval:g})", upper, lower, "pld",
                          {"value_discretization_interval": interval}))
    return out


def _bracket(claim: PaperClaim, epsilons: Mapping[str, EpsilonResult],
             claimed: float) -> tuple[_Candidate, float | None]:
    """The tightest candidate (smallest upper end) for the checked reading, and the largest lower end."""
    reading = claim.checked
    if reading.metric == "rho":  # zCDP of a Gaussian mechanism is exact: rho = Delta^2 / (2 sigma^2)
        rho, _ = reading.value(claim.noise_values)
        return _Candidate(f"{reading.accountant} (zCDP, exact for Gaussian noise)", rho, rho, reading.accountant,
                          reading.options), rho
    candidates = _tight_candidates(reading.build(claim.noise_values), epsilons, claimed)
    lowers = [c.lower for c in candidates if c.lower is not None]
    return min(candidates, key=lambda c: c.upper), (max(lowers) if lowers else None)


def paper_method(claim: PaperClaim) -> Reading:
    """The paper's own accountant (and its options) applied to the mechanism as the algorithm runs it."""
    if claim.sound is None:
        return claim.recipe
    return Reading(claim.sound.label, claim.sound.build, claim.recipe.accountant, claim.recipe.options,
                   claim.sound.metric)


def shown(x: float, digits: int = 4) -> str:
    """``x`` as the verdict texts print it (``digits`` significant digits)."""
    return f"{x:.{digits}g}"


def comparison(a: float, op: str, b: float) -> str:
    """"a op b" (``op``: ``<=``, ``<`` or ``>``) printed with enough digits that the printed numbers compare as the
    numbers do (4 significant digits unless rounding would make the printed comparison false)."""
    holds = {"<=": lambda x, y: x <= y, "<": lambda x, y: x < y, ">": lambda x, y: x > y}[op]
    for digits in (4, 6, 8, 12, 17):
        left, right = shown(a, digits), shown(b, digits)
        if holds(float(left), float(right)):
            return f"{left} {op} {right}"
    return f"{a!r} {op} {b!r}"


def within_precision(value: float, claim: PaperClaim, claimed: float, slack: float) -> str:
    """The text of a value the claim allows only through its printed precision: "10.04, above the claimed 10 but
    within its printed precision (up to 10.05: 0.5% relative)"."""
    digit = "half a unit of its last printed digit and " if claim.kind != "noise" else ""
    return (f"{shown(value)}, above the claimed {shown(claimed, 6)} but within its printed precision (up to "
            f"{shown(slack)}: {digit}{TOLERANCE:.1%} relative)")


def _false(claim: PaperClaim, best: _Candidate, lower: float, claimed: float) -> tuple[float, float, str]:
    """(factor, noise needed, reason) of a claim the tight lower end exceeds."""
    reading = claim.checked
    factor = lower / claimed
    if reading.metric == "rho":
        noise_needed = scale_needed(reading, claim, claimed) * claim.noise_values[0]
    else:
        noise_needed = _noise_needed(claim, reading, best.accountant, best.options, claimed)
    reason = (f"even the tight lower end exceeds the claim beyond its printed precision: "
              f"{comparison(lower, '>', slack_of(claim, claimed))} (x{factor:.3g} the claimed {shown(claimed, 6)}); "
              f"noise multiplier {noise_needed:.4g} would make it hold")
    return factor, noise_needed, reason


def slack_of(claim: PaperClaim, claimed: float) -> float:
    """The largest value the claim allows: the claimed number plus :data:`TOLERANCE` relative and, for a stated
    epsilon (not a noise target), half a unit of its last printed digit."""
    return claimed * (1 + TOLERANCE) + (half_unit(claim.stated) if claim.kind != "noise" else 0.0)


def _meets(name: str, upper: float, claim: PaperClaim, claimed: float, slack: float) -> str:
    """"<accountant> gives <upper> <= <claimed>", or, above the claimed number, the printed precision it is within."""
    if upper <= claimed:
        return f"{name} gives {comparison(upper, '<=', claimed)}"
    return f"{name} gives {within_precision(upper, claim, claimed, slack)}"


def _holds(claim: PaperClaim, best: _Candidate, claimed: float, slack: float,
           paper_value: float | None) -> tuple[str, str]:
    """(verdict, reason) of a claim the tight upper end meets: holds, conservatively, or beyond its method."""
    name, upper = best.label, best.upper
    if paper_value is not None and paper_value > slack:
        return "holds; paper's method does not show it", (
            f"{_meets(name, upper, claim, claimed, slack)}, but the paper's accountant "
            f"({paper_method(claim).accountant}) on the same mechanism gives {comparison(paper_value, '>', slack)}")
    if upper < CONSERVATIVE * claimed:
        return "conservative", (f"{name} gives {comparison(upper, '<', CONSERVATIVE * claimed)}, well below the "
                                f"claimed {shown(claimed, 6)}")
    return "holds", _meets(name, upper, claim, claimed, slack)


def _undecided_reason(name: str, lower: float | None, upper: float, claimed: float, slack: float) -> str:
    if lower is not None:
        return (f"the claim (up to {shown(slack)} with its printed precision) lies inside the bracket of {name}: "
                f"{comparison(lower, '<=', slack)} and {comparison(slack, '<', upper)}")
    return (f"only an upper bound applies ({name}: {comparison(upper, '>', slack)}, the claim with its printed "
            "precision); no tight accountant covers this mechanism, so it is not shown false")


def tight_verdict(claim: PaperClaim, epsilons: Mapping[str, EpsilonResult]) -> TightVerdict:
    """The taxonomy verdict of ``claim`` (see the module doc) from its checked reading's mechanism."""
    claimed = float(claim.target if claim.kind == "noise" else claim.stated)
    paper_value, _ = paper_method(claim).value(claim.noise_values)
    slack = slack_of(claim, claimed)
    best, lower = _bracket(claim, epsilons, claimed)
    name, upper = best.label, best.upper
    noise_needed = None
    if lower is not None and lower > slack:
        verdict = "false"
        factor, noise_needed, reason = _false(claim, best, lower, claimed)
    elif upper <= slack:
        factor = upper / claimed
        verdict, reason = _holds(claim, best, claimed, slack, paper_value)
    else:
        verdict, factor = "undecided", upper / claimed
        reason = _undecided_reason(name, lower, upper, claimed, slack)
    return TightVerdict(verdict, name, lower, upper, claimed, claim.checked.metric, paper_method(claim).accountant,
                        paper_value, factor, noise_needed, reason)
