"""Render the documentation's results page from a committed quickstart report.

    python scripts/render_results.py                  # reports/quickstart/report.json -> docs/results.md + figures
    python scripts/render_results.py --check          # exit 1 when docs/results.md is not what the report gives

Every number in the documentation comes from this page. After a change that moves the numbers, rerun the
quickstart into its default directory (``privaudit run quickstart`` writes ``reports/quickstart/``), then this
script, and commit ``reports/quickstart/report.json`` with ``docs/results.md`` and ``docs/results-*.png``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without PYTHONPATH: the privaudit package maps its folders
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    from privaudit.audit.report.results import render
    from privaudit.core.io import read_json

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--report", default="reports/quickstart/report.json", help="the report (repository path)")
    parser.add_argument("--out", default="docs", help="where the page and its figures go (repository path)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the page differs")
    args = parser.parse_args(argv)
    report_file = ROOT / args.report
    report_bytes = report_file.read_bytes()
    text, figures = render(read_json(report_file), report_bytes, args.report)
    page = ROOT / args.out / "results.md"
    if args.check:
        same = page.is_file() and page.read_text(encoding="utf-8") == text
        print(f"{page.relative_to(ROOT)}: {'up to date' if same else 'differs from ' + args.report}")
        return 0 if same else 1
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text, encoding="utf-8")
    for name, png in figures.items():
        (page.parent / name).write_bytes(png)
    print(f"wrote {page.relative_to(ROOT)} and {', '.join(figures)} from {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
