"""``--jobs N``: cells in parallel processes give the report ``--jobs 1`` gives."""

from __future__ import annotations

import json

from privaudit.audit.runner import run_suite
from privaudit.audit.suite import load_suite


def _numbers(out):
    report = json.loads((out / "report.json").read_text())
    for key in ("created", "git_commit"):
        report.pop(key, None)
    report["suite"].pop("out", None)
    return report


def test_two_jobs_give_the_same_report(tiny_suite, tmp_path):
    suite = load_suite(tiny_suite)
    one = run_suite(suite, out=tmp_path / "one", progress=False, jobs=1)
    two = run_suite(suite, out=tmp_path / "two", progress=False, jobs=2)
    assert one.exit_code == two.exit_code and sorted(one.ran) == sorted(two.ran)
    assert _numbers(tmp_path / "one") == _numbers(tmp_path / "two")
    timings = json.loads((tmp_path / "two" / "timings.json").read_text())
    assert timings["jobs"] == 2
