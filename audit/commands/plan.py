"""``privaudit plan``: size an audit before training -- the candidates, guesses or runs a design needs to be able
to refute a claimed epsilon (see :mod:`privaudit.audit.user.plan`)."""

from __future__ import annotations

import argparse

from privaudit.audit.commands.common import add_output_args, emit_json, format_table, number

HELP = "size an audit before training: the candidates, guesses or runs a design needs to refute a claimed epsilon"


def register(sub: argparse._SubParsersAction) -> None:
    from privaudit.audit.user.claim import RELATIONS, UNITS

    p = sub.add_parser("plan", help=HELP, description=HELP + ". A design's ceiling is the largest lower bound it can "
                       "show (every guess right); below the claim it cannot refute it, whatever the model does.")
    p.add_argument("--claimed-epsilon", type=number(positive=True), default=None, metavar="E",
                   help="the epsilon to refute (with --opacus-state: default the state's epsilon)")
    p.add_argument("--delta", type=number(), required=True, metavar="D", help="the claim's delta")
    p.add_argument("--relation", default="add-remove", help=f"{', '.join(RELATIONS)} (default add-remove)")
    p.add_argument("--unit", default="example", help=f"{', '.join(UNITS)} (default example)")
    p.add_argument("--opacus-state", default=None, metavar="FILE",
                   help="an Opacus accountant's saved state_dict: also size the test against its mechanism")
    p.add_argument("--confidence", type=number(positive=True), default=0.95, help="confidence (default 0.95)")
    add_output_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from privaudit.audit.user.plan import plan
    from privaudit.audit.user.claim import claim_from_args
    from privaudit.core.errors import ConfigError

    if args.claimed_epsilon is None and args.opacus_state is None:
        raise ConfigError("--claimed-epsilon: required (or --opacus-state FILE)")
    if not 0 < args.confidence < 1:
        raise ConfigError(f"--confidence: must lie in (0, 1), got {args.confidence!r}")
    result = plan(claim_from_args(args.claimed_epsilon, args.delta, args.relation, args.unit, args.opacus_state),
                  confidence=args.confidence)
    if args.json:
        emit_json(result)
        return 0
    c = result["claim"]
    print(f"to refute epsilon {c['epsilon']:.4g} at delta {c['delta']:g} with {100 * args.confidence:g}% confidence:")
    rows = [[d["design"], "yes" if d["refutable"] else "no",
             d.get("candidates") or d.get("runs_per_side") or "-", d["ceiling"], d["note"]]
            for d in result["designs"]]
    print(format_table(["design", "can refute", "size (candidates or runs per side)", "ceiling", "what it takes"],
                       rows))
    return 0
