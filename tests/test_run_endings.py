"""Runs that end cleanly: SIGTERM or SIGKILL of ``privaudit run`` leaves no process of the run alive and nothing
in --out changes after it died, and --resume then completes; workers die with their run, hold its lock and write
nothing once it is gone; a full disk anywhere (the runner's writes, the report, a cache write in the run or in a
worker) is one line and exit status 2 with no file replaced; a malformed report.json is one line for gate and
report alike."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from privaudit.audit.cli import main
from privaudit.audit.run.lock import output_lock
from privaudit.audit.run.workers import worker_pool
from privaudit.core.io import read_json
from test_resume_integrity import IDS, THREE, comparable
from worker_probes import lock_seen_by_worker

ROOT = Path(__file__).resolve().parents[1]
LINUX = sys.platform.startswith("linux") and Path("/proc/self/environ").exists()

MARK = "PRIVAUDIT_TEST_RUN"


def write_suite(directory: Path) -> tuple[Path, Path]:
    """The three-cell suite of tests/test_resume_integrity.py with the test double that writes into OUT/cache after
    a pause; (suite, marker)."""
    marker = directory / "training"
    path = directory / "late.toml"
    path.write_text(THREE.replace("leaky_defense:Pausing", "leaky_defense:LateWriter").format(pause=0, marker=marker))
    return path, marker


def processes_of(mark: str) -> list[int]:
    """Live (not zombie) processes whose environment carries ``MARK=mark``: a run's main process and everything
    it started (workers, the resource tracker), whoever their parent is now."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"{MARK}={mark}".encode() not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # it ended while we looked
            continue
        if state != "Z":
            found.append(int(entry.name))
    return found


def snapshot(out: Path) -> dict[str, tuple[int, int]]:
    """Every entry under ``out``: (size, mtime in ns) by relative path."""
    return {str(p.relative_to(out)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in sorted(out.rglob("*"))}


def _env(mark: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), MARK: mark, **extra}


def _workers_training(marker: Path) -> set[int]:
    return {int(line) for line in marker.read_text().split()} if marker.exists() else set()


def kill_run(path: Path, marker: Path, out: Path, sig: int) -> tuple[str, dict, set[int]]:
    """Start ``privaudit run --jobs 2`` of the suite ``path`` into ``out``, send ``sig`` to its main process while
    both workers train, and wait for that process to end. Returns (the run's mark, its exit code and stderr, the
    worker pids). Its stderr goes to a file: a pipe would wait for every process holding it, survivors included."""
    marker.unlink(missing_ok=True)
    mark, stderr = uuid.uuid4().hex, out.parent / f"{out.name}.stderr"
    with open(stderr, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "privaudit", "run", str(path), "--out", str(out), "--quiet",
                                 "--jobs", "2"], cwd=ROOT, env=_env(mark, LATE_WRITER_PAUSE="5"),
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.time() + 300
        while len(_workers_training(marker)) < 2 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert len(_workers_training(marker)) >= 2, stderr.read_text() if proc.poll() is not None else "no start"
        proc.send_signal(sig)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return mark, {"code": code, "stderr": stderr.read_text()}, _workers_training(marker)


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def check_clean_end(path: Path, marker: Path, out: Path, sig: int, wait: float) -> None:
    """Kill the run with ``sig`` and check how it ended; then, ``wait`` seconds after its main process died (and
    at least until no process of the run is left, at most 10 s), that none is left and --out is unchanged since;
    then that --resume completes it."""
    mark, ended, workers = kill_run(path, marker, out, sig)
    died, at_death = time.time(), snapshot(out)
    if sig == signal.SIGTERM:
        assert ended["code"] == 128 + signal.SIGTERM, ended["stderr"]
        assert ended["stderr"].count("\n") == 1 and ended["stderr"].startswith("privaudit: terminated by SIGTERM")
        assert not [p for p in workers if _alive(p)], "a worker outlived the main process's SIGTERM handling"
    else:
        assert ended["code"] == -signal.SIGKILL
    while processes_of(mark) and time.time() < died + 10:
        time.sleep(0.05)
    time.sleep(max(0.0, died + wait - time.time()))
    assert processes_of(mark) == [], "processes of the killed run are still alive"
    assert snapshot(out) == at_death, "--out changed after the run's main process died"
    _resume(path, out)


def _resume(path: Path, out: Path) -> None:
    from privaudit.audit.run.runner import run_suite
    from privaudit.audit.suite.load import load_suite

    result = run_suite(load_suite(path), out=out, resume=True, progress=False, jobs=1)
    assert result.exit_code == 0 and sorted(result.ran + result.reused) == sorted(IDS)
    assert [c["id"] for c in read_json(out / "report.json")["cells"]] == IDS


@pytest.mark.skipif(not LINUX, reason="finds the run's processes through /proc")
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, marks=pytest.mark.slow), signal.SIGKILL],
                         ids=["SIGTERM", "SIGKILL"])  # SIGTERM's graceful path (14 s) in the slow run
def test_a_killed_run_leaves_no_process_and_no_late_write_and_resumes(tmp_path, sig):
    """The workers train (and would write into OUT/cache 5 s later) when the main process gets the signal."""
    check_clean_end(*write_suite(tmp_path), tmp_path / "out", sig, wait=0.5)


@pytest.mark.slow  # ~1 min: two killed runs watched for the full 10 s, and an uninterrupted run to compare with
@pytest.mark.skipif(not LINUX, reason="finds the run's processes through /proc")
def test_ten_seconds_after_sigterm_or_sigkill_nothing_is_left_and_resume_equals_a_whole_run(tmp_path):
    from privaudit.audit.run.runner import run_suite
    from privaudit.audit.suite.load import load_suite

    path, marker = write_suite(tmp_path)
    assert run_suite(load_suite(path), out=tmp_path / "whole", progress=False, jobs=1).exit_code == 0
    expected = comparable(read_json(tmp_path / "whole" / "report.json"))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        out = tmp_path / sig.name
        check_clean_end(path, marker, out, sig, wait=10.0)
        assert comparable(read_json(out / "report.json")) == expected, sig.name


def test_sigterm_raises_terminated_while_a_command_runs_and_an_ignored_hangup_stays_ignored():
    from privaudit.audit.cli import _terminate_on_signals
    from privaudit.core.errors import Terminated

    before = signal.getsignal(signal.SIGTERM)
    hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with pytest.raises(Terminated) as caught, _terminate_on_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)  # ignored
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        assert caught.value.exit_code == 143 and "terminated by SIGTERM" in str(caught.value)
        assert signal.getsignal(signal.SIGTERM) is before and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, hangup)


# -- the workers ---------------------------------------------------------------------------------------------------
def test_workers_hold_the_runs_lock(tmp_path):
    """A worker shares the lock's open file: the directory stays locked until the last worker is gone. (The task
    lives in tests/worker_probes.py: unpickling it in the spawned worker imports no torch.)"""
    import fcntl

    with output_lock(tmp_path) as lock, worker_pool(1, lock.fd) as pool:
        assert pool.submit(lock_seen_by_worker, str(lock.path)).result(timeout=120) == (True, True)
        other = os.open(lock.path, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)


def test_stopping_the_pool_on_an_exception_reaps_the_workers_at_once():
    """An exception inside the pool's block (SIGTERM's, a full disk's) terminates the workers of the running tasks
    instead of waiting for them: the block ends within seconds and no worker is left."""
    from privaudit.core.errors import Terminated

    start = time.perf_counter()
    with pytest.raises(Terminated):
        with worker_pool(2) as pool:
            futures = [pool.submit(time.sleep, 600) for _ in range(2)]
            pids = list(pool._processes)
            time.sleep(1)
            raise Terminated(signal.SIGTERM)
    assert time.perf_counter() - start < 60 and all(f.done() for f in futures) and len(pids) == 2
    assert not [p for p in pids if _alive(p)]


ORPHAN = """
import os, sys, time
from pathlib import Path
from privaudit.core.io import atomic_write_bytes, guard_writes
guard_writes(-1)  # a run whose main process is not (any longer) this process's parent
atomic_write_bytes(Path(sys.argv[1]) / "late.bin", b"too late")
print("wrote")
"""


def test_an_orphaned_worker_writes_nothing(tmp_path):
    done = subprocess.run([sys.executable, "-c", ORPHAN, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""}, timeout=120)
    assert done.returncode == 143 and done.stdout == "", done.stderr
    assert list(tmp_path.iterdir()) == []


CHILD = """
import os, sys, threading, time
from privaudit.audit.run.workers import _watch_parent, die_with_parent
if sys.argv[1] == "signal":
    die_with_parent(os.getppid(), interval=3600)  # the kernel's parent-death signal alone (the watcher sleeps)
else:
    threading.Thread(target=_watch_parent, args=(os.getppid(), 0.05), daemon=True).start()  # the watcher alone
print("ready", flush=True)
time.sleep(120)
"""
PARENT = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "ready"
print(child.pid, flush=True)
"""


@pytest.mark.skipif(not LINUX, reason="looks the child up in /proc")
@pytest.mark.parametrize("how", ["signal", "watcher"])
def test_a_worker_ends_when_its_run_dies(how):
    parent = subprocess.run([sys.executable, "-c", PARENT, CHILD, how], cwd=ROOT, capture_output=True, text=True,
                            env={"PYTHONPATH": str(ROOT), "PATH": ""}, timeout=120)
    assert parent.returncode == 0, parent.stderr
    child = int(parent.stdout.split()[0])
    deadline = time.time() + 5
    while _alive(child) and time.time() < deadline:
        time.sleep(0.02)
    assert not _alive(child), f"the {how} did not end the orphaned child"


# -- a full disk ---------------------------------------------------------------------------------------------------
def _full_disk_at(monkeypatch, fragment: str) -> list[str]:
    """Make fsync fail with ENOSPC for the temporary file of any target whose name contains ``fragment``."""
    import privaudit.core.io

    real, hits = os.fsync, []

    def fsync(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if fragment in Path(name).name:
            hits.append(name)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(privaudit.core.io.os, "fsync", fsync)
    return hits


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The suite run once with --jobs 1 (no pause): (suite path, output directory)."""
    from privaudit.audit.run.runner import run_suite
    from privaudit.audit.suite.load import load_suite

    directory = tmp_path_factory.mktemp("finished")
    path, _ = write_suite(directory)
    assert run_suite(load_suite(path), out=directory / "out", progress=False, jobs=1).exit_code == 0
    return path, directory / "out"


def _contents(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


@pytest.mark.skipif(not LINUX, reason="names the fsynced file through /proc/self/fd")
@pytest.mark.parametrize("where, fragment, jobs", [
    ("a cell's record", ".cell.json.", 1),
    ("the report", ".report.json.", 1),
    ("a cache write in the run", ".late-2.bin.", 1),
    ("a cache write in a worker", None, 2),
], ids=["persist", "report", "cache", "cache-in-worker"])
def test_a_full_disk_is_one_line_and_replaces_no_file(finished, tmp_path, capsys, monkeypatch, where, fragment, jobs):
    """--resume with two cells to recompute (their directories and cache files deleted) on a disk that fills at
    ``where``: one line, exit status 2, every file that was there is as it was, no temporary file left."""
    path, reference = finished
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    for eps in (2, 4):
        shutil.rmtree(next(p for p in (out / "cells").iterdir() if f"eps={eps}" in p.name))
        (out / "cache" / "pretrained" / f"late-{eps}.bin").unlink()
    before = _contents(out)
    hits = _full_disk_at(monkeypatch, fragment) if fragment else None
    if fragment is None:  # the worker process fills its disk itself (the test double reads this)
        monkeypatch.setenv("LATE_WRITER_FULL_DISK", "1")
    code = main(["run", str(path), "--out", str(out), "--resume", "--quiet", "--jobs", str(jobs)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("privaudit: error: "), err
    assert "No space left on device" in err and "file was replaced" in err, err
    assert hits is None or hits, "the simulated full disk was never reached"
    after = _contents(out)
    assert {k: v for k, v in after.items() if k in before} == before, f"{where}: a file was replaced"
    assert not list(out.rglob("*privaudit-tmp*")), f"{where}: a temporary file was left"


# -- malformed report.json -----------------------------------------------------------------------------------------
def _valid_report(finished) -> dict:
    return read_json(finished[1] / "report.json")


MALFORMED = {
    "gate is empty": (lambda r: {**r, "gate": {}}, "gate.status: missing (expected 'pass' or 'fail')"),
    "only a gate": (lambda r: {"gate": {}}, "suite: missing (expected an object)"),
    "status not pass/fail": (lambda r: {**r, "gate": {**r["gate"], "status": "PASSED"}},
                             "gate.status: expected 'pass' or 'fail', got 'PASSED'"),
    "status a number": (lambda r: {**r, "gate": {**r["gate"], "status": 1}}, "gate.status: expected 'pass' or 'fail'"),
    "cells not a list": (lambda r: {**r, "cells": {"a": 1}}, "cells: expected a list of objects, got an object"),
    "cell id a number": (lambda r: {**r, "cells": [{**r["cells"][0], "id": 3}]}, "cells[0].id: expected a string"),
    "bound a string": (lambda r: {**r, "cells": [{**r["cells"][0], "gate": {"comparisons": [
        {"attack": "loss", "verdict": "exceeds", "gate_eps_lower_bound": "2"}]}}]},
        "cells[0].gate.comparisons[0].gate_eps_lower_bound: expected a finite number or null, got '2'"),
    "score path escapes": (lambda r: {**r, "cells": [{**r["cells"][0], "attacks": {"loss": {"scores": "../x.npz"}}}]},
                           "cells[0].attacks.loss.scores: expected a path inside the run's directory"),
    "a list": (lambda r: [r], "the top level: expected an object, got a list"),
}
RAW = {
    "status NaN": (lambda text: text.replace('"status": "pass"', '"status": NaN', 1), "NaN is not JSON"),
    "Infinity": (lambda text: text.replace('"auc": ', '"auc": Infinity, "x": ', 1), "Infinity is not JSON"),
    "200,000-deep array": (lambda text: "[" * 200_000 + "]" * 200_000, "nested more than 64 levels deep"),
    "100-deep object": (lambda text: '{"a": ' * 100 + "1" + "}" * 100, "nested more than 64 levels deep"),
    "invalid UTF-8": (lambda text: text.replace('"version"', '"vers\udcffion"', 1), "UnicodeDecodeError"),
    "truncated": (lambda text: text[: len(text) // 2], "not a readable report (JSONDecodeError"),
    "empty": (lambda text: "", "not a readable report (JSONDecodeError"),
}


def _check_both_commands(directory: Path, capsys, fragment: str) -> None:
    before = snapshot(directory)
    for command in ("gate", "report"):
        code = main([command, str(directory)])
        captured = capsys.readouterr()
        assert code == 2 and captured.err.count("\n") == 1, (command, captured.err)
        assert captured.err.startswith("privaudit: error: ") and fragment in captured.err, (command, captured.err)
        assert "rerun privaudit run --resume" in captured.err
    assert snapshot(directory) == before, "a file was written"


@pytest.mark.parametrize("edit, fragment", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_report_of_the_wrong_shape_is_one_line_for_gate_and_report(finished, tmp_path, capsys, edit, fragment):
    (tmp_path / "report.json").write_text(json.dumps(edit(_valid_report(finished))))
    _check_both_commands(tmp_path, capsys, fragment)


@pytest.mark.parametrize("edit, fragment", list(RAW.values()), ids=list(RAW))
def test_a_report_that_is_not_strict_json_is_one_line_for_gate_and_report(finished, tmp_path, capsys, edit, fragment):
    text = edit((finished[1] / "report.json").read_text())
    (tmp_path / "report.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    _check_both_commands(tmp_path, capsys, fragment)


def test_a_huge_report_is_refused_unread(tmp_path, capsys, monkeypatch):
    from privaudit.audit.report import schema

    with open(tmp_path / "report.json", "wb") as handle:  # sparse: no disk used
        handle.truncate(schema.MAX_REPORT_BYTES + 1)
    reads = []
    monkeypatch.setattr(schema, "open", lambda *a, **k: reads.append(a) or open(*a, **k), raising=False)
    _check_both_commands(tmp_path, capsys, f"more than the {schema.MAX_REPORT_BYTES} bytes a report may have")
    assert reads == []


def test_the_schema_requires_every_top_level_field_of_the_report():
    from privaudit.audit.report import TOP_LEVEL
    from privaudit.audit.report.schema import REPORT

    assert tuple(REPORT.required) == TOP_LEVEL


def test_a_whole_report_loads_and_the_gate_reads_it(finished, capsys):
    from privaudit.audit.report.schema import load_report

    assert load_report(finished[1]) == _valid_report(finished)
    assert main(["gate", str(finished[1])]) == 0
    assert "gate: PASS" in capsys.readouterr().out


def test_lock_waits_for_the_workers_of_a_dead_run_but_not_for_a_live_one(tmp_path):
    import fcntl
    import threading

    from privaudit.audit.run.lock import LOCK_NAME, output_lock
    from privaudit.core.errors import ConfigError

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = os.open(tmp_path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)  # a worker still holding the lock
    fcntl.flock(holder, fcntl.LOCK_EX)
    os.pwrite(holder, dead.stdout.strip().encode(), 0)
    threading.Timer(0.5, os.close, args=(holder,)).start()  # the worker exits half a second later
    with output_lock(tmp_path) as held:
        assert os.pread(held.fd, 32, 0).decode() == str(os.getpid())
    holder = os.open(tmp_path / LOCK_NAME, os.O_RDWR, 0o644)
    fcntl.flock(holder, fcntl.LOCK_EX)
    os.pwrite(holder, str(os.getpid()).encode(), 0)  # a live owner: refused at once, naming it
    try:
        with pytest.raises(ConfigError, match=f"in use by another privaudit run \\(pid {os.getpid()}\\)"):
            with output_lock(tmp_path):
                pass
    finally:
        os.close(holder)
