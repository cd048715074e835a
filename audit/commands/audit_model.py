"""``privaudit audit-model``: audit your own PyTorch classifier on your own members and non-members, and its
training recipe by canary runs, against your claim (see :mod:`privaudit.audit.user.model.model_audit`)."""

from __future__ import annotations

import argparse

from privaudit.audit.commands.common import (SEED, add_claim_args, add_junit_arg, add_output_args, claim_of,
                                             emit_json, format_table, integer, junit_target, number, refuted_status,
                                             show_required, write_junit_cases)

from privaudit.audit.user.model.final_model import DEFAULT_CANARY_RUNS, DESIGNS

HELP = ("audit your own PyTorch classifier on your own members and non-members (LOSS, LiRA, RMIA) and its "
        "training function by canary runs: a verdict on your claim and the design's ceiling")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit-model", help=HELP, description=HELP[0].upper() + HELP[1:] + ". --members/--nonmembers: "
                       ".npz with x and y, a "
                       "CSV of features with a label column, or an ImageFolder directory. --factory and --train-fn are "
                       "code privaudit imports and runs. Exit status 1 when the claim is refuted.")
    p.add_argument("--factory", required=True, metavar="MODULE:FUNCTION", help="builds the model (no arguments)")
    p.add_argument("--weights", required=True, metavar="FILE",
                   help="the trained state_dict: .safetensors, or .pt/.pth (torch.load weights_only=True)")
    sides = [p.add_argument("--members", default=None, metavar="PATH", help="the examples the model was trained on "
                            "(required)"),
             p.add_argument("--nonmembers", default=None, metavar="PATH", help="examples it was not trained on "
                            "(required)")]
    p.add_argument("--population", default=None, metavar="PATH",
                   help="other examples from the same distribution (for LiRA's and RMIA's reference models)")
    p.add_argument("--train-fn", default=None, metavar="MODULE:FUNCTION",
                   help="your training function, train_fn(model, x, y, seed=...), training in place: trains the "
                        "reference models and the canary runs (default: an SGD loop, and no canary runs)")
    p.add_argument("--attacks", default=None,
                   help="comma-separated: loss, lira, rmia, canary (default: loss; lira,rmia with --population; "
                        "canary with --train-fn)")
    p.add_argument("--reference-models", type=integer(4, 4096), default=8,
                   help="LiRA's and RMIA's reference models, shared (even, >= 4)")
    p.add_argument("--canary-runs", type=integer(4, 100_000), default=DEFAULT_CANARY_RUNS,
                   help="runs of --train-fn with the canary and as many without (privaudit plan sizes them)")
    p.add_argument("--canary-design", choices=DESIGNS, default="crafted",
                   help="crafted: the final-model audit (worst-case initialisation, a crafted canary, D = the first "
                        "--canary-pair-size members); quiet-coordinate: D = every member, the factory's "
                        "initialisation")
    p.add_argument("--canary-pair-size", type=integer(1, 10_000_000), default=32,
                   help="crafted design: how many of the members form D (the canary makes D')")
    p.add_argument("--canary-scale", type=number(positive=True), default=10.0,
                   help="crafted design: the factor on the pretrained initial parameters (1: pretrained only)")
    p.add_argument("--epochs", type=integer(1, 1_000_000), default=20, help="epochs of the default SGD loop")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the reference models and canary runs")
    add_claim_args(p)
    p.add_argument("--out", default=None, help="write report.html, report.md, report.json, plots and each attack's "
                   "scores here")
    add_output_args(p)
    add_junit_arg(p)
    show_required(p, sides)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from privaudit.attacks.metrics import FPR_TARGETS, fpr_key
    from privaudit.audit.user.model.model_audit import audit_model

    attacks = None if args.attacks is None else [a.strip() for a in args.attacks.split(",") if a.strip()]
    junit = junit_target(args)
    a = audit_model(args.factory, args.weights, members=args.members, nonmembers=args.nonmembers,
                    population=args.population, train_fn=args.train_fn, claim=claim_of(args), attacks=attacks,
                    reference_models=args.reference_models, canary_runs=args.canary_runs,
                    canary_design=args.canary_design, canary_pair_size=args.canary_pair_size,
                    canary_scale=args.canary_scale, epochs=args.epochs,
                    beta=1 - args.confidence, seed=args.seed, out=args.out, force=args.force,
                    progress=not args.json)
    if junit is not None:
        from privaudit.audit.user.junit import model_cases

        write_junit_cases(junit, "privaudit audit-model", model_cases(a))
    if args.json:
        emit_json(a.to_dict())
        return refuted_status(a.verdict)
    headers = ["attack", "AUC", "advantage", *[f"TPR@{100 * t:g}%FPR" for t in FPR_TARGETS], "eps_lb", "ceiling"]
    rows = [[name, s["auc"], s["advantage"], *[s["tpr_at_fpr"][fpr_key(t)] for t in FPR_TARGETS],
             s["eps_lower_bound"], s["ceiling"]] for name, s in a.attacks.items()]
    print(format_table(headers, rows))
    for name, s in a.attacks.items():
        print(f"{name}: {s['eps_lb_method']}; ceiling: {s['ceiling_design']}")
        if "eps_lb_mechanism" in s:
            print(f"{name} vs the claim's mechanism: epsilon >= {s['eps_lb_mechanism']:.4g} (ceiling "
                  f"{s['mechanism_ceiling']:.4g})")
    if a.verdict is not None:
        print(f"verdict ({a.verdict_attack}): {a.verdict.statement}")
    if args.out:
        print(f"report: {args.out}/report.html")
    return refuted_status(a.verdict)
