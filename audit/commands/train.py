"""``privaudit train``: train one defense, report utility next to a random-init encoder, and the claim."""

from __future__ import annotations

import argparse
import time
from typing import Any

from privaudit.accountants import all_epsilons
from privaudit.audit.commands.common import (add_budget_args, add_data_args, add_output_args, budget_from_args,
                                             check_plugins, emit_json, format_table, parse_params)
from privaudit.core.datasets import load_dataset
from privaudit.audit.device import DEVICES, resolve_device
from privaudit.core.errors import ConfigError
from privaudit.core.io import check_output_dir
from privaudit.defenses import DEFENSES, make_defense
from privaudit.defenses.evaluation.utility import utility_panel


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a defense and report its utility and privacy claim")
    p.add_argument("--defense", default="nonprivate", help=f"one of: {', '.join(DEFENSES)}")
    add_data_args(p)
    p.add_argument("--loss", default=None, help="contrastive objective: simclr, infonce, barlow, spreadout")
    p.add_argument("--encoder", default=None, help="encoder: mlp, cnn, resnet18")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--param", action="append", metavar="KEY=VALUE",
                   help="any other hyper-parameter of the defense (repeatable)")
    p.add_argument("--allow-plugins", action="store_true",
                   help="allow a --param that names code to import (user-model's factory, train_fn: runs it)")
    add_budget_args(p)
    p.add_argument("--knn-k", type=int, default=5, help="k of the k-NN evaluation (default 5)")
    p.add_argument("--device", default="auto", help=f"one of: {', '.join(DEVICES)}")
    p.add_argument("--out", default=None, help="checkpoint directory (default checkpoints/<defense>-<dataset>-s<seed>)")
    p.add_argument("--no-save", action="store_true", help="do not write a checkpoint")
    add_output_args(p)
    p.set_defaults(func=run)


def _quiet(fn, *args):
    """Call ``fn`` with dp-accounting's convergence warnings (absl) silenced."""
    import logging

    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return fn(*args)
    finally:
        logger.setLevel(level)


def run(args: argparse.Namespace) -> int:
    params = parse_params(args.param)
    check_plugins(args.defense, params, args.allow_plugins)
    for flag in ("loss", "encoder", "epochs", "batch_size", "lr"):
        value = getattr(args, flag)
        if value is not None:
            params[flag] = value
    if args.knn_k <= 0:
        raise ConfigError(f"--knn-k: must be > 0, got {args.knn_k}")
    defense = make_defense(args.defense, params)
    budget = budget_from_args(args, defense)
    device = resolve_device(args.device)
    out = None
    if not args.no_save:  # before training: a bad --out loses no work
        out = check_output_dir(args.out if args.out is not None
                               else f"checkpoints/{args.defense}-{args.dataset}-s{args.seed}")
    data = load_dataset(args.dataset, seed=args.seed, data_dir=args.data_dir)
    if args.knn_k > len(data.train):  # more neighbours than members: k-NN accuracy would be the majority share
        raise ConfigError(f"--knn-k: must be at most the training set's size ({len(data.train)} members of "
                          f"{args.dataset} at seed {args.seed}), got {args.knn_k}")

    start = time.perf_counter()
    trained = defense.fit(data, budget, args.seed, device=device, progress=not args.json)
    seconds = time.perf_counter() - start

    panel = utility_panel(trained, data, k=args.knn_k, device=device)
    utility = dict(panel["trained"])
    utility.update(trained.extras.get("utility", {}))
    random_init = panel["random"]
    epsilons = {name: r.to_dict() for name, r in _quiet(all_epsilons, trained.claim).items()}

    checkpoint = None
    if out is not None:
        checkpoint = str(trained.save(out))

    if args.json:
        emit_json({"defense": args.defense, "dataset": args.dataset, "seed": args.seed, "device": str(device),
                   "n_members": len(data.train), "steps": len(trained.history.get("step", [])),
                   "train_seconds": seconds, "utility": utility, "random_init": random_init,
                   "init": trained.extras.get("init"), "utility_panel": panel,
                   "claim": trained.claim.to_dict(), "epsilon": epsilons, "checkpoint": checkpoint,
                   "dp": {k: v for k, v in trained.extras.get("dp", {}).items()
                          if k not in ("param_names", "param_numels")} or None})
        return 0

    steps = len(trained.history.get("step", []))
    print(f"{args.defense} on {args.dataset}: {len(data.train)} members, {steps} steps in {seconds:.1f}s "
          f"on {device}")
    _print_utility(trained, panel, utility, random_init)
    _print_claim(trained, epsilons)
    if checkpoint:
        print(f"saved: {checkpoint}")
    return 0


def _print_utility(trained: Any, panel: dict[str, Any], utility: dict[str, Any], random_init: dict[str, Any]) -> None:
    """The utility panel's table (random init, init, non-private with the same steps, trained), the gap closed
    and the trained-versus-init test."""
    metrics = [k for k in utility if k in random_init] + [k for k in utility if k not in random_init]
    print(format_table(["encoder", *metrics],
                       [[name, *[panel[key].get(k) for k in metrics]] for name, key in
                        (("random init", "random"), (f"init ({(trained.extras.get('init') or {}).get('init', 'random')})", "init"),
                         ("non-private, same steps", "nonprivate"), ("trained", "trained")) if key in panel]))
    if panel.get("gap_closed"):
        print("random -> non-private gap closed: " + ", ".join(
            f"{k} {v:.2f}" if v is not None else f"{k} n/a" for k, v in panel["gap_closed"].items()))
    print("trained vs init (exact McNemar, one-sided p of a drop): " + ", ".join(
        f"{k} {c['gained'] - c['lost']:+d}/{c['n']} (p {c['p_drop']:.2g})" for k, c in panel["vs_init"].items()))


def _print_claim(trained: Any, epsilons: dict[str, dict[str, Any]]) -> None:
    """The claim, each accountant's epsilon, the noise the DP engine added and the claim's notes."""
    print(f"claim: {trained.claim.mechanism} ({trained.claim.relation}, per {trained.claim.unit}, "
          f"delta={trained.claim.delta:.3g})")
    for name, r in epsilons.items():
        if r["infinite"]:
            print(f"  epsilon[{name}] = inf" + (f" ({r['reason']})" if r["reason"] else ""))
        elif r["epsilon"] is None:
            print(f"  epsilon[{name}]: not applicable: {r['reason']}")
        else:
            print(f"  epsilon[{name}] = {r['epsilon']:.4g}")
    dp = trained.extras.get("dp")
    if dp:
        zs = ", ".join(f"{k} {v:.4g}" for k, v in dp["noise_multipliers"].items())
        snr = dp.get("grad_snr_first")
        frac = dp.get("mean_clipped_fraction")
        print(f"noise multipliers: {zs}; unit: {dp['unit']} (clip {dp['unit_clip']:.4g}); "
              f"first-step gradient SNR {snr:.3g}; mean clipped fraction "
              + ("-" if frac is None else f"{frac:.3f}"))
    for note in trained.claim.notes:
        print(f"  note: {note}")
