"""``privaudit audit-training``: audit an unmodified Opacus training function white-box in one run, its neighbours
replayed (see :mod:`privaudit.audit.user.training.training_audit`)."""

from __future__ import annotations

import argparse

from privaudit.audit.commands.common import (PROBABILITY, SEED, add_junit_arg, add_output_args, emit_json, integer,
                                             junit_target, number, refuted_status, write_junit_cases)

HELP = ("audit your Opacus training function white-box in one run (every release observed, gradient canaries in its "
        "optimizer step, neighbouring dataset sizes replayed): a verdict on its accountant's claim, each check named")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit-training", help=HELP, description=HELP[0].upper() + HELP[1:] + ". --factory and "
                       "--train-fn are code privaudit imports and runs. Exit status 1 when the claim is refuted.")
    p.add_argument("--factory", required=True, metavar="MODULE:FUNCTION", help="builds the model (no arguments)")
    p.add_argument("--train-fn", required=True, metavar="MODULE:FUNCTION",
                   help="train(model, x, y, *, seed): trains in place with Opacus, returns its accountant (or nothing)")
    p.add_argument("--members", required=True, metavar="PATH",
                   help="the examples it trains on: .npz with x and y, a CSV with a label column, or an ImageFolder")
    p.add_argument("--nonmembers", default=None, metavar="PATH", help="examples it does not train on (checked "
                   "distinct from --members; recorded)")
    p.add_argument("--delta", required=True, type=number(**PROBABILITY), metavar="D",
                   help="the claim's delta")
    p.add_argument("--claimed-epsilon", type=number(positive=True), default=None, metavar="E",
                   help="the epsilon you claim (default: the accountant's, by privaudit's accountant of its kind)")
    p.add_argument("--size-radius", type=integer(1, 1000), default=4,
                   help="dataset sizes replayed on each side of the members' count (default 4)")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the runs and the canaries")
    p.add_argument("--confidence", type=number(**PROBABILITY), default=0.95,
                   help="confidence of the bounds and the verdict (default 0.95)")
    p.add_argument("--force", action="store_true",
                   help="overwrite files in --out that privaudit did not write (or that changed since)")
    p.add_argument("--out", default=None, help="write report.html, report.md, report.json, trace.json and plots here")
    add_output_args(p)
    add_junit_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from privaudit.audit.user.junit import training_cases
    from privaudit.audit.user.training.training_audit import audit_training

    junit = junit_target(args)
    a = audit_training(args.factory, args.train_fn, members=args.members, nonmembers=args.nonmembers,
                       delta=args.delta, claimed_epsilon=args.claimed_epsilon, beta=1 - args.confidence,
                       seed=args.seed, size_radius=args.size_radius, out=args.out, force=args.force,
                       progress=not args.json)
    write_junit_cases(junit, "privaudit audit-training", training_cases(a))
    if args.json:
        emit_json(a.to_dict())
        return refuted_status(a.verdict)
    for f in a.folded:  # one line per check (report.json keeps every step's finding)
        print(f"{f['check']}: {f['message']}")
    c = a.canary
    if c["eps_lb_trajectory"] is not None:
        print(f"trajectory bound: epsilon >= {c['eps_lb_trajectory']:.4g} ({c['ratio_to_claim']:.3g} of the claim "
              f"{a.claim.epsilon:.4g}; ceiling {c['ceiling']:.4g}) from {c['canaries']} canaries over {c['steps']} "
              "releases")
    print(f"verdict: {a.verdict.statement}")
    if args.out:
        print(f"report: {args.out}/report.html")
    return refuted_status(a.verdict)
