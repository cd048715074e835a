"""``privaudit suites``: list the shipped audit suites (run one by name: ``privaudit run quickstart``)."""

from __future__ import annotations

import argparse

from privaudit.audit.commands.common import add_output_args, emit_json, format_table

HELP = "list the shipped audit suites (run one by name: privaudit run quickstart)"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("suites", help=HELP)
    add_output_args(p)
    p.set_defaults(func=run)


def _description(path) -> str:
    from privaudit.audit.commands.common import tomllib

    try:
        text = tomllib.loads(path.read_text(encoding="utf-8")).get("description", "")
    except (OSError, tomllib.TOMLDecodeError):
        return "(unreadable)"
    return " ".join(str(text).split())


def run(args: argparse.Namespace) -> int:
    from privaudit.audit.suite.shipped import shipped_suites

    suites = shipped_suites()
    if args.json:
        emit_json({name: {"path": str(p), "description": _description(p)} for name, p in suites.items()})
        return 0
    rows = [[name, _description(p)] for name, p in suites.items()]
    print(format_table(["suite", "description"], rows))
    if suites:
        print(f"from {next(iter(suites.values())).parent}; "
              "run one with: privaudit run NAME (or a path to your own TOML)")
    return 0
