"""Utility of every DP contrastive defense at several epsilons, through the CLI (``privaudit train --json``).

    python scripts/dp_table.py [--dataset digits] [--epsilons 1 10] [--seed 0] [--device cpu]
                               [--defenses dpsgd dp-clip ...] [--out table.md]

Prints a Markdown table of k-NN and linear-probe accuracy (methods x epsilon) with the non-private
and random-init encoders as references, the RDP epsilon of each claim, and the wall time of each run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

DP_DEFENSES = ("dpsgd", "dp-clip", "dpcl-simclr", "dpcl-barlow", "dp-gcl", "logit-dp")


def train(defense: str, args: argparse.Namespace, epsilon: float | None) -> dict:
    cmd = [sys.executable, "-m", "audit", "train", "--defense", defense, "--dataset", args.dataset,
           "--seed", str(args.seed), "--device", args.device, "--json", "--no-save"]
    if epsilon is not None:
        cmd += ["--target-epsilon", str(epsilon)]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    report = json.loads(out.stdout)
    report["wall_seconds"] = time.perf_counter() - start
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits")
    p.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 10.0])
    p.add_argument("--defenses", nargs="+", default=list(DP_DEFENSES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=None, help="also write the Markdown table here")
    args = p.parse_args()

    reference = train("nonprivate", args, None)
    lines = ["| defense | target eps | eps (rdp) | k-NN | linear probe | train s |", "|---|---|---|---|---|---|"]
    rand = reference["random_init"]
    lines.append(f"| random init | - | - | {rand['knn_accuracy']:.3f} | {rand['linear_probe_accuracy']:.3f} | - |")
    util = reference["utility"]
    lines.append(f"| nonprivate | inf | inf | {util['knn_accuracy']:.3f} | {util['linear_probe_accuracy']:.3f} | "
                 f"{reference['train_seconds']:.1f} |")
    print("\n".join(lines), flush=True)
    for defense in args.defenses:
        for eps in args.epsilons:
            r = train(defense, args, eps)
            e = r["epsilon"]["rdp"]["epsilon"]
            u = r["utility"]
            line = (f"| {defense} | {eps:g} | {e:.3g} | {u['knn_accuracy']:.3f} | {u['linear_probe_accuracy']:.3f} | "
                    f"{r['train_seconds']:.1f} |")
            lines.append(line)
            print(line, flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
