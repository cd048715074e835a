"""Render docs/benchmark.md from the committed reference of the Fashion-MNIST benchmark.

    python scripts/render_benchmark.py --measure RUN_DIR [--note TEXT] [--commit C]   # a run -> the reference, the page
    python scripts/render_benchmark.py                                   # the reference -> the page
    python scripts/render_benchmark.py --check                           # exit 1 when the page is stale
    python scripts/render_benchmark.py --leakage RUN_DIR                 # the leakage run -> its reference and scores
    python scripts/render_benchmark.py --whitebox RUN_DIR                # the white-box run -> its reference
    python scripts/render_benchmark.py --whitebox-update RUN_DIR         # a run of some of its cells (--only) -> theirs

The measurement (within 90 minutes on 2 cores; scripts/benchmark.sh installs the dataset when it can, runs the suite
under /usr/bin/time and measures it):

    privaudit run suites/benchmark-fashion-mnist.toml --out reports/benchmark-fashion-mnist --jobs 2
    python scripts/render_benchmark.py --measure reports/benchmark-fashion-mnist
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reports" / "reference" / "benchmark-fashion-mnist" / "benchmark.json"
LEAKAGE = ROOT / "reports" / "reference" / "benchmark-fashion-mnist-leakage" / "leakage.json"
WHITEBOX = ROOT / "reports" / "reference" / "benchmark-fashion-mnist-whitebox" / "whitebox.json"
#: DPCL's similarity reach on the white-box cells (scripts/similarity_reach.py), shown in the white-box section
REACH = WHITEBOX.parent / "similarity_reach.json"
PAGE = ROOT / "docs" / "benchmark.md"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rendered_page import save_reference, write_or_check  # noqa: E402  (scripts/, beside this file)


def main(argv: list[str] | None = None) -> int:
    from privaudit.audit.benchmark.page import render
    from privaudit.audit.benchmark.reference import measure
    from privaudit.core.errors import ConfigError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--measure", default=None, help="the benchmark run's output directory")
    parser.add_argument("--note", default=None, help="a line about the run the page prints (e.g. what else ran)")
    parser.add_argument("--commit", default=None, help="the commit the run was made at, where its report has none "
                        "(a run from an exported tree without .git)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is not the reference's render")
    parser.add_argument("--leakage", default=None, help="the leakage suite's run directory (its reference and the "
                        "attacks' scores)")
    parser.add_argument("--whitebox", default=None, help="the white-box suite's run directory")
    parser.add_argument("--whitebox-update", default=None, help="a run of some of the white-box suite's cells "
                        "(--only): its cells replace theirs in the white-box reference, each naming its commit")
    args = parser.parse_args(argv)
    try:
        measure_side(args.leakage, args.whitebox, args.commit)
        if args.whitebox_update:
            update_whitebox(args.whitebox_update, args.commit)
    except ConfigError as exc:
        print(f"render_benchmark: error: {exc}", file=sys.stderr)
        return 2
    if args.measure:
        try:
            result = measure(args.measure)
        except ConfigError as exc:
            print(f"render_benchmark: error: {exc}", file=sys.stderr)
            return 2
        if args.note:
            result["run"]["note"] = args.note
        if args.commit:
            if result.get("commit") not in (None, args.commit):
                print(f"render_benchmark: error: --commit {args.commit}: the run's report names {result['commit']}",
                      file=sys.stderr)
                return 2
            result["commit"] = args.commit
        save_reference(REFERENCE, result)
    side = [json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None for p in (LEAKAGE, WHITEBOX)]
    if side[1] is not None and REACH.is_file():
        side[1]["similarity_reach"] = json.loads(REACH.read_text(encoding="utf-8"))
    return write_or_check(PAGE, render(json.loads(REFERENCE.read_text(encoding="utf-8")), *side), args.check)


def measure_side(leakage: str | None, whitebox: str | None, commit: str | None) -> None:
    """The leakage and white-box runs into their references (the leakage run's scores beside its reference)."""
    from privaudit.audit.benchmark.leakage import export_scores, measure_leakage

    for run, path in ((leakage, LEAKAGE), (whitebox, WHITEBOX)):
        if not run:
            continue
        loaded: dict = {}  # each attack's result read once, for the reference and the scores' export
        result = measure_leakage(run, loaded)
        if commit:
            result["commit"] = commit
        save_reference(path, result)
        if path is LEAKAGE:
            for name, data in export_scores(run, loaded).items():
                (path.parent / "scores").mkdir(exist_ok=True)
                (path.parent / "scores" / name).write_bytes(data)


def update_whitebox(run: str, commit: str | None) -> None:
    """The cells of ``run`` (some of the white-box suite's, re-measured) into the white-box reference."""
    from privaudit.audit.benchmark.leakage import measure_leakage, merge_cells

    update = measure_leakage(run)
    if commit:
        update["commit"] = commit
    save_reference(WHITEBOX, merge_cells(json.loads(WHITEBOX.read_text(encoding="utf-8")), update))


if __name__ == "__main__":
    sys.exit(main())
