"""What the gate-power measurements say in words: the one-line statement per epsilon of the noise shortfalls
(:func:`statements`) and each row's progress line (:func:`factor_line`, :func:`bug_line`). The pages of both
results are ``privaudit gate-power``'s (:mod:`privaudit.audit.commands.gate_power`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def statements(smallest: Sequence[Mapping[str, Any]], factors: Sequence[float], seeds: int, needed: int) -> list[str]:
    """Per epsilon: the largest smallest-caught factor over the defenses and plants, as a sentence."""
    out = []
    for eps in sorted({s["epsilon"] for s in smallest}):
        at = [s for s in smallest if s["epsilon"] == eps]
        missed = [s for s in at if s["smallest_caught"] is None]
        if missed:
            out.append(f"at epsilon {eps:g} this gate misses a noise shortfall of up to {max(factors):g}x in "
                       + ", ".join(f"{s['defense']} ({s['plant']})" for s in missed)
                       + f" (fewer than {needed} of {seeds} seeds caught)")
            continue
        worst = max(s["smallest_caught"] for s in at)
        out.append(f"this gate detects a noise shortfall of {worst:g}x or more at epsilon {eps:g} "
                   f"({needed} of {seeds} seeds; defenses {', '.join(sorted({s['defense'] for s in at}))}; "
                   f"plants {', '.join(sorted({s['plant'] for s in at}))})")
    return out


def _caught_by(caught_by: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(caught_by.items())) or "-"


def _errors(errors: Sequence[str]) -> str:
    return f"; {len(errors)} errored: {errors[0]}" if errors else ""


def factor_line(row: Mapping[str, Any]) -> str:
    """The progress line of a noise shortfall's row (``FactorRow.to_dict()``)."""
    return (f"gate-power: {row['defense']} eps={row['epsilon']:g} {row['plant']} x{row['factor']:g}: caught "
            f"{row['caught']}/{row['runs']} ({_caught_by(row['caught_by'])})" + _errors(row["errors"]))


def bug_line(row: Mapping[str, Any]) -> str:
    """The progress line of a bug's row."""
    return (f"gate-power --bugs: {row['defense']} eps={row['epsilon']:g} {row['bug']}: failed "
            f"{row['caught']}/{row['runs']} ({_caught_by(row['caught_by'])})" + _errors(row["errors"]))
