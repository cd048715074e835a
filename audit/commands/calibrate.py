"""``privaudit calibrate``: the smallest noise multiplier meeting a target epsilon, per accountant."""

from __future__ import annotations

import argparse

from privaudit.accountants.calibrate import calibrate
from privaudit.accountants.registry import epsilon
from privaudit.audit.commands.common import emit_json, format_table, number
from privaudit.audit.commands.mechanism import (accountant_options, add_mechanism_args, describe_details,
                                                each_accountant, template, validate)
from privaudit.core.errors import ConfigError, check_positive


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="smallest noise multiplier meeting a target epsilon, per accountant")
    p.add_argument("--target-epsilon", type=number(positive=True), required=True, metavar="E", help="target epsilon")
    add_mechanism_args(p, noise=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    validate(args)
    check_positive("--target-epsilon", args.target_epsilon)
    build = template(args)
    claim = build(1.0)
    values: dict[str, float | None] = {}
    notes: dict[str, str] = {"claim": f"{claim.mechanism} at noise multiplier 1 ({claim.relation}, "
                                      f"delta={claim.delta:g}, target epsilon {args.target_epsilon:g})"}
    for note in claim.notes:
        notes["composition"] = note
    for name in each_accountant(args, "calibrate"):
        options = accountant_options(name, args)
        probe = epsilon(claim, name, **options)
        if probe.epsilon is None:
            values[name], notes[name] = None, probe.reason if probe.failed else f"not applicable: {probe.reason}"
            continue
        try:
            z = calibrate(build, args.target_epsilon, name, **options)
        except ConfigError as exc:
            values[name], notes[name] = None, str(exc)
            continue
        values[name] = z
        notes[name] = describe_details(name, epsilon(build(z), name, **options).details)
    if args.json:
        emit_json({**values, "notes": notes})
        return 0
    print(f"mechanism: {notes['claim']}")
    if "composition" in notes:
        print(f"note: {notes['composition']}")
    print(format_table(["accountant", "noise multiplier", "notes"],
                       [[name, values[name], notes[name]] for name in values]))
    return 0
