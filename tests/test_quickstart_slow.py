"""The README's main job end to end (slow: two quickstart runs): the quickstart suite passes its gate; killed
with SIGKILL mid-way and resumed, it gives the same report.json, byte for byte. Its time is printed, not
asserted (a wall-clock limit fails on a loaded machine and passes on a fast one; the closing notes give it,
measured alone); the timeouts only guard against a hang.

Run with ``pytest -m slow tests/test_quickstart_slow.py -s``.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from privaudit.core.io import read_json
from privaudit.audit.report import TOP_LEVEL

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
HANG = 3 * 3600  # seconds: a run this long is stuck, whatever the machine


def privaudit(*args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "privaudit", "run", "suites/quickstart.toml", "--quiet", *args],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, **kwargs)


def test_quickstart_passes_its_gate_and_resumes_after_sigkill_to_the_same_bytes(tmp_path):
    start = time.perf_counter()
    full = privaudit("--out", str(tmp_path / "full"))
    assert full.wait(timeout=HANG) == 0
    print(f"\nquickstart: {time.perf_counter() - start:.0f}s")
    report = read_json(tmp_path / "full" / "report.json")
    assert list(report)[:len(TOP_LEVEL)] == list(TOP_LEVEL) and report["gate"]["status"] == "pass"
    from privaudit.audit.report.summary import verdict

    verdicts = {c["id"]: verdict(c) for c in report["cells"]}
    assert not [cid for cid, v in verdicts.items() if v.startswith("not comparable")]  # every DP cell is checked
    assert all("(" in v for v in verdicts.values() if v.startswith("pass"))  # ... at a named relation and unit

    out = tmp_path / "killed"
    proc = privaudit("--out", str(out))
    try:
        while proc.poll() is None and len(list(out.glob("cells/*/cell.json"))) < 4:
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finished = {p: p.stat().st_mtime_ns for p in out.glob("cells/*/cell.json")}
    assert len(finished) >= 4 and not (out / "report.json").exists()
    resumed = privaudit("--out", str(out), "--resume")
    assert resumed.wait(timeout=HANG) == 0
    assert all(p.stat().st_mtime_ns == t for p, t in finished.items())  # finished cells were not redone
    assert (out / "report.json").read_bytes() == (tmp_path / "full" / "report.json").read_bytes()
