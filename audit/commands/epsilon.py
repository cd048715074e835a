"""``privaudit epsilon``: epsilon of a sampled Gaussian training run under every applicable accountant."""

from __future__ import annotations

import argparse
import math

from privaudit.accountants.last_iterate import NAME, last_iterate_epsilon
from privaudit.accountants.registry import epsilon
from privaudit.audit.commands.common import emit_json, format_table
from privaudit.audit.commands.mechanism import (accountant_options, add_mechanism_args, describe_details,
                                                each_accountant, json_number, template, validate)
from privaudit.core.errors import check_positive


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("epsilon", help="epsilon of a sampled Gaussian mechanism under each accountant")
    add_mechanism_args(p, noise=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    validate(args)
    check_positive("--noise-multiplier", args.noise_multiplier)
    claim = template(args)(args.noise_multiplier)
    results = {name: epsilon(claim, name, **accountant_options(name, args))
               for name in each_accountant(args, "epsilon")}
    notes: dict[str, str] = {"claim": f"{claim.mechanism} ({claim.relation}, delta={claim.delta:g})"}
    for note in claim.notes:
        notes["composition"] = note
    # The last-iterate heuristic beside the accountants (not one of them: a prediction for final-model audits)
    last = last_iterate_epsilon(claim) if args.accountant == "all" else None
    if last is not None:
        notes[NAME] = (f"not applicable: {last.reason}" if last.epsilon is None else
                       "heuristic, not a bound: the final model's epsilon for linear losses (Steinke et al. 2025)")
    for name, r in results.items():
        if r.epsilon is None:
            notes[name] = r.reason if r.failed else f"not applicable: {r.reason}"
        elif math.isinf(r.epsilon):
            notes[name] = "infinite"
        else:
            notes[name] = describe_details(name, r.details)
    if args.json:
        brackets = {name: [json_number(r.details["epsilon_lower"]), json_number(r.details["epsilon_upper"])]
                    for name, r in results.items() if r.details and "epsilon_lower" in r.details}
        extra = {} if last is None else {NAME: json_number(last.epsilon)}
        emit_json({**{name: json_number(r.epsilon) for name, r in results.items()}, **extra, "brackets": brackets,
                   "notes": notes})
        return 0
    print(f"mechanism: {notes['claim']}")
    if "composition" in notes:
        print(f"note: {notes['composition']}")
    print(format_table(["accountant", "epsilon", "notes"],
                       [[name, r.epsilon, notes[name]] for name, r in results.items()]))
    if last is not None:
        print(f"{NAME}: {'n/a' if last.epsilon is None else format(last.epsilon, '.4g')} ({notes[NAME]})")
    return 0
