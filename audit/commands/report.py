"""``privaudit report DIR``: regenerate report.md, report.html and the plots of a run, with its gate recomputed from
its evidence (:mod:`privaudit.audit.verify.evidence`): the pages never show a gate the evidence does not give.
report.json itself is left as it is."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="regenerate a run's Markdown, HTML and plots from its report.json")
    p.add_argument("directory", help="the run's output directory (holding report.json)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from privaudit.audit.verify.evidence import render_report

    paths = render_report(args.directory)
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0
