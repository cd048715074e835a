"""Measure DPCL's similarity reach on the white-box suite's DPCL-SimCLR cells (audit/benchmark/similarity_reach.py).

    python scripts/similarity_reach.py                  # every dpcl-simclr cell -> the reference (minutes on 2 cores)
    python scripts/similarity_reach.py --batches 4 --out /tmp/reach.json

The reference, reports/reference/benchmark-fashion-mnist-whitebox/similarity_reach.json, is read by
scripts/render_benchmark.py into the benchmark page's white-box section.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "suites" / "benchmark-fashion-mnist-whitebox.toml"
REFERENCE = ROOT / "reports" / "reference" / "benchmark-fashion-mnist-whitebox" / "similarity_reach.json"


def main(argv: list[str] | None = None) -> int:
    from privaudit.audit.benchmark.similarity_reach import DEFENSE, measure_cell
    from privaudit.audit.suite.load import load_suite
    from privaudit.core.errors import ConfigError
    from privaudit.core.io import atomic_write_json
    from privaudit.core.version import __version__

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default=str(SUITE))
    p.add_argument("--batches", type=int, default=64, help="batches drawn per model (default 64)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=str(REFERENCE))
    args = p.parse_args(argv)
    try:
        if args.batches < 1:
            raise ConfigError(f"--batches: must be at least 1, got {args.batches}")
        suite = load_suite(args.suite, data_dir=args.data_dir)
        cells = [c for c in suite.cells() if c.defense.name == DEFENSE]
        if not cells:
            raise ConfigError(f"--suite: {args.suite} has no {DEFENSE} cell")
        rows = []
        for cell in cells:
            print(f"{cell.id}: training, then {args.batches} batches per model", file=sys.stderr)
            rows.append(measure_cell(cell, args.batches))
    except ConfigError as exc:
        print(f"similarity_reach: {exc}", file=sys.stderr)
        return 2
    atomic_write_json(args.out, {"suite": Path(args.suite).name, "version": __version__, "commit": _commit(),
                                 "cells": rows})
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _commit() -> str | None:
    """The checkout's commit (None outside a git checkout)."""
    import subprocess

    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or None if done.returncode == 0 else None


if __name__ == "__main__":
    sys.exit(main())
