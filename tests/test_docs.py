"""The documentation cannot drift from the code: the README stays a short page; every TOML block in it and in
docs/ is a suite ``privaudit validate`` accepts; every shell and Python example runs (those marked
``<!-- not run: reason -->`` are too long to run here: their ``privaudit`` commands must still parse); every
relative link resolves; the results page is what ``scripts/render_results.py`` renders from the committed
report; and no prose types a measurement (the results page holds them all)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results.md"
REPORT = ROOT / "reports" / "reference" / "quickstart" / "report.json"
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
# Rendered from a committed reference, each checked against its render by its own test (--check).
GENERATED = {RESULTS, ROOT / "docs" / "trajectory-calibration.md", ROOT / "docs" / "trajectory-power.md",
             ROOT / "docs" / "benchmark.md"}
# Written by hand (not generated), measurements excluded: docs/notes/ keeps the measurements behind the code.
PROSE = [p for p in PAGES if p not in GENERATED and "notes" not in p.relative_to(ROOT).parts]
# Linked pages another change writes (the audit-your-own-model guide comes with the audit-model work).
PENDING = {ROOT / "docs" / "audit-your-own-model.md"}

FENCE = re.compile(r"(?:<!--(?P<mark>[^>]*)-->\s*\n)?```(?P<lang>[\w-]*)\n(?P<body>.*?)```", re.S)
SHELL = {"bash", "sh", "shell", "console"}


def blocks(langs: set[str]) -> list[tuple[str, str, str | None]]:
    """(where, code, the ``not run`` reason or None) of every fenced block in ``langs``."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m.group("lang") in langs:
                mark = (m.group("mark") or "").strip()
                reason = mark.split(":", 1)[1].strip() if mark.startswith("not run") else None
                line = text[:m.start("body")].count("\n") + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", m.group("body"), reason))
    return found


def ids(items) -> list[str]:
    return [item[0] for item in items]


def test_readme_is_a_short_page_for_a_newcomer():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 300
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:3] == ["## Install", "## Quickstart", "## Audit your own model"]
    install = text.index("## Install")
    assert text.index("download.pytorch.org/whl/cpu") < text.index("## Quickstart") and install < text.index(
        "pip install . && privaudit run")  # the CPU build is offered before the command that pulls torch


@pytest.mark.parametrize("where, body, reason", blocks({"toml"}), ids=ids(blocks({"toml"})))
def test_every_toml_block_is_a_valid_suite(where, body, reason, tmp_path, capsys):
    from privaudit.audit.cli import main

    suite = tmp_path / "suite.toml"
    suite.write_text(body, encoding="utf-8")
    code = main(["validate", str(suite)])
    assert code == 0, f"{where}: {capsys.readouterr().err}"


def privaudit_commands(script: str) -> list[list[str]]:
    """The ``privaudit ...`` invocations of a shell script (continuations joined, split at ``&&``, ``||``, ``;``)."""
    commands = []
    for line in script.replace("\\\n", " ").splitlines():
        for part in re.split(r"&&|\|\||;", line.split(" #", 1)[0]):
            words = shlex.split(part)
            if words and words[0] == "privaudit":
                commands.append(words[1:])
    return commands


@pytest.fixture(scope="module")
def shell_env(tmp_path_factory):
    """PATH with a ``privaudit`` that runs this checkout (python -m privaudit), as an installed one would."""
    bin_dir = tmp_path_factory.mktemp("bin")
    shim = bin_dir / "privaudit"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m privaudit "$@"\n')
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("where, body, reason", blocks(SHELL), ids=ids(blocks(SHELL)))
def test_every_shell_example_runs_or_parses(where, body, reason, shell_env):
    from privaudit.audit.cli import build_parser

    commands = privaudit_commands(body)
    for argv in commands:  # every command parses, run or not (a renamed flag fails here)
        args = build_parser(argv).parse_args(argv)
        assert callable(args.func), where
    if reason is not None:
        assert reason, f"{where}: say why the example is not run"
        return
    lines = [line for line in body.replace("\\\n", " ").splitlines() if line.strip()]
    if len(commands) == len(lines):  # only privaudit commands: run them here (one interpreter, imports shared)
        for argv in commands:
            assert run_here(argv) == 0, f"{where}: privaudit {' '.join(argv)}"
        return
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=ROOT, env=shell_env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{where}: exit {done.returncode}\n{done.stderr[-2000:]}"


def run_here(argv: list[str]) -> int:
    """``privaudit argv`` in this process from the repository root, globs expanded as a shell would."""
    import glob

    from privaudit.audit.cli import main

    expanded = [match for arg in argv for match in (sorted(glob.glob(arg, root_dir=ROOT)) or [arg])]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return main(expanded)
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("where, body, reason", blocks({"python"}), ids=ids(blocks({"python"})))
def test_every_python_example_runs(where, body, reason, tmp_path):
    code = compile(body, where, "exec")
    if reason is not None:
        return
    done = subprocess.run([sys.executable, "-c", body], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=600)
    assert code is not None and done.returncode == 0, f"{where}:\n{done.stderr[-2000:]}"


LINK = re.compile(r"\]\((?!https?://|#|mailto:)([^)#\s]+)(#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page):
    missing = [target for target, _ in LINK.findall(page.read_text(encoding="utf-8"))
               if not (page.parent / target).exists() and (page.parent / target).resolve() not in PENDING]
    assert missing == []


def test_results_page_is_what_the_committed_report_renders():
    """docs/results.md and its figures come from reports/reference/quickstart/report.json (read by the one checked
    reader):
    rerender and compare (the figures carry the report's digest; their pixels depend on the matplotlib version, so
    they are not compared)."""
    from PIL import Image

    from privaudit.audit.report.results import digest, render
    from privaudit.audit.report.schema import load_report

    report_bytes = REPORT.read_bytes()
    text, figures = render(load_report(REPORT.parent), report_bytes, "reports/reference/quickstart/report.json")
    assert RESULTS.read_text(encoding="utf-8") == text, "run: python scripts/render_results.py"
    for name in figures:
        with Image.open(RESULTS.parent / name) as image:
            assert image.text.get("Source") == digest(report_bytes), f"{name}: run python scripts/render_results.py"


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")
def test_a_quickstart_run_leaves_the_clone_clean_and_the_reference_tracked():
    """``privaudit run quickstart`` writes reports/quickstart/ (the suite's ``out``): git ignores all of it; the
    committed reference run's report.json is the one file under reports/reference/ that git tracks."""
    def ignored(path: str) -> bool:
        done = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
        assert done.returncode in (0, 1)
        return done.returncode == 0
    assert all(ignored(f"reports/quickstart/{f}") for f in ("report.json", "report.html", "evidence/x.npz"))
    assert not ignored("reports/reference/quickstart/report.json") and ignored("reports/reference/quickstart/x.html")
    assert 'out = "reports/quickstart"' in (ROOT / "suites" / "quickstart.toml").read_text()


# What a typed measurement looks like: a decimal with two or more significant digits (0.549, 3.39, 0.91), a
# duration of a run (346 s, 5.6 minutes) or a measured speed-up (1.95x). Round parameters (0.5, 0.02, 1e-5,
# 20 seconds) and anything in code (`numpy>=1.26`, `sigma = 1.07`, code blocks) are not measurements.
MEASUREMENT = re.compile(r"(?<![\w.])(?:\d+\.\d+|\d{3,})\s?(?:s|sec|seconds|min|minutes|h|hours)\b|"
                         r"(?<![\w.])\d+\.\d+x\b|"
                         r"(?<![\w.^])(?:\d+\.\d+|\.\d+)(?![\w.])")
# A number right after these names a section, a version or a licence, not a measurement.
REFERENCE = re.compile(r"(?:Thms?|Lemmas?|Secs?|Section|Def|Cor|Eqs?|Table|Prop|Alg|Algorithm|App|Python|Apache)"
                       r"[.-]?\s*$")


def significant(number: str) -> int:
    return len(number.replace(".", "").lstrip("0"))


def measurements(text: str) -> list[str]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    prose = re.sub(r"<!--.*?-->", "", prose, flags=re.S)
    return [m.group(0) for m in MEASUREMENT.finditer(prose)
            if not REFERENCE.search(prose[max(0, m.start() - 12):m.start()])
            and (not re.fullmatch(r"\d+\.\d+|\.\d+", m.group(0)) or significant(m.group(0)) >= 2)]


@pytest.mark.parametrize("page", PROSE, ids=[str(p.relative_to(ROOT)) for p in PROSE])
def test_no_measurement_is_typed_in_prose(page):
    assert measurements(page.read_text(encoding="utf-8")) == []


def test_the_measurement_check_catches_typed_figures():
    typed = ("nonprivate: rmia / AUC 0.549 / TPR 0.0188; gap closed 0.91-0.98; 346 s beside 385 s; "
             "1.95x faster; 5.6 minutes")
    assert measurements(typed) == ["0.549", "0.0188", "0.91", "0.98", "346 s", "385 s", "1.95x", "5.6 minutes"]
    assert measurements("delta 1e-5, probability 1/2, every 20 seconds, `numpy>=1.26`, 0.5 and 0.02, Thm. 4.1, "
                        "Python 3.10") == []
