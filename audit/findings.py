"""Per-step findings folded for a reader: one line per check, its steps given as ranges.

A check that fails at every step of a run (a shuffled sampler under Poisson accounting, a noise shortfall) finds
the same thing once per step. :func:`fold_findings` turns a check's findings into one line: the steps as ranges
(``steps 1-112 (every step)``, ``steps 3-9, 40 (8 of 112 steps)``) and the message once when it is the same at
every step, else the first step's message with the observed values summarised (the smallest and the largest, each
with its step). A finding of the run as a whole (no step) keeps its message; a check's findings join in one line.
The per-step list itself is the record's (report.json keeps every finding); folding is for what a person reads.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

#: How a per-step finding's message begins: ``step N: ``.
STEP_PREFIX = re.compile(r"^step (\d+): ")
#: Ranges shown before the rest are elided (their count still said).
SHOWN_RANGES = 6


def step_ranges(steps: Iterable[int], *, shown: int = SHOWN_RANGES) -> str:
    """``1-3, 7, 9-12`` for steps {1, 2, 3, 7, 9, 10, 11, 12}; past ``shown`` ranges, ``..., (k ranges)``."""
    runs: list[list[int]] = []
    for s in sorted(set(int(s) for s in steps)):
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs]
    if len(text) > shown:
        return ", ".join(text[:shown]) + f", ... ({len(text)} ranges)"
    return ", ".join(text)


def _coverage(count: int, total: int | None) -> str:
    if total is not None and count == total:
        return "every step"
    return f"{count} of {total} steps" if total is not None else f"{count} steps"


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out else None  # NaN has no order


def _values(rows: list[tuple[int, str, Mapping[str, Any]]]) -> str:
    """``observed 0.91 (step 7) to 1.1 (step 3)``, or the empty string when the values are not numbers."""
    seen = [(v, step) for step, _, f in rows if (v := _number(f.get("observed"))) is not None]
    if len(seen) < len(rows):
        return ""
    (lo, at_lo), (hi, at_hi) = min(seen), max(seen, key=lambda p: (p[0], -p[1]))
    return f"observed {lo:.6g} (step {at_lo}) to {hi:.6g} (step {at_hi})"


def _fold_steps(rows: list[tuple[int, str, Mapping[str, Any]]], total: int | None) -> str:
    """One check's per-step findings (step, message after its ``step N:`` prefix, finding) as one sentence."""
    if len(rows) == 1:
        step, rest, _ = rows[0]
        return f"step {step}: {rest}"
    where = f"steps {step_ranges(s for s, _, _ in rows)} ({_coverage(len(rows), total)})"
    if len({rest for _, rest, _ in rows}) == 1:
        return f"{where}: {rows[0][1]}"
    values = _values(rows)
    return f"{where}{', ' + values if values else ''}; the first, step {rows[0][0]}: {rows[0][1]}"


def fold_findings(findings: Iterable[Mapping[str, Any]], *, steps: int | None = None,
                  check: str = "check") -> list[dict[str, Any]]:
    """One ``{check, steps, message}`` per check, in the order the checks first appear: its per-step findings
    (``step`` set, message ``step N: ...``) folded as the module says, then its other findings' messages, joined
    by ``; ``. ``steps``: the run's steps (for "every step"); ``check``: the key naming a finding's check."""
    order: dict[str, tuple[list[tuple[int, str, Mapping[str, Any]]], list[str]]] = {}
    for f in findings:
        per_step, other = order.setdefault(str(f.get(check)), ([], []))
        message = str(f.get("message", ""))
        match = STEP_PREFIX.match(message)
        if f.get("step") is not None and match and int(match.group(1)) == int(f["step"]):
            per_step.append((int(f["step"]), message[match.end():], f))
        else:
            other.append(message)
    out = []
    for name, (per_step, other) in order.items():
        parts = ([_fold_steps(sorted(per_step, key=lambda r: r[0]), steps)] if per_step else []) + other
        out.append({check: name, "steps": sorted({s for s, _, _ in per_step}), "message": "; ".join(parts)})
    return out
