"""``privaudit gate-power SUITE``: the smallest noise shortfall the suite's gate catches, per epsilon.

Plants under-noising factors into each gated DP-SGD-style defense of the suite (:mod:`privaudit.audit.gate_power`)
and writes ``gate_power.json`` and ``gate_power.md`` into ``--out`` (default: the suite's out, ``/gate-power``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from privaudit.audit.commands.common import format_table
from privaudit.core.errors import ConfigError


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"expected comma-separated numbers, got {text!r}") from None


def register(sub: argparse._SubParsersAction) -> None:
    from privaudit.audit.gate_power import FACTORS, NEEDED, PLANTS, SEEDS

    p = sub.add_parser("gate-power", help="plant noise shortfalls into a suite's DP defenses and report the smallest "
                                          "one its gate catches, per epsilon")
    p.add_argument("suite", help="suite file or a shipped suite's name")
    p.add_argument("--factors", type=_floats, default=list(FACTORS), metavar="F,F,...",
                   help=f"under-noising factors, each > 1 (default {','.join(f'{f:g}' for f in FACTORS)})")
    p.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds per factor (default {SEEDS})")
    p.add_argument("--needed", type=int, default=NEEDED, help=f"seeds a caught factor needs (default {NEEDED})")
    p.add_argument("--plants", default=",".join(PLANTS),
                   help=f"what is planted: claim, noise, step, steps (default {','.join(PLANTS)})")
    p.add_argument("--defenses", default=None, help="comma-separated defense labels or names (default: every gated one)")
    p.add_argument("--epsilons", type=_floats, default=None, help="comma-separated epsilons (default: the suite's)")
    p.add_argument("--workers", type=int, default=2, help="planted runs in parallel processes (default 2)")
    p.add_argument("--out", default=None, help="output directory (default: <the suite's out>/gate-power)")
    p.add_argument("--data-dir", default=None, help="directory holding torchvision-format datasets")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def markdown(result: dict[str, Any]) -> str:
    """The result as a short Markdown page: the statements, then every factor row."""
    rows = [[r["defense"], f"{r['epsilon']:g}", r["plant"], f"{r['factor']:g}", f"{r['caught']}/{r['runs']}",
             ", ".join(f"{k} {v}" for k, v in sorted(r["caught_by"].items())) or "-"] for r in result["rows"]]
    lines = [f"# Gate power: {result['suite']}", "", *[f"- {s}" for s in result["statements"]], "",
             f"Each planted cell is judged as a positive control of the suite's gate at its family size "
             f"({result['family']} comparisons); a factor is caught when at least {result['needed']} of "
             f"{result['seeds']} seeds are.", "", "```", format_table(
                 ["defense", "ε", "plant", "factor", "caught", "caught by"], rows), "```", ""]
    if result["skipped"]:
        lines += ["Not planted:", *[f"- {s}" for s in result["skipped"]], ""]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from privaudit.audit.gate_power import measure
    from privaudit.audit.suite import load_suite
    from privaudit.core.io import atomic_write_json, atomic_write_text, check_output_dir, to_json

    suite = load_suite(args.suite, data_dir=args.data_dir)
    out = check_output_dir(args.out if args.out is not None else Path(suite.out) / "gate-power")
    defenses = None if args.defenses is None else [d.strip() for d in args.defenses.split(",") if d.strip()]
    result = measure(suite, factors=args.factors, seeds=args.seeds, needed=args.needed,
                     plants=[p.strip() for p in args.plants.split(",") if p.strip()], defenses=defenses,
                     epsilons=args.epsilons, workers=args.workers, progress=not args.quiet)
    atomic_write_json(Path(out) / "gate_power.json", result)
    atomic_write_text(Path(out) / "gate_power.md", markdown(result))
    print(to_json(result) if args.json else "\n".join(result["statements"]))
    if result["errors"]:
        print(f"gate-power: {result['errors']} planted runs errored (see gate_power.json); their seeds count as "
              "missed", file=sys.stderr)
        return 3
    return 0
