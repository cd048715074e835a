"""Render the documentation's results page from the committed reference quickstart report.

    python scripts/render_results.py     # reports/reference/quickstart/report.json -> docs/results.md + figures
    python scripts/render_results.py --check          # exit 1 when docs/results.md is not what the report gives

Every number in the documentation comes from this page. A user's ``privaudit run quickstart`` writes
``reports/quickstart/``, which git ignores; the reference run lives under its own path. After a change that moves
the numbers, two commands from the repository's root:

    privaudit run suites/quickstart.toml --out reports/reference/quickstart    # only its report.json is tracked
    python scripts/render_results.py

then ``pytest tests/test_docs.py`` checks the page against the report, and you commit
``reports/reference/quickstart/report.json`` with ``docs/results.md`` and ``docs/results-*.png``. The report is read
through the one checked reader (:func:`privaudit.audit.report.schema.load_report`); its gate is shown as the run
judged it (the run's evidence, which ``privaudit gate`` recomputes it from, is not committed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The committed reference run (repository path); only its report.json is tracked.
REFERENCE = "reports/reference/quickstart"
if str(ROOT) not in sys.path:  # run from a checkout without PYTHONPATH: the privaudit package maps its folders
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    from privaudit.audit.report.results import render
    from privaudit.audit.report.schema import load_report
    from privaudit.core.errors import ConfigError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--run", default=REFERENCE,
                        help="the run's output directory, holding report.json (repository path)")
    parser.add_argument("--out", default="docs", help="where the page and its figures go (repository path)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the page differs")
    args = parser.parse_args(argv)
    report_path = f"{args.run.rstrip('/')}/report.json"
    try:
        report = load_report(ROOT / args.run)
    except ConfigError as exc:
        print(f"render_results: error: {exc}", file=sys.stderr)
        return 2
    text, figures = render(report, (ROOT / report_path).read_bytes(), report_path)
    page = ROOT / args.out / "results.md"
    if args.check:
        same = page.is_file() and page.read_text(encoding="utf-8") == text
        print(f"{page.relative_to(ROOT)}: {'up to date' if same else 'differs from ' + report_path}")
        return 0 if same else 1
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text, encoding="utf-8")
    for name, png in figures.items():
        (page.parent / name).write_bytes(png)
    print(f"wrote {page.relative_to(ROOT)} and {', '.join(figures)} from {report_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
