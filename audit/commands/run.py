"""``privaudit run SUITE``: run an audit suite end to end, write its report, exit with the gate's verdict."""

from __future__ import annotations

import argparse
import os
import sys

from privaudit.audit.commands.common import add_junit_arg, integer, junit_target, write_junit_cases
from privaudit.audit.run.runner import EXECUTOR_CHOICES, MAX_JOBS, run_suite
from privaudit.audit.suite.load import load_suite
from privaudit.core.errors import Terminated


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run an audit suite (TOML): train, attack, check claims, report, gate")
    p.add_argument("suite", help="suite file (e.g. suites/quickstart.toml) or a shipped suite's name "
                                 "(privaudit suites lists them)")
    p.add_argument("--out", default=None, help="output directory (default: the suite's out, reports/<name>)")
    p.add_argument("--executor", default="local", help=f"one of: {', '.join(EXECUTOR_CHOICES)}")
    p.add_argument("--resume", action="store_true", help="reuse the finished cells of an earlier run in --out")
    p.add_argument("--only", action="append", metavar="PATTERN",
                   help="run only the cells whose id matches this glob, e.g. 'digits/dpcl-*' (repeatable; "
                        "'sensitivity' selects the sensitivity checks)")
    p.add_argument("--data-dir", default=None, help="directory holding torchvision-format datasets")
    p.add_argument("--jobs", type=integer(1, MAX_JOBS), default=min(os.cpu_count() or 1, MAX_JOBS), metavar="N",
                   help="cells (and the sensitivity checks) run in N parallel processes; the report is the same as "
                        "with --jobs 1 (default: the number of cores, %(default)s here)")
    p.add_argument("--allow-plugins", action="store_true",
                   help="import defenses and attacks the suite names as module:Class (runs their code; same as "
                        "allow_plugins = true in the suite)")
    p.add_argument("--yes-large", action="store_true",
                   help="run a suite of more than 1000 cells (its size is printed when this is missing)")
    p.add_argument("--quiet", action="store_true", help="no progress bars or stage lines")
    add_junit_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    junit = junit_target(args)
    suite = load_suite(args.suite, out=args.out, data_dir=args.data_dir, allow_plugins=args.allow_plugins)
    try:
        result = run_suite(suite, out=args.out, executor=args.executor, resume=args.resume, only=args.only,
                           progress=not args.quiet, jobs=args.jobs, yes_large=args.yes_large)
    except Terminated as exc:
        raise Terminated(exc.signum, "finished cells are kept: privaudit run --resume goes on from them") from None
    gate = result.report["gate"]
    if junit is not None:
        from privaudit.audit.gate.junit import gate_cases

        write_junit_cases(junit, f"privaudit run {suite.name}", gate_cases(result.report, result.timings))
    total = result.timings.get("total", 0.0)
    print(f"report: {result.out / 'report.html'} (also report.md, report.json); "
          f"{len(result.ran)} cells run, {len(result.reused)} reused, {total:.0f}s")
    print(f"gate: {gate['status'].upper()}")
    for reason in gate["reasons"]:
        print(f"  - {reason}")
    sys.stdout.flush()
    return result.exit_code
