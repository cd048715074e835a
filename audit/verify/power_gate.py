"""The gate's verdict on one planted cell (:mod:`privaudit.audit.verify.planted`), as the gate-power measurements read
it: judged by the suite's gate (:func:`privaudit.audit.gate.judge.gate_cells`) at the family size the suite's gate
would use with the planted cell added, its primary attack the one gated; as a positive control
(:func:`judge_as_control`: the noise shortfalls, caught when the gate catches it) or as a claim
(:func:`judge_as_claim`: the bug catalogue, caught when the gate fails it).
"""

from __future__ import annotations

from typing import Any

from privaudit.audit.gate.judge import gate_cells, noise_failures
from privaudit.audit.report.records import CellGate, CellRecord


def _gate(record: CellRecord, family: int, config: Any, control: bool) -> CellGate:
    """The planted cell's gate, its first attack its primary statistic, at family size ``family``."""
    return gate_cells([record], config, {record.defense: (next(iter(record.attacks)), control)}, family=family)[0]


def judge_as_control(record: CellRecord, family: int, config: Any) -> tuple[bool, list[str]]:
    """Whether the suite's gate catches the planted cell as a positive control at family size ``family``, and what
    caught it."""
    gate = _gate(record, family, config, control=True)
    return bool(gate.caught), list(gate.caught_by or ())


def judge_as_claim(record: CellRecord, family: int, config: Any) -> tuple[bool, list[str], str]:
    """(the gate fails the cell judged as a claim, the checks that failed it, its first reason) at family size
    ``family``."""
    gate = _gate(record, family, config, control=False)
    by = {f"trace: {m['field']}" for m in record.trace_mismatches}
    by |= {name for name, _ in noise_failures(gate.released_noise or ())}
    by |= {c.attack for c in gate.comparisons if c.verdict == "exceeds"}
    return gate.status == "fail", sorted(by), (gate.reasons or ("",))[0]
