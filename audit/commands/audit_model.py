"""``privaudit audit-model``: audit a user's own PyTorch classifier by LOSS, LiRA and RMIA, and its training
function by a one-run canary audit (see :mod:`privaudit.audit.model_audit`)."""

from __future__ import annotations

import argparse

from privaudit.audit.commands.common import add_data_args, add_output_args, emit_json, format_table

HELP = ("audit your own PyTorch classifier (factory + weights) by LOSS, LiRA and RMIA on a membership split, and "
        "its training function by a canary audit")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit-model", help=HELP, description=HELP + ". The model must have been trained on the "
                       "members of privaudit's split of --dataset at --seed (privaudit.load_dataset(NAME, "
                       "seed=S, data_dir=DIR).train); --dataset imagefolder --data-dir DIR reads your own images "
                       "in torchvision's ImageFolder layout (DIR/<class>/<image>.png|jpg). --factory and --train-fn "
                       "are code privaudit imports and runs.")
    p.add_argument("--factory", required=True, metavar="MODULE:FUNCTION", help="builds the model (no arguments)")
    p.add_argument("--weights", required=True, metavar="FILE",
                   help="the trained state_dict: .safetensors, or .pt/.pth (torch.load weights_only=True)")
    add_data_args(p)
    p.add_argument("--train-fn", default=None, metavar="MODULE:FUNCTION",
                   help="trains the reference models and the canary run: train_fn(model, x, y, seed=...) "
                        "(default: an SGD loop, and no canary audit)")
    p.add_argument("--attacks", default=None,
                   help="comma-separated: loss, lira, rmia, canary (default: loss,lira,rmia, plus canary with "
                        "--train-fn)")
    p.add_argument("--reference-models", type=int, default=8,
                   help="LiRA's and RMIA's reference models, shared (even, >= 4)")
    p.add_argument("--canaries", type=int, default=None,
                   help="canaries of the one-run canary audit (default: min(200, the shadow split's size))")
    p.add_argument("--epochs", type=int, default=20, help="epochs of the default SGD loop")
    p.add_argument("--delta", type=float, default=None, help="delta of the lower bound (default 1/(n ln n))")
    p.add_argument("--out", default=None, help="write scores.npz and result.json per attack, and audit.json")
    add_output_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from privaudit.attacks.metrics import FPR_TARGETS, fpr_key
    from privaudit.audit.model_audit import audit_model

    attacks = None if args.attacks is None else [a.strip() for a in args.attacks.split(",") if a.strip()]
    results = audit_model(args.factory, args.weights, dataset=args.dataset, train_fn=args.train_fn, seed=args.seed,
                          data_dir=args.data_dir, attacks=attacks, reference_models=args.reference_models,
                          canaries=args.canaries, epochs=args.epochs, delta=args.delta, out=args.out,
                          progress=not args.json).attacks
    if args.json:
        emit_json(results)
        return 0
    headers = ["attack", "AUC", *[f"TPR@{100 * t:g}%FPR" for t in FPR_TARGETS], "eps_lb"]
    rows = [[name, s["auc"], *[s["tpr_at_fpr"][fpr_key(t)] for t in FPR_TARGETS], s["eps_lower_bound"]]
            for name, s in results.items()]
    print(format_table(headers, rows))
    for name, s in results.items():
        print(f"{name}: {s['eps_lb_method']}" + (f" (audits {s['audited']})" if "audited" in s else ""))
    return 0
