"""``privaudit audit-model``: audit a user's own PyTorch classifier by LOSS and LiRA (see :mod:`audit.model_audit`)."""

from __future__ import annotations

import argparse

from audit.commands.common import add_data_args, add_output_args, emit_json, format_table

HELP = "audit your own PyTorch classifier (factory + weights) by LOSS and LiRA on a membership split"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit-model", help=HELP, description=HELP + ". The model must have been trained on the "
                       "members of privaudit's split of --dataset at --seed (privaudit.load_dataset(NAME, "
                       "seed=S).train). --factory and --train-fn are code privaudit imports and runs.")
    p.add_argument("--factory", required=True, metavar="MODULE:FUNCTION", help="builds the model (no arguments)")
    p.add_argument("--weights", required=True, metavar="FILE",
                   help="the trained state_dict: .safetensors, or .pt/.pth (torch.load weights_only=True)")
    add_data_args(p)
    p.add_argument("--train-fn", default=None, metavar="MODULE:FUNCTION",
                   help="trains LiRA's reference models: train_fn(model, x, y, seed=...) (default: an SGD loop)")
    p.add_argument("--attacks", default="loss,lira", help="comma-separated: loss, lira (default: both)")
    p.add_argument("--reference-models", type=int, default=8, help="LiRA's reference models (even, >= 4)")
    p.add_argument("--epochs", type=int, default=20, help="epochs of the default SGD loop")
    p.add_argument("--delta", type=float, default=None, help="delta of the lower bound (default 1/(n ln n))")
    p.add_argument("--out", default=None, help="write scores.npz and result.json per attack, and audit.json")
    add_output_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attacks.metrics import FPR_TARGETS, fpr_key
    from audit.model_audit import audit_model

    results = audit_model(args.factory, args.weights, dataset=args.dataset, train_fn=args.train_fn, seed=args.seed,
                          data_dir=args.data_dir, attacks=[a.strip() for a in args.attacks.split(",") if a.strip()],
                          reference_models=args.reference_models, epochs=args.epochs, delta=args.delta,
                          out=args.out, progress=not args.json)
    if args.json:
        emit_json(results)
        return 0
    headers = ["attack", "AUC", *[f"TPR@{100 * t:g}%FPR" for t in FPR_TARGETS], "eps_lb"]
    rows = [[name, s["auc"], *[s["tpr_at_fpr"][fpr_key(t)] for t in FPR_TARGETS], s["eps_lower_bound"]]
            for name, s in results.items()]
    print(format_table(headers, rows))
    for name, s in results.items():
        print(f"{name}: {s['eps_lb_method']}")
    return 0
