"""Utility of every DP contrastive defense at several epsilons, through the CLI (``privaudit train --json``).

    python scripts/dp_table.py [--dataset digits] [--epsilons 1 10] [--seeds 0 1 2] [--device cpu]
                               [--defenses dpsgd dp-clip dpcl-simclr+sensitivity=sound ...] [--out table.md]

Prints a Markdown table of k-NN and linear-probe accuracy (methods x epsilon) with the non-private
and random-init encoders as references, the RDP epsilon of each claim and the training time. With
several seeds (each seed fixes the data split, membership, initialisation and noise) the cells are
mean +- standard deviation over seeds. A defense written ``name+key=value+...`` passes those
hyper-parameters with ``--param``. ``snr`` is the first step's gradient signal-to-noise ratio
(DP-GCL Sec. 5.2).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

DP_DEFENSES = ("dpsgd", "dp-clip", "dpcl-simclr", "dpcl-barlow", "dp-gcl", "logit-dp")


def train(defense: str, args: argparse.Namespace, seed: int, epsilon: float | None) -> dict:
    name, *params = defense.split("+")
    cmd = [sys.executable, "-m", "audit", "train", "--defense", name, "--dataset", args.dataset,
           "--seed", str(seed), "--device", args.device, "--json", "--no-save"]
    for param in params:
        cmd += ["--param", param]
    if epsilon is not None:
        cmd += ["--target-epsilon", str(epsilon)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def cell(values: list[float], digits: int = 3) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} +- {statistics.stdev(values):.{digits}f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits")
    p.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 10.0])
    p.add_argument("--defenses", nargs="+", default=list(DP_DEFENSES))
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=None, help="also write the Markdown table here")
    args = p.parse_args()

    rows: dict[tuple[str, str], dict[str, list[float]]] = {}

    def add(key: tuple[str, str], **values: float) -> None:
        for name, value in values.items():
            rows.setdefault(key, {}).setdefault(name, []).append(value)

    for seed in args.seeds:
        ref = train("nonprivate", args, seed, None)
        add(("random init", "-"), knn=ref["random_init"]["knn_accuracy"], lin=ref["random_init"]["linear_probe_accuracy"])
        add(("nonprivate", "inf"), knn=ref["utility"]["knn_accuracy"], lin=ref["utility"]["linear_probe_accuracy"],
            sec=ref["train_seconds"])
        for defense in args.defenses:
            for eps in args.epsilons:
                r = train(defense, args, seed, eps)
                add((defense, f"{eps:g}"), eps=r["epsilon"]["rdp"]["epsilon"], knn=r["utility"]["knn_accuracy"],
                    lin=r["utility"]["linear_probe_accuracy"], sec=r["train_seconds"], snr=r["dp"]["grad_snr_first"])
                print(f"seed {seed} {defense} eps {eps:g}: knn {r['utility']['knn_accuracy']:.3f} "
                      f"linear {r['utility']['linear_probe_accuracy']:.3f} ({r['train_seconds']:.1f}s)",
                      file=sys.stderr, flush=True)

    lines = [f"seeds: {', '.join(map(str, args.seeds))}", "",
             "| defense | target eps | eps (rdp) | k-NN | linear probe | snr | train s |",
             "|---|---|---|---|---|---|---|"]
    for (name, eps), v in rows.items():
        lines.append(f"| {name} | {eps} | {cell(v['eps'], 2) if 'eps' in v else eps} | {cell(v['knn'])} | "
                     f"{cell(v['lin'])} | {cell(v['snr'], 4) if 'snr' in v else '-'} | "
                     f"{cell(v['sec'], 1) if 'sec' in v else '-'} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
