"""``--jobs N``: cells in parallel processes give the report ``--jobs 1`` gives."""

from __future__ import annotations

import json
import re

import pytest

from privaudit.audit.run.runner import run_suite
from privaudit.audit.suite.load import load_suite


@pytest.mark.slow  # 19 s: the default run runs cells in worker processes in test_run_endings.py (the lock, a full disk, SIGKILL)
def test_two_jobs_give_the_same_report(tiny_suite, tmp_path, capsys, monkeypatch):
    """Byte for byte: the report holds no wall-clock time, and the workers' numbers are the in-process ones. The
    workers report each cell's stages: the progress lines of a CI log name them."""
    monkeypatch.setattr("privaudit.audit.run.heartbeat.INTERVAL", 0.25)
    suite = load_suite(tiny_suite)
    one = run_suite(suite, out=tmp_path / "one", progress=False, jobs=1)
    two = run_suite(suite, out=tmp_path / "two", progress=True, jobs=2)
    assert one.exit_code == two.exit_code and sorted(one.ran) == sorted(two.ran)
    assert (tmp_path / "one" / "report.json").read_bytes() == (tmp_path / "two" / "report.json").read_bytes()
    # the evidence too (run.json holds the SHA-256 of every cell.json, which holds those of the scores)
    assert (tmp_path / "one" / "run.json").read_bytes() == (tmp_path / "two" / "run.json").read_bytes()
    timings = json.loads((tmp_path / "two" / "timings.json").read_text())
    assert timings["jobs"] == 2 and timings["created"].endswith("Z")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[privaudit +")]
    assert any(re.search(r"running digits/[^:]+: (train|utility|epsilon|loss|lira) \(\d+s\)", line) for line in lines)
    assert any(re.search(r"\d/3 cells done; .*; about \d+s left$", line) for line in lines)
