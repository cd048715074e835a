"""``privaudit gate DIR``: the gate of a finished run, recomputed from its evidence
(:mod:`privaudit.audit.verify.evidence`), per cell: bound, claim, margin, verdict; exit 0 when the recomputed gate
passes, 1 when it fails (report.json's own status is never read as the answer), 2 when DIR holds no report."""

from __future__ import annotations

import argparse
from typing import Any

from privaudit.audit.commands.common import add_junit_arg, format_table, junit_target, write_junit_cases


def register(sub: argparse._SubParsersAction) -> None:
    text = "print a run's gate per cell (bound, claim, margin) and exit 1 if it failed"
    p = sub.add_parser("gate", help=text, description=text[0].upper() + text[1:] + ": every verdict is recomputed "
                       "from the run's saved evidence, never from report.json (docs/gate.md).")
    p.add_argument("directory", help="the run's output directory (holding report.json and the cells' evidence)")
    add_junit_arg(p)
    p.set_defaults(func=run)


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.4g}"


def rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per gated or secondary comparison: cell, attack, role, bound (gate level), claim, margin, verdict."""
    out = []
    for cell in report["cells"]:
        gate = cell.get("gate") or {}
        role = "control" if gate.get("control") else "claim"
        for c in gate.get("comparisons", []):
            if c["verdict"] == "not comparable":
                continue
            bound = c.get("gate_eps_lower_bound") if c["verdict"] != "secondary" else c.get("eps_lower_bound")
            margin = None if bound is None or c.get("epsilon") is None else c["epsilon"] - bound
            out.append([cell["id"], c["attack"], role if c["verdict"] != "secondary" else "secondary", _num(bound),
                        f"{_num(c.get('epsilon'))} ({c.get('accountant')})", _num(margin), c["verdict"]])
    return out


def _timings(directory: str) -> dict[str, Any]:
    """The run's ``timings.json`` (each cell's time for its cases), or nothing when it is missing or unreadable."""
    import json
    from pathlib import Path

    try:
        timings = json.loads((Path(directory) / "timings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return timings if isinstance(timings, dict) else {}


def run(args: argparse.Namespace) -> int:
    from privaudit.audit.gate.junit import gate_cases
    from privaudit.audit.verify.evidence import recompute

    junit = junit_target(args)
    recomputed = recompute(args.directory)
    gate = recomputed.gate
    write_junit_cases(junit, f"privaudit gate {args.directory}",
                      gate_cases(recomputed.report, _timings(args.directory)))
    print(format_table(["cell", "attack", "role", "ε_lb (gate)", "claimed ε (accountant)", "margin", "verdict"],
                       rows(recomputed.report)))
    print(f"\ngate: {gate.status.upper()} (recomputed from the evidence in {args.directory})")
    for line in gate.notes:
        print(f"  note: {line}")
    for line in gate.reasons:
        print(f"  - {line}")
    return 0 if gate.status == "pass" else 1
