"""``privaudit validate SUITE...``: read and validate suites without running them (a lint step for CI).

Each suite goes through the loader ``privaudit run`` uses, so a suite that validates here is one ``run`` accepts on
this machine (the datasets' files and the device are checked too, unless ``--no-machine-checks``: a GPU suite
linted on a CPU machine); nothing is trained, imported beyond the registries (plugins only with
``--allow-plugins``, as for ``run``) or written. One line per suite; exit 0 when every
suite is valid, 2 when one is not (its line names the file, the key and the accepted values).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from privaudit.audit.commands.common import emit_json
from privaudit.core.errors import ConfigError

DESCRIPTION = ("Read each suite as privaudit run would and check every key, without training anything or writing "
               "a file. Exit 0 when every suite is valid; 2 when one is not, with one line naming the file, the key "
               "and the accepted values.")
HELP = "check suite files (TOML) without running them: exit 0 when valid, 2 with the reason when not"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help=HELP, description=DESCRIPTION)
    p.add_argument("suites", nargs="+", metavar="SUITE",
                   help="suite files (or shipped suites' names: privaudit suites lists them)")
    p.add_argument("--data-dir", default=None, help="directory holding torchvision-format datasets (as for run)")
    p.add_argument("--allow-plugins", action="store_true",
                   help="accept defenses and attacks named module:Class (imports them, which runs their code; as for "
                        "run)")
    p.add_argument("--no-machine-checks", action="store_true",
                   help="skip what depends on this machine: the datasets' files and the device (lint a suite "
                        "meant for another machine, e.g. a GPU suite on a CPU CI runner)")
    p.add_argument("--json", action="store_true", help="print one JSON object per suite instead of a line")
    p.set_defaults(func=run)


def summary(suite: Any) -> dict[str, Any]:
    """What a valid suite will run: its cells, sensitivity claims and step audits."""
    from privaudit.audit.sensitivity import select
    from privaudit.audit.suite.model import MAX_CELLS

    sens = suite.sensitivity
    claims = None if sens is None else len(select(None if sens.claims is None else list(sens.claims)))
    return {"name": suite.name, "cells": suite.n_cells, "size": suite.size_estimate(),
            "sensitivity_claims": claims,
            "step_audits": None if suite.step_audit is None else len(suite.step_audit.defenses),
            "needs_yes_large": suite.n_cells > MAX_CELLS}


def check(path: str, data_dir: str | None = None, allow_plugins: bool = False,
          machine_checks: bool = True) -> dict[str, Any]:
    """``{"suite", "valid", "error"}`` for one suite, with :func:`summary`'s fields when it is valid."""
    from privaudit.audit.suite.load import load_suite

    try:
        suite = load_suite(path, data_dir=data_dir, allow_plugins=allow_plugins, machine_checks=machine_checks)
    except ConfigError as exc:
        return {"suite": path, "valid": False, "error": str(exc)}
    return {"suite": path, "valid": True, "error": None, **summary(suite)}


def line(result: dict[str, Any]) -> str:
    if not result["valid"]:
        return f"privaudit: error: {result['error']}"
    parts = [result["size"]]
    if result["sensitivity_claims"]:
        parts.append(f"{result['sensitivity_claims']} sensitivity claims")
    if result["step_audits"]:
        parts.append(f"step audits of {result['step_audits']} defenses")
    note = "; privaudit run needs --yes-large" if result["needs_yes_large"] else ""
    return f"{result['suite']}: valid: {', '.join(parts)}{note}"


def run(args: argparse.Namespace) -> int:
    results = [check(path, args.data_dir, args.allow_plugins, not args.no_machine_checks) for path in args.suites]
    for result in results:
        if args.json:
            emit_json(result, one_line=True)
        else:
            print(line(result), file=sys.stdout if result["valid"] else sys.stderr)
    return 0 if all(r["valid"] for r in results) else 2
