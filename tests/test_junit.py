"""JUnit XML of the verdicts (``--junit FILE``): valid as the CI systems' readers take it (junitparser; the
structure of junit-10.xsd), one case per cell and check, every reason of a failing gate carried by a failing case."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from privaudit.audit.gate.junit import gate_cases
from privaudit.audit.junit import Case, check_junit_path, junit_xml, write_junit
from privaudit.core.errors import ConfigError

from junit_check import read_junit

ROOT = Path(__file__).resolve().parents[1]

REFERENCE = ROOT / "reports" / "reference" / "quickstart" / "report.json"


def test_every_outcome_is_read_back_with_its_message_and_awkward_text_survives(tmp_path):
    cases = [Case("cell/a", "loss", "passed", details="bound 0.3; claim 1"),
             Case("cell/a", "lira", "failed", "eps_lb = 9 > claimed 1 & <more>\nsecond line", "bound \"9\"", 1.5),
             Case("cell/b", "cell", "error", "cell cell/b errored: ValueError: x\x00y"),
             Case("cell/b", "trace", "skipped", "no trace recorded")]
    path = write_junit(tmp_path / "deep" / "junit.xml", "privaudit run tiny", cases, {"privaudit": "0"})
    totals, read = read_junit(path)
    assert totals == {"tests": 4, "failures": 1, "errors": 1, "skipped": 1}
    assert [(r.classname, r.name, r.outcome) for r in read] == [(c.classname, c.name, c.outcome) for c in cases]
    assert read[1].message == "eps_lb = 9 > claimed 1 & <more>" and "second line\nbound \"9\"" in read[1].text
    assert read[2].message == "cell cell/b errored: ValueError: x?y" and read[0].out == "bound 0.3; claim 1"
    assert junit_xml("s", cases) == junit_xml("s", cases) and b"timestamp" not in junit_xml("s", cases)
    with pytest.raises(ValueError, match="outcome"):
        Case("a", "b", "refuted")


def test_a_bad_junit_path_is_refused_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="--junit: .* must be a file path"):
        check_junit_path(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="--junit: "):
        check_junit_path(tmp_path / "file" / "junit.xml")
    assert check_junit_path(tmp_path / "new" / "junit.xml") == tmp_path / "new" / "junit.xml"


def test_the_reference_runs_gate_is_a_passing_suite_with_a_case_per_cell_and_check(tmp_path):
    """The committed quickstart report: every comparison, trace and released-noise check a case; nothing fails;
    the positive control's caught shortfall passes."""
    report = json.loads(REFERENCE.read_text())
    cases = gate_cases(report)
    totals, read = read_junit(write_junit(tmp_path / "j.xml", "privaudit gate", cases))
    comparisons = sum(len(c["gate"]["comparisons"]) for c in report["cells"])
    assert report["gate"]["status"] == "pass" and totals["failures"] == totals["errors"] == 0
    assert sum(r.name not in ("trace", "positive control") and ": " not in r.name and r.classname not in
               ("sensitivity", "step audit") for r in read) == comparisons
    control = "digits/control-undernoised/eps=1/seed=0"
    assert {(r.name, r.outcome) for r in read if r.classname == control} >= {
        ("positive control", "passed"), ("trace", "passed"), ("gradient-canary", "passed"),
        ("gradient-canary: released noise", "passed")}
    assert {r.classname for r in read} >= {"sensitivity", "step audit", "digits/dp-gcl/eps=1/seed=0"}
    assert any(r.outcome == "skipped" and "no privacy claim" in r.message for r in read)


def test_a_failing_gate_fails_the_cases_it_names_and_keeps_every_reason(tmp_path):
    """The reference report edited into a failing one: a bound above its claim, a trace mismatch folded, a missing
    cell; each reason is the failure message of the case it names, and none is lost."""
    report = copy.deepcopy(json.loads(REFERENCE.read_text()))
    cell = next(c for c in report["cells"] if c["id"] == "digits/dp-gcl/eps=1/seed=0")
    cid = cell["id"]
    exceeds = f"cell {cid}: gradient-canary's sound lower bound eps_lb = 9 (99% confidence) exceeds 1"
    trace = f"cell {cid}: its trace does not match its claim: steps 1-30 (every step): sampled shuffled"
    missing = "cell digits/x/eps=1/seed=0: no result (it has not run in this output directory)"
    next(c for c in cell["gate"]["comparisons"] if c["attack"] == "gradient-canary")["verdict"] = "exceeds"
    cell["gate"].update(status="fail", reasons=[exceeds, trace])
    report["gate"].update(status="fail", reasons=[exceeds, trace, missing, "sensitivity claim dpcl.mean errored: x"])
    totals, read = read_junit(write_junit(tmp_path / "j.xml", "privaudit gate", gate_cases(report)))
    failed = {(r.classname, r.name): r.message for r in read if r.outcome in ("failed", "error")}
    assert failed == {(cid, "gradient-canary"): exceeds, (cid, "trace"): trace, ("quickstart", "gate"): missing,
                      ("sensitivity", "dpcl.mean"): "sensitivity claim dpcl.mean errored: x"}
    assert totals["failures"] == 3 and totals["errors"] == 1
    report["gate"]["reasons"] = cell["gate"]["reasons"] = []  # reasons lost: the verdict still fails its case
    assert [(c.classname, c.name) for c in gate_cases(report) if c.outcome == "failed"] == [(cid, "gradient-canary")]
    assert any(c.outcome == "failed" for c in gate_cases({**report, "cells": []}))  # a failing status, no case


def test_every_junit_example_in_the_docs_is_a_valid_file(tmp_path):
    import re

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    blocks = [b for page in pages for b in re.findall(r"```xml\n(.*?)```", page.read_text(encoding="utf-8"), re.S)]
    assert blocks
    for i, block in enumerate(blocks):
        path = tmp_path / f"{i}.xml"
        path.write_text(block, encoding="utf-8")
        totals, cases = read_junit(path)
        assert totals["tests"] == len(cases) and any(c.outcome == "failed" and c.message for c in cases)
