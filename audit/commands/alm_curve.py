"""``privaudit alm-curve``: the ALM paper's privacy–utility table (Sec. 6.1, Fig. 1) on one dataset.

Runs the ``alm`` defense once (SimCLR pretraining on the public split, head fine-tuning on the
members, sampled sensitivity) and prints, for each epsilon, the noise scale and the utility loss
(Def. 6.1, mean over noise draws) of the logistic, Laplace and Gaussian mechanisms, with the
sampled L1 / L2 sensitivities and m.
"""

from __future__ import annotations

import argparse
import time

from privaudit.audit.commands.common import (PROBABILITY, add_data_args, add_output_args, emit_json, format_table,
                                             integer, number, parse_params)
from privaudit.core.datasets import load_dataset
from privaudit.audit.device import DEVICES, resolve_device
from privaudit.core.errors import ConfigError
from privaudit.defenses import Budget, make_defense


def _epsilons(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"--epsilons: expected comma-separated numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise ConfigError(f"--epsilons: every epsilon must be > 0, got {text!r}")
    return values


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("alm-curve", help="privacy-utility table of the ALM's logistic, Laplace and Gaussian noise")
    add_data_args(p)
    p.add_argument("--epsilons", default="0.5,1,2,5,10", help="comma-separated epsilons (default 0.5,1,2,5,10)")
    p.add_argument("--delta", type=number(**PROBABILITY), default=1e-5,
                   help="delta of the Gaussian mechanism (default 1e-5, the paper's)")
    p.add_argument("--draws", type=integer(1, 10 ** 6), default=20, help="noise draws per cell (default 20)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="any hyper-parameter of the alm defense")
    p.add_argument("--device", default="auto", help=f"one of: {', '.join(DEVICES)}")
    add_output_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    params = parse_params(args.param)
    params["curve_epsilons"] = list(_epsilons(args.epsilons))
    params["curve_draws"] = args.draws
    defense = make_defense("alm", params)
    budget = Budget(delta=args.delta)  # no release noise: the table is computed for every mechanism
    device = resolve_device(args.device)
    data = load_dataset(args.dataset, seed=args.seed, data_dir=args.data_dir)
    start = time.perf_counter()
    trained = defense.fit(data, budget, args.seed, device=device, progress=not args.json)
    seconds = time.perf_counter() - start
    curve, sens = trained.extras["curve"], trained.extras["sensitivity"]
    if args.json:
        emit_json({"dataset": args.dataset, "seed": args.seed, "n_members": len(data.train), "seconds": seconds,
                   "sensitivity": sens, "curve": curve, "head": trained.extras["head"],
                   "timings": trained.extras["seconds"]})
        return 0

    l1, l2 = sens["l1"], sens["l2"]
    sampler = ("ALM Algorithm 2: max over remove-one pairs" if l1["method"] == "max"
               else f"Rubinstein-Alda: order statistic k={l1['k']}, gamma={l1['gamma']:.3g}")
    print(f"ALM on {args.dataset}: {len(data.train)} members, head accuracy without noise "
          f"{curve['rows'][0]['accuracy_clean']:.4f}, {seconds:.1f}s")
    print(f"sampled sensitivity ({sampler}, m={l1['m']}): L1 = {l1['value']:.4g}, L2 = {l2['value']:.4g}")
    if sens.get("exhaustive"):
        ex = sens["exhaustive"]
        print(f"exact maximum over all remove-one pairs of the members: L1 = {ex['l1']:.4g}, L2 = {ex['l2']:.4g}")
    print(f"utility loss 1 - acc(noisy)/acc(clean) (Def. 6.1), mean +- std over {curve['draws']} noise draws; "
          f"Gaussian delta = {curve['delta']:.3g}; gaussian-classical: the paper's sigma, its claim the epsilon that "
          f"noise gives (epsilon_claimed in --json); * = no release (outside the snapping theorem's condition)")
    mechanisms = list(dict.fromkeys(r["mechanism"] for r in curve["rows"]))
    by = {(r["mechanism"], r["epsilon"]): r for r in curve["rows"]}
    epsilons = list(dict.fromkeys(r["epsilon"] for r in curve["rows"]))
    headers = ["epsilon"] + [f"{m} (scale: loss)" for m in mechanisms]
    rows = []
    for eps in epsilons:
        row = [eps]
        for m in mechanisms:
            r = by[(m, eps)]
            flag = "" if r["valid"] else "*"
            row.append(f"{r['scale']:.3g}: {r['utility_loss_mean']:.3f}+-{r['utility_loss_std']:.3f}{flag}")
        rows.append(row)
    print(format_table(headers, rows))
    return 0
