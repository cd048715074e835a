"""Runs that keep to their output directory: safe labels, only our own temporary files removed, one run per
directory, cell ids unique by construction, numbers that are finite before anything runs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from privaudit.audit.cli import main
from privaudit.audit.run.lock import LOCK_NAME, output_lock
from privaudit.audit.run.cache import clean_temporaries
from privaudit.core.errors import ConfigError
from privaudit.core.io import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]

BASE = """
name = "bad"
allow_plugins = true
epsilons = [1.0]
[[defenses]]
name = "leaky_defense:NoisyKernelSum"
label = "kernel"
params = { dim = 64 }
[[attacks]]
name = "loss"
"""


# The bad-value probes (labels, near-equal epsilons, non-finite numbers, seeds, threads) are cases of
# tests/test_bad_input.py, with every other kind of bad input.


def test_only_privaudit_temporaries_are_removed(tmp_path):
    out = tmp_path / "out"
    (out / "cells" / "c").mkdir(parents=True)
    user_files = [out / ".notes.tmp", out / "cells" / "c" / ".draft.1234.tmp", out / "keep.json"]
    for f in user_files:
        f.write_text("user data")
    ours = out / "cells" / "c" / ".cell.json.privaudit-tmp-abc123.tmp"
    ours.write_text("{")
    assert clean_temporaries(out) == 1
    assert not ours.exists() and all(f.read_text() == "user data" for f in user_files)


def test_atomic_writes_leave_no_temporary_and_use_our_marker(tmp_path, monkeypatch):
    seen = []
    real_replace = __import__("os").replace

    def spy(src, dst):
        seen.append(Path(src).name)
        return real_replace(src, dst)

    monkeypatch.setattr("privaudit.core.io.os.replace", spy)
    atomic_write_json(tmp_path / "report.json", {"a": 1})
    assert seen and seen[0].startswith(".report.json.privaudit-tmp-") and seen[0].endswith(".tmp")
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_second_run_on_the_same_directory_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
         "from privaudit.audit.run.lock import output_lock\n"
         f"with output_lock(Path({str(out)!r})):\n    print('locked', flush=True)\n    time.sleep(30)\n"],
        cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        path = tmp_path / "suite.toml"
        path.write_text(BASE.replace('name = "bad"', f'name = "ok"\nout = "{out}"'))
        code = main(["run", str(path)])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1
        assert f"is in use by another privaudit run (pid {holder.pid})" in err
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing else written
    finally:
        holder.kill()
        holder.wait()
    with output_lock(out):  # the kernel released the killed holder's lock
        with pytest.raises(ConfigError, match="in use by another privaudit run"):
            with output_lock(out):
                pass
