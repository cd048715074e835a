"""The progress estimate's error at given fractions of a run, from its CI log.

    privaudit run quickstart > run.log; python scripts/eta_error.py run.log --total SECONDS

Each progress line reads ``[privaudit +ELAPSEDs] ...; about LEFTs left`` (:mod:`privaudit.audit.run.progress`).
``--total`` is the run's wall-clock seconds (the log's lines stop before the report is written). For each fraction
(default 10%, 50%, 90%) the first line at or after that fraction of the run gives the estimate; the truth is
``total - elapsed`` and the error ``(estimate - truth) / truth``, printed one fraction a line.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

LINE = re.compile(r"^\[privaudit \+(\d+)s\] .*?about (\d+)s left")


def estimates(text: str) -> list[tuple[float, float]]:
    """(elapsed, estimated seconds left) of every progress line that has an estimate."""
    return [(float(m.group(1)), float(m.group(2))) for m in map(LINE.match, text.splitlines()) if m]


def errors(points: list[tuple[float, float]], total: float, fractions: tuple[float, ...]) -> list[tuple]:
    """(fraction, elapsed, estimate, truth, relative error) at the first line at or after each fraction."""
    rows = []
    for f in fractions:
        at = next(((e, left) for e, left in points if e >= f * total), None)
        if at is not None:
            truth = total - at[0]
            rows.append((f, at[0], at[1], truth, (at[1] - truth) / truth if truth > 0 else float("nan")))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("log", help="the run's stdout (its progress lines)")
    parser.add_argument("--total", type=float, required=True, help="the run's wall-clock seconds")
    parser.add_argument("--at", default="0.1,0.5,0.9", help="fractions of the run (default 0.1,0.5,0.9)")
    args = parser.parse_args(argv)
    rows = errors(estimates(Path(args.log).read_text()), args.total, tuple(float(x) for x in args.at.split(",")))
    for f, elapsed, estimate, truth, error in rows:
        print(f"{100 * f:.0f}%: +{elapsed:.0f}s, estimate {estimate:.0f}s, truth {truth:.0f}s, "
              f"error {100 * error:+.1f}%")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
