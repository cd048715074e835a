"""What --resume and the report writer may trust: every cached artifact is checked (schema, digest, the sha256 of
each file it references) and an edited or torn one is recomputed with one line; --only merges; the report files
are replaced all-or-nothing; no write leaves --out and no file the tool did not create is removed; two runs on
one directory: the second is refused; SIGKILL at three points then --resume gives the uninterrupted report."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from privaudit.audit.cli import main
from privaudit.audit.run.cache import CACHE_SCHEMA
from privaudit.audit.run.runner import run_suite
from privaudit.audit.suite.load import load_suite
from privaudit.core.io import read_json

ROOT = Path(__file__).resolve().parents[1]

THREE = """
name = "three"
allow_plugins = true
epsilons = [1.0, 2.0, 4.0]

[[defenses]]
name = "leaky_defense:Pausing"
label = "kernel"
params = {{ leak_factor = 1.0, dim = 256, pause_seconds = {pause}, marker = "{marker}" }}

[[attacks]]
name = "loss"
"""
IDS = ["digits/kernel/eps=1/seed=0", "digits/kernel/eps=2/seed=0", "digits/kernel/eps=4/seed=0"]


def comparable(report: dict) -> dict:
    """A report without what differs between runs of one suite: the checkout's commit (a commit made while the
    tests run) and the --only patterns."""
    out = {k: v for k, v in report.items() if k != "git_commit"}
    out["suite"] = {k: v for k, v in report["suite"].items() if k != "only"}
    return out


def write_suite(directory: Path, pause: float = 0.0, marker: str = "") -> Path:
    path = directory / "three.toml"
    path.write_text(THREE.format(pause=pause, marker=marker))
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The three-cell suite run once, uninterrupted: (suite path, output directory)."""
    directory = tmp_path_factory.mktemp("three")
    path = write_suite(directory)
    out = directory / "out"
    result = run_suite(load_suite(path), out=out, progress=False)
    assert result.exit_code == 0 and result.ran == IDS
    return path, out


@pytest.fixture
def copy(reference, tmp_path):
    path, out = reference
    target = tmp_path / "out"
    shutil.copytree(out, target)
    return path, target


def cell_json(out: Path, cell_id: str) -> Path:
    slug = cell_id.replace("/", "__")
    (match,) = [p for p in out.glob("cells/*/cell.json") if p.parent.name.startswith(slug + "-")]
    return match


def edit_lower_bound(path: Path) -> None:
    saved = read_json(path)
    saved["record"]["attacks"]["loss"]["eps_lower_bound"] = 99.0
    path.write_text(json.dumps(saved))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def scores(out: Path, cell_id: str) -> Path:
    return cell_json(out, cell_id).parent / "attacks" / "loss" / "scores.npz"


TAMPERING = {
    "edited lower bound": (lambda out: edit_lower_bound(cell_json(out, IDS[1])),
                           "cell.json was edited or is corrupt (digest mismatch)"),
    "truncated cell.json": (lambda out: truncate(cell_json(out, IDS[1])), "cell.json does not parse"),
    "truncated scores.npz": (lambda out: truncate(scores(out, IDS[1])),
                             "attacks/loss/scores.npz was changed or is corrupt (sha256 mismatch)"),
    "corrupt scores.npz": (lambda out: scores(out, IDS[1]).write_bytes(b"\0" * 64),
                           "attacks/loss/scores.npz was changed or is corrupt"),
    "edited result.json": (lambda out: (scores(out, IDS[1]).with_name("result.json")).write_text("{}"),
                           "attacks/loss/result.json was changed or is corrupt"),
    "missing scores.npz": (lambda out: scores(out, IDS[1]).unlink(), "attacks/loss/scores.npz is missing"),
    "older schema": (lambda out: cell_json(out, IDS[1]).write_text(json.dumps(
        {**read_json(cell_json(out, IDS[1])), "schema": CACHE_SCHEMA - 1})), f"schema {CACHE_SCHEMA - 1}"),
}


@pytest.mark.parametrize("tamper, reason", list(TAMPERING.values()), ids=list(TAMPERING))
def test_a_tampered_cache_is_recomputed_with_one_line(copy, reference, capsys, tamper, reason):
    path, out = copy
    tamper(out)
    capsys.readouterr()
    resumed = run_suite(load_suite(path), out=out, resume=True, progress=False)
    err = capsys.readouterr().err
    assert resumed.ran == [IDS[1]] and resumed.reused == [IDS[0], IDS[2]]
    lines = [line for line in err.splitlines() if "resume:" in line]
    assert len(lines) == 1 and lines[0].startswith(f"privaudit: resume: {IDS[1]}: ") and reason in lines[0], err
    assert lines[0].endswith("; recomputing")
    assert comparable(read_json(out / "report.json")) == comparable(read_json(reference[1] / "report.json"))
    assert read_json(out / "report.json")["cells"][1]["attacks"]["loss"]["eps_lower_bound"] != 99.0


def test_report_on_a_corrupt_score_file_renders_the_failed_gate(copy, capsys):
    """``privaudit report`` renders the gate recomputed from the evidence (docs/gate.md): a corrupt score file is
    evidence that cannot be trusted, so the pages say FAIL and name it (the cell is left out of them, its scores
    unread); report.json is left as it is."""
    _, out = copy
    scores(out, IDS[0]).write_bytes(b"not a zip")
    before = (out / "report.json").read_bytes()
    assert main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "**Gate: FAIL**" in md and f"cell {IDS[0]}: its evidence cannot be trusted" in md
    assert "attacks/loss/scores.npz was changed or is corrupt (sha256 mismatch)" in md
    assert (out / "report.json").read_bytes() == before


@pytest.mark.parametrize("resume", [True, False])
def test_only_merges_the_other_cells_into_the_report(copy, reference, resume):
    path, out = copy
    result = run_suite(load_suite(path), out=out, resume=resume, only=["*/eps=2/*"], progress=False)
    report = read_json(out / "report.json")
    assert [c["id"] for c in report["cells"]] == IDS
    assert report["suite"]["only"] == ["*/eps=2/*"]
    assert result.ran == ([] if resume else [IDS[1]])
    assert comparable(report) == comparable(read_json(reference[1] / "report.json"))
    md = (out / "report.md").read_text()
    assert all(f"| kernel | {e} |" in md for e in (1, 2, 4)), md


def test_a_failing_write_replaces_no_report_file(copy, monkeypatch, capsys):
    """A full disk while the report is written: one line, and report.json/md/html and the plots stay as they were
    (no torn or mismatched file, no temporary left)."""
    _, out = copy
    before = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    calls = []
    real_fsync = os.fsync

    def full_disk(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr("privaudit.core.io.os.fsync", full_disk)
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out: cannot write the report" in err and "No space left on device" in err
    assert "no report file was replaced" in err and len(calls) == 3
    after = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before


def test_garbled_report_json_then_resume_rebuilds_it(copy, reference, capsys):
    path, out = copy
    (out / "report.json").write_text('{"cells": [')
    assert main(["report", str(out)]) == 2
    assert "not a readable report" in capsys.readouterr().err
    again = run_suite(load_suite(path), out=out, resume=True, progress=False)
    assert again.ran == []
    assert comparable(read_json(out / "report.json")) == comparable(read_json(reference[1] / "report.json"))


def test_no_write_leaves_out_and_no_user_file_is_removed(reference, tmp_path, monkeypatch):
    """User files in --out and around it (``foo.tmp``, ``.x.tmp``, ...) survive a run and a resume; every file
    the run creates or replaces lies under --out."""
    path, _ = reference
    work = tmp_path / "work"
    out = work / "out"
    (out / "cells").mkdir(parents=True)
    planted = [work / "foo.tmp", work / ".x.tmp", work / "notes.txt", out / "foo.tmp", out / ".x.tmp",
               out / ".report.json.tmp", out / "cells" / ".draft.tmp", out / "README.md"]
    for i, f in enumerate(planted):
        f.write_text(f"user data {i}")
    monkeypatch.chdir(work)
    import privaudit.core.io
    import tempfile

    written = []
    real_mkstemp, real_replace = tempfile.mkstemp, os.replace

    def mkstemp(*args, **kwargs):
        fd, name = real_mkstemp(*args, **kwargs)
        written.append(Path(name).resolve())
        return fd, name

    def replace(src, dst):
        written.append(Path(dst).resolve())
        return real_replace(src, dst)

    monkeypatch.setattr(privaudit.core.io.tempfile, "mkstemp", mkstemp)
    monkeypatch.setattr(privaudit.core.io.os, "replace", replace)
    outside_before = {p for p in work.rglob("*") if not p.is_relative_to(out)}
    for resume in (False, True):
        run_suite(load_suite(path), out=Path("out"), resume=resume, progress=False)
    assert written and all(p.is_relative_to(out.resolve()) for p in written), \
        [p for p in written if not p.is_relative_to(out.resolve())]
    assert {p for p in work.rglob("*") if not p.is_relative_to(out)} == outside_before
    assert all(f.read_text() == f"user data {i}" for i, f in enumerate(planted))
    assert not list(out.rglob("*privaudit-tmp*"))


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}


@pytest.mark.slow  # ~30 s: a real run in a subprocess (tests/test_run_safety.py has the fast lock test)
def test_two_concurrent_runs_the_second_is_refused_the_first_report_intact(reference, tmp_path, capsys):
    marker = tmp_path / "training"
    first_suite = write_suite(tmp_path, pause=1.0, marker=str(marker))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "privaudit", "run", str(first_suite), "--out", str(out), "--quiet",
                             "--jobs", "1"], cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not marker.exists() and time.time() < deadline:  # the first run holds the lock and is training
            time.sleep(0.02)
        assert marker.exists(), proc.stderr.read() if proc.poll() is not None else "no cell started"
        other = tmp_path / "other.toml"
        other.write_text(THREE.format(pause=0, marker="").replace("[1.0, 2.0, 4.0]", "[8.0]"))
        start = time.perf_counter()
        assert main(["run", str(other), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"is in use by another privaudit run (pid {proc.pid})" in err
        assert time.perf_counter() - start < 5
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    report = read_json(out / "report.json")  # the first run's report, whole and consistent with its pages
    assert [c["id"] for c in report["cells"]] == IDS and report["gate"]["status"] == "pass"
    assert report["suite"]["name"] == "three" and "eps=8" not in (out / "report.md").read_text()
    assert not any("eps=8" in p.name for p in out.glob("cells/*"))


def _kill_when(proc: subprocess.Popen, ready, what: str, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and proc.poll() is None and not ready():
            time.sleep(0.005)
        assert proc.poll() is None, f"the run ended before {what}"
        assert ready(), f"timed out waiting for {what}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
def test_sigkill_at_three_points_then_resume_equals_an_uninterrupted_run(tmp_path):
    """SIGKILL while a cell trains, between two cells, and while the report is written; each time --resume
    finishes the run and its report.json equals an uninterrupted run's (creation time aside)."""
    marker = tmp_path / "training"
    path = write_suite(tmp_path, pause=1.5, marker=str(marker))
    reference = tmp_path / "reference"
    assert run_suite(load_suite(path), out=reference, progress=False).exit_code == 0
    expected = comparable(read_json(reference / "report.json"))

    def finished(out: Path) -> int:
        return len(list(out.glob("cells/*/cell.json")))

    points = {
        # the second cell is training: one cell finished, the marker has two lines
        "during training": lambda out: finished(out) == 1 and len(marker.read_text().splitlines()) >= 2,
        # the first cell's record is committed and the next has not begun training
        "between cells": lambda out: finished(out) == 1,
        # every cell finished, the report not yet replaced (plots are being drawn, files staged)
        "during report writing": lambda out: finished(out) == 3,
    }
    for name, ready in points.items():
        out = tmp_path / name.replace(" ", "-")
        marker.write_text("")
        proc = subprocess.Popen([sys.executable, "-m", "privaudit", "run", str(path), "--out", str(out), "--quiet",
                                 "--jobs", "1"], cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        _kill_when(proc, lambda: marker.exists() and ready(out), name)
        assert not (out / "report.json").exists(), f"{name}: the run finished before it was killed"
        killed_at = finished(out)
        resumed = run_suite(load_suite(path), out=out, resume=True, progress=False)
        assert len(resumed.reused) == killed_at and len(resumed.ran) == 3 - killed_at, name
        assert comparable(read_json(out / "report.json")) == expected, name
        assert not list(out.rglob("*privaudit-tmp*")), name


def test_an_edited_sensitivity_cache_or_witness_is_rechecked(tmp_path, monkeypatch, capsys):
    from privaudit.audit.sensitivity import SensitivityResult

    calls = []

    def check_claims(claim_ids, *, budget_seconds, evaluations, seed, progress, witness_dir):
        calls.append(claim_ids)
        witness = Path(witness_dir) / "w.safetensors"
        witness.parent.mkdir(parents=True, exist_ok=True)
        witness.write_bytes(b"planted witness")
        return [SensitivityResult(claim="dpcl.mean", source="paper", relation="replace-one", bound=1.0, config={},
                                  observed=0.9, ratio=0.9, verdict="holds", witness=str(witness))]

    monkeypatch.setattr("privaudit.audit.sensitivity.check_claims", check_claims)
    suite = tmp_path / "s.toml"
    suite.write_text(THREE.format(pause=0, marker="") + "[sensitivity]\nclaims = ['dpcl.mean']\nevaluations = 10\n")
    out = tmp_path / "out"

    def run() -> str:
        capsys.readouterr()
        run_suite(load_suite(suite), out=out, only=["sensitivity"], resume=True, progress=False)
        return capsys.readouterr().err

    run()
    assert run() == "" and len(calls) == 1  # an intact cache is reused silently
    (out / "sensitivity" / "witnesses" / "w.safetensors").write_bytes(b"edited")
    err = run()
    assert len(calls) == 2 and err == ("privaudit: resume: sensitivity checks: sensitivity/witnesses/w.safetensors "
                                       "was changed or is corrupt (sha256 mismatch); recomputing\n")
    saved = read_json(out / "sensitivity.json")
    saved["results"][0]["observed"] = 0.1
    (out / "sensitivity.json").write_text(json.dumps(saved))
    err = run()
    assert len(calls) == 3 and "sensitivity.json was edited or is corrupt (digest mismatch)" in err
    assert read_json(out / "report.json")["sensitivity"][0]["observed"] == 0.9
    # --only on cells keeps the finished sensitivity verdicts in the report
    run_suite(load_suite(suite), out=out, only=[IDS[0]], progress=False)
    assert len(calls) == 3 and read_json(out / "report.json")["sensitivity"][0]["claim"] == "dpcl.mean"
