"""Each registered utility claim judged from the benchmark's reference (:mod:`privaudit.audit.benchmark.claims`).

A comparison of two cells is the paired difference of their accuracies on the same test images
(:func:`privaudit.audit.benchmark.stats.paired_difference`), its exact interval taken at the register's family-wise
level: with M comparisons in the register, each at 1 - alpha / M (Bonferroni, alpha = 0.05), so that the chance that
*any* verdict of a true claim reads "contradicted" is at most alpha (a false refutation is the worst output). Then:

* ``above`` (A above B): reproduced when the interval lies above 0, contradicted when it lies below 0;
* ``tie`` (|A - B| <= margin): reproduced when the interval lies within [-margin, margin], contradicted when it
  lies wholly outside it;
* otherwise "not decidable at this power", and the interval says what was decidable: a difference outside it would
  have decided the comparison.

An ALM loss claim reads the cell's privacy-utility curve: each row's utility loss is a mean over noise draws, its
standard error std / sqrt(draws); two mechanisms' losses are compared as independent means (their common random
numbers make the difference's variance smaller, so the interval is conservative), with the same normal quantile.

A claim is contradicted when any of its comparisons is, reproduced when all are, and otherwise not decidable.
A comparison whose cells are missing or errored is "not measured", and so is its claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from scipy import stats as sps

from privaudit.audit.benchmark.claims import Comparison, LossClaim, UtilityClaim, utility_claims
from privaudit.audit.benchmark.stats import paired_difference
from privaudit.defenses.evaluation.utility import unpack_correct

ALPHA = 0.05
REPRODUCED, CONTRADICTED, UNDECIDED, MISSING = ("reproduced", "contradicted", "not decidable at this power",
                                                "not measured")


@dataclass(frozen=True)
class Measured:
    """One comparison as measured: A and B (accuracy or loss), the difference and its family-level interval."""

    setting: str
    a: float | None
    b: float | None
    delta: float | None
    low: float | None
    high: float | None
    verdict: str
    paper: tuple[float, float] | None = None
    why: str = ""


@dataclass(frozen=True)
class ClaimVerdict:
    claim: UtilityClaim | LossClaim
    verdict: str
    measured: tuple[Measured, ...]
    level: float

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.claim.id, "paper": self.claim.paper, "source": self.claim.source,
                "statement": self.claim.statement, "verdict": self.verdict, "level": self.level,
                "measured": [m.__dict__ for m in self.measured]}


def comparisons_in(claims: Sequence[UtilityClaim | LossClaim]) -> int:
    """M: how many comparisons the register makes (the Bonferroni divisor)."""
    return sum(len(c.comparisons) if isinstance(c, UtilityClaim) else len(c.epsilons) for c in claims)


def judge(reference: Mapping[str, Any], claims: Sequence[UtilityClaim | LossClaim] | None = None,
          alpha: float = ALPHA) -> list[ClaimVerdict]:
    """The verdict of every claim (default: the register) on ``reference`` (:func:`~privaudit.audit.benchmark.
    reference.measure`'s dict)."""
    claims = list(utility_claims() if claims is None else claims)
    level = 1 - alpha / max(1, comparisons_in(claims))
    cells = {(c["label"], c["target_epsilon"]): c for c in reference["cells"]}
    out = []
    for claim in claims:
        if isinstance(claim, UtilityClaim):
            measured = tuple(_compare(claim, c, cells, level) for c in claim.comparisons)
        else:
            measured = tuple(_loss(claim, eps, cells, level) for eps in claim.epsilons)
        out.append(ClaimVerdict(claim, combine([m.verdict for m in measured]), measured, level))
    return out


def combine(verdicts: Sequence[str]) -> str:
    """A claim's verdict from its comparisons' (module docstring)."""
    if MISSING in verdicts:
        return MISSING
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    return REPRODUCED if verdicts and all(v == REPRODUCED for v in verdicts) else UNDECIDED


def decide(relation: str, low: float, high: float, margin: float, threshold: float = 0.0) -> str:
    """The verdict of an interval [low, high] of A - B (``above``: A above B by more than ``threshold``;
    ``below``: A below B; ``tie``: within ``margin``)."""
    if relation == "tie":
        if -margin <= low and high <= margin:
            return REPRODUCED
        return CONTRADICTED if low > margin or high < -margin else UNDECIDED
    if relation == "below":
        low, high = -high, -low
    if low > threshold:
        return REPRODUCED
    return CONTRADICTED if high < threshold else UNDECIDED


def _setting(label: str, eps: float | None) -> str:
    return label if eps is None else f"{label} eps={eps:g}"


def _compare(claim: UtilityClaim, comp: Comparison, cells: Mapping[tuple[str, Any], Mapping[str, Any]],
             level: float) -> Measured:
    a_cell = cells.get((comp.a, comp.eps_a))
    b_cell = a_cell if comp.b == "init" else cells.get((comp.b, comp.eps_b))
    name = f"{_setting(comp.a, comp.eps_a)} vs {_setting(comp.b, comp.eps_b) if comp.b != 'init' else 'its init'}"
    name += f" ({'linear' if comp.metric.startswith('linear') else 'k-NN'})"
    a_bits, b_bits = _bits(a_cell, "trained", comp.metric), _bits(b_cell, "init" if comp.b == "init" else "trained",
                                                                   comp.metric)
    if a_bits is None or b_bits is None or len(a_bits) != len(b_bits):
        return Measured(name, None, None, None, None, None, MISSING, comp.paper, "a cell is missing or errored")
    diff = paired_difference(a_bits, b_bits, level)
    return Measured(name, float(a_bits.mean()), float(b_bits.mean()), diff.delta, diff.low, diff.high,
                    decide(claim.relation, diff.low, diff.high, claim.margin), comp.paper)


def _bits(cell: Mapping[str, Any] | None, which: str, metric: str):
    if not cell or cell.get("error") or not cell.get("correct"):
        return None
    n = (cell.get("vs_init") or {}).get(metric, {}).get("n")
    text = (cell["correct"].get(which) or {}).get(metric)
    return None if text is None or not n else unpack_correct(text, int(n))


def _loss(claim: LossClaim, eps: float, cells: Mapping[tuple[str, Any], Mapping[str, Any]],
          level: float) -> Measured:
    cell = cells.get((claim.cell, eps)) or {}
    rows = {(r.get("mechanism"), r.get("epsilon")): r for r in cell.get("curve") or [] if r.get("valid", True)}
    name = f"{claim.mechanism} at eps={eps:g}" + (f" vs {claim.other}" if claim.other else "")
    a = rows.get((claim.mechanism, eps))
    b = rows.get((claim.other, eps)) if claim.other else None
    if a is None or (claim.other and b is None) or cell.get("error"):
        return Measured(name, None, None, None, None, None, MISSING, None, "no curve row at this epsilon")
    z = sps.norm.ppf(1 - (1 - level) / 2)
    se = math.hypot(_se(a), _se(b) if b else 0.0)
    ref = b["utility_loss_mean"] if b else claim.threshold
    delta = a["utility_loss_mean"] - ref
    verdict = decide(claim.relation if b else "below", delta - z * se, delta + z * se, claim.margin)
    return Measured(name, a["utility_loss_mean"], ref, delta, delta - z * se, delta + z * se, verdict)


def _se(row: Mapping[str, Any]) -> float:
    return float(row.get("utility_loss_std") or 0.0) / math.sqrt(max(1, int(row.get("draws") or 1)))
