"""``privaudit gate-power SUITE``: the smallest noise shortfall the suite's gate catches, per epsilon.

Plants under-noising factors into each gated DP-SGD-style defense of the suite
(:mod:`privaudit.audit.verify.gate_power`) and writes ``gate_power.json`` and ``gate_power.md`` into ``--out`` (default:
the suite's out, ``/gate-power``).
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
    from privaudit.audit.verify.gate_power import FACTORS, NEEDED, PLANTS, SEEDS

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
    p.add_argument("--bugs", default=None, metavar="FILE",
                   help="plant a catalogue of bugs (a Python file defining BUGS, e.g. tests/bug_plants.py) instead "
                        "of noise shortfalls: each bug's catch rate over --seeds seeds (needs --allow-plugins)")
    p.add_argument("--bug-names", default=None, help="comma-separated bugs of the catalogue (default: all)")
    p.add_argument("--allow-plugins", action="store_true", help="allow --bugs to import its catalogue file")
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


def bugs_markdown(result: dict[str, Any]) -> str:
    """The bug catalogue's result: per class its catch rate and worst row, then every row."""
    rows = [[r["class"], r["bug"], r["defense"], f"{r['epsilon']:g}", f"{r['caught']}/{r['runs']}",
             ", ".join(f"{k} {v}" for k, v in sorted(r["caught_by"].items())) or "-"] for r in result["rows"]]
    classes = [f"- **{name}**: the gate failed {c['caught']} of {c['runs']} planted runs; lowest rate "
               f"{c['worst']['rate']:.0%} ({c['worst']['bug']} in {c['worst']['defense']} at epsilon "
               f"{c['worst']['epsilon']:g})" for name, c in result["classes"].items() if name != "correct"]
    correct = result["classes"].get("correct")
    if correct:
        failed = [f"{r['defense']} at epsilon {r['epsilon']:g} ({r['caught']} of {r['runs']}, by "
                  f"{', '.join(sorted(r['caught_by'])) or '-'})" for r in result["rows"]
                  if r["class"] == "correct" and r["caught"]]
        classes.append(f"- **correct** (no bug): the gate failed {correct['caught']} of {correct['runs']} runs"
                       + (f"; each a false refutation: {'; '.join(failed)}" if failed else ""))
    return "\n".join([f"# Gate power over bug classes: {result['suite']}", "",
                      f"Catalogue `{Path(result['catalogue']).name}`; {result['seeds']} seeds per row; each run judged "
                      f"as a claim by the suite's gate (family {result['family']} plus its own comparisons); "
                      "'failed' counts the runs the gate failed.", "", *classes, "", "```",
                      format_table(["class", "bug", "defense", "ε", "failed", "failed by"], rows), "```", ""])


def run_bugs(args: argparse.Namespace, suite: Any, out: Path, defenses: list[str] | None) -> int:
    from privaudit.audit.verify.gate_power_bugs import measure_bugs
    from privaudit.core.io import atomic_write_json, atomic_write_text, to_json

    if not args.allow_plugins:
        raise ConfigError("--bugs imports a Python file: pass --allow-plugins to allow it")
    names = None if args.bug_names is None else [b.strip() for b in args.bug_names.split(",") if b.strip()]
    result = measure_bugs(suite, args.bugs, bugs=names, seeds=args.seeds, defenses=defenses,
                          epsilons=args.epsilons, workers=args.workers, progress=not args.quiet)
    atomic_write_json(out / "gate_power_bugs.json", result)
    atomic_write_text(out / "gate_power_bugs.md", bugs_markdown(result))
    print(to_json(result) if args.json else bugs_markdown(result))
    return 3 if result["errors"] else 0


def run(args: argparse.Namespace) -> int:
    from privaudit.audit.verify.gate_power import measure
    from privaudit.audit.suite.load import load_suite
    from privaudit.core.io import atomic_write_json, atomic_write_text, check_output_dir, to_json

    suite = load_suite(args.suite, data_dir=args.data_dir)
    out = check_output_dir(args.out if args.out is not None else Path(suite.out) / "gate-power")
    defenses = None if args.defenses is None else [d.strip() for d in args.defenses.split(",") if d.strip()]
    if args.bugs is not None:
        return run_bugs(args, suite, Path(out), defenses)
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
