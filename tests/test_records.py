"""The typed records (:mod:`privaudit.audit.report.records`): a real run's report.json and cell.json read into them and
written back give the same bytes; a record of the wrong shape is refused naming the field (missing, unexpected, of
the wrong type), in report.json and in a cell's cell.json alike; records are frozen and a copy keeps absent fields
absent."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from privaudit.audit.report.records import RECORDS, CellGate, CellRecord, Comparison, SuiteGate
from privaudit.audit.report.schema import SchemaError, load_report
from privaudit.audit.run.cache import cell_record
from privaudit.core.errors import ConfigError
from privaudit.core.io import read_json, to_json

from cell_records import make_attack_record, make_cell_record

REFERENCE = Path(__file__).resolve().parents[1] / "reports" / "reference" / "quickstart"


def _round_trip(report: dict) -> dict:
    """The report with its cells and gate read into their records and written back."""
    cells = [CellRecord.from_dict(c, f"cells[{i}]").to_dict() for i, c in enumerate(report["cells"])]
    return {**report, "cells": cells, "gate": SuiteGate.from_dict(report["gate"], "gate").to_dict()}


@pytest.mark.parametrize("which", ["tiny run", "quickstart reference"])
def test_a_real_report_round_trips_byte_for_byte(which, request):
    """The tiny suite's run (a plugin defense and a non-private cell) and the committed quickstart run (DP cells
    with claim checks, a positive control caught by its released noise, mechanism and trajectory bounds)."""
    out = request.getfixturevalue("tiny_run")[1] if which == "tiny run" else REFERENCE
    text = (out / "report.json").read_text(encoding="utf-8")
    report = load_report(out)
    assert to_json(_round_trip(report)) + "\n" == text
    records = [CellRecord.from_dict(c) for c in report["cells"]]
    assert [r.to_dict() for r in records] == report["cells"]
    assert all(dataclasses.replace(r) == r for r in records)  # equal records for equal data
    if which == "quickstart reference":
        assert any(r.gate.control and r.gate.caught_by for r in records)
        assert any("eps_lb_trajectory" in a.present for r in records for a in r.attacks.values())


def test_a_real_cell_json_record_round_trips(tiny_run):
    """The evidence the gate is recomputed from: each cell.json's record, read as the runner and ``privaudit gate``
    read it (:func:`privaudit.audit.run.cache.cell_record`), written back as it was."""
    saved = [read_json(p) for p in sorted((tiny_run[1] / "cells").glob("*/cell.json"))]
    assert saved
    for cell_json in saved:
        record, problem = cell_record(cell_json)
        assert problem is None and record.to_dict() == cell_json["record"]
        assert json.dumps(record.to_dict()) == json.dumps(cell_json["record"])  # key order too


def _cell() -> dict:
    return make_cell_record("digits/x/eps=1/seed=0", attacks={"loss": make_attack_record(0.5)}).to_dict()


MALFORMED = {
    "a missing field": (lambda c: {k: v for k, v in c.items() if k != "epsilon"},
                        "cells[0].epsilon: missing (expected an object or null)"),
    "an unexpected field": (lambda c: {**c, "verdict": "pass"},
                            "cells[0].verdict: unexpected: no such field (a cell record has id, dataset, defense"),
    "a field of the wrong type": (lambda c: {**c, "seed": "0"}, "cells[0].seed: expected an integer, got '0'"),
    "an attack's missing field": (lambda c: {**c, "attacks": {"loss": {k: v for k, v in c["attacks"]["loss"].items()
                                                                       if k != "scores"}}},
                                  "cells[0].attacks.loss.scores: missing"),
    "an attack's unexpected field": (lambda c: {**c, "attacks": {"loss": {**c["attacks"]["loss"], "eps": 1.0}}},
                                     "cells[0].attacks.loss.eps: unexpected: no such field (a attack record has"),
    "a claim's unexpected field": (lambda c: {**c, "claim": {**c["claim"], "event": {}}},
                                   "cells[0].claim.event: unexpected"),
    "a gate without its status": (lambda c: {**c, "gate": {"reasons": [], "comparisons": []}},
                                  "cells[0].gate.status: missing (expected 'pass' or 'fail')"),
    "a comparison's unexpected field": (lambda c: {**c, "gate": {"status": "pass", "reasons": [], "comparisons": [
        {**Comparison(attack="loss", eps_lower_bound=None, method=None, epsilon=None, accountant=None,
                      gate_eps_lower_bound=None, gate_confidence=None, verdict="consistent", reason=None).to_dict(),
         "bound": {}}]}}, "cells[0].gate.comparisons[0].bound: unexpected"),
    "a wrong type before a missing field": (lambda c: {k: v for k, v in {**c, "seed": 1.5}.items() if k != "epsilon"},
                                            "cells[0].seed: expected an integer, got 1.5"),
}


@pytest.mark.parametrize("edit, fragment", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_record_raises_naming_the_field(edit, fragment):
    with pytest.raises(SchemaError) as raised:
        CellRecord.from_dict(edit(_cell()), "cells[0]")
    assert fragment in str(raised.value)
    assert isinstance(raised.value, ConfigError)  # one line on the command line, exit status 2


def test_a_malformed_record_in_report_json_and_in_cell_json_is_named(tmp_path):
    report = read_json(REFERENCE / "report.json")
    attacks = report["cells"][2]["attacks"]
    report["cells"][2]["attacks"] = {label: {**a, "auc_ci": [0.4, 0.6]} for label, a in attacks.items()}
    (tmp_path / "report.json").write_text(json.dumps(report))
    label = next(iter(report["cells"][2]["attacks"]))
    with pytest.raises(ConfigError, match=rf"cells\[2\]\.attacks\.{label}\.auc_ci: unexpected"):
        load_report(tmp_path)
    saved = {"record": {k: v for k, v in _cell().items() if k != "details"}, "files": {}}
    saved["record"]["attacks"] = {}
    record, problem = cell_record(saved)
    assert record is None and problem == ("cell.json holds no cell record (record.details: missing (expected an "
                                          "object or null))")


def test_records_are_frozen_and_a_copy_keeps_absent_fields_absent():
    cell = CellRecord.from_dict(_cell())
    with pytest.raises(dataclasses.FrozenInstanceError):
        cell.seed = 1
    assert "gate" not in cell.present and "gate" not in cell.to_dict()
    gate = CellGate(status="pass", reasons=[], comparisons=[])
    judged = cell.with_gate(gate)
    assert judged.to_dict() == {**cell.to_dict(), "gate": {"status": "pass", "reasons": [], "comparisons": []}}
    assert cell.gate is None and judged.gate.released_noise is None  # absent stays absent, the original unchanged
    suite = SuiteGate(status="pass", reasons=[], notes=[], family_wise_error=None, controls=0, controls_caught=0)
    assert suite.with_reasons(["x"]).status == "fail" and suite.with_reasons([]).status == "pass"


def test_every_record_has_the_fields_of_its_schema():
    for record in RECORDS:
        names = [f.name for f in dataclasses.fields(record) if f.name != "present"]
        assert set(names) == set(record.SPEC.fields) and record.SPEC.closed, record.__name__
