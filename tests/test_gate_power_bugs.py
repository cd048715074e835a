"""``privaudit gate-power --bugs``: the catalogue loaded like a plugin (refused without --allow-plugins), a planted
record judged as a claim (failed, naming the check), the per-class rates and their page, and one small run end to
end through the real training code and gate (slow)."""

import json

import pytest

from privaudit.audit.cli import main
from privaudit.audit.commands.gate_power import bugs_markdown
from privaudit.audit.verify.gate_power_bugs import CORRECT, class_rates, load_catalogue
from privaudit.audit.verify.power_gate import judge_as_claim
from privaudit.audit.suite.model import GateConfig
from privaudit.core.errors import ConfigError

from cell_records import planted_record
from test_gate_power_command import SUITE, suite_file  # noqa: F401  (the fixture)

CATALOGUE = "tests/bug_plants.py"


def test_the_catalogue_loads_and_bad_files_are_one_line(tmp_path):
    bugs = load_catalogue(CATALOGUE)
    assert {"shuffled", "clip-2x", "reused-noise", "batch-normaliser"} <= set(bugs)
    with pytest.raises(ConfigError, match="--bugs: no such file"):
        load_catalogue(tmp_path / "missing.py")
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    with pytest.raises(ConfigError, match="defines no BUGS mapping"):
        load_catalogue(empty)


def test_bugs_need_allow_plugins(suite_file, capsys):  # noqa: F811
    assert main(["gate-power", str(suite_file), "--bugs", CATALOGUE]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--allow-plugins" in err[0]


def test_a_planted_record_is_judged_as_a_claim_naming_the_check():
    record = planted_record("unit_norm", "step 2: a clipped unit entered the sum with norm 2")
    caught, by, reason = judge_as_claim(record, 20, GateConfig())
    assert caught and by == ["trace: unit_norm"] and "norm 2" in reason
    assert judge_as_claim(planted_record(None), 20, GateConfig())[:2] == (False, [])


def test_class_rates_take_each_class_worst_row_and_invert_the_correct_rows():
    rows = [{"defense": "a", "epsilon": 1.0, "bug": "x", "class": "noise", "runs": 10, "caught": 10},
            {"defense": "a", "epsilon": 8.0, "bug": "y", "class": "noise", "runs": 10, "caught": 7},
            {"defense": "a", "epsilon": 8.0, "bug": CORRECT, "class": CORRECT, "runs": 10, "caught": 1}]
    rates = class_rates(rows)
    assert rates["noise"]["caught"] == 17 and rates["noise"]["worst"]["bug"] == "y"
    assert rates["noise"]["worst"]["rate"] == pytest.approx(0.7)
    assert rates[CORRECT]["worst"]["rate"] == pytest.approx(0.9)  # the share of correct runs the gate passed
    page = bugs_markdown({"suite": "s", "catalogue": CATALOGUE, "seeds": 10, "family": 4, "classes": rates,
                          "rows": [{**r, "caught_by": {}} for r in rows]})
    assert "- **noise**: the gate failed 17 of 20 planted runs; lowest rate 70% (y in a at epsilon 8)" in page
    assert "- **correct** (no bug): the gate failed 1 of 10 runs" in page


@pytest.mark.slow
def test_one_small_catalogue_run_end_to_end(suite_file, tmp_path):  # noqa: F811
    out = tmp_path / "gpb"
    code = main(["gate-power", str(suite_file), "--bugs", CATALOGUE, "--allow-plugins", "--bug-names",
                 "shuffled,clip-2x", "--defenses", "dp-gcl", "--seeds", "1", "--workers", "1", "--out", str(out),
                 "--quiet"])
    assert code == 0
    rows = {r["bug"]: r for r in json.loads((out / "gate_power_bugs.json").read_text())["rows"]}
    assert rows[CORRECT]["caught"] == 0 and rows["shuffled"]["caught"] == 1 and rows["clip-2x"]["caught"] == 1
    assert "trace: sampling" in rows["shuffled"]["caught_by"] and "trace: unit_norm" in rows["clip-2x"]["caught_by"]


def test_the_docs_page_is_the_committed_measurements_render():
    """docs/gate-power-bugs.md comes from reports/reference/gate-power-bugs/gate_power_bugs.json; the measurement
    it records has every class planted at epsilon 1 and 8 and the correct defenses beside them."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "scripts/render_gate_power_bugs.py", "--check"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout
    result = json.loads(open("reports/reference/gate-power-bugs/gate_power_bugs.json", encoding="utf-8").read())
    assert set(result["classes"]) == {"sampling", "clipping", "noise", "accounting", "dependent-noise",
                                      "auxiliary release", CORRECT}
    assert {r["epsilon"] for r in result["rows"]} == {1.0, 8.0} and result["seeds"] == 10


def test_added_rows_keep_the_correct_cells_once_and_say_where_they_were_measured(monkeypatch):
    """``--add``: the new bugs' rows join the reference, their re-run correct cells are compared, not counted twice,
    and a result of another seed count is refused."""
    import importlib.util

    monkeypatch.syspath_prepend("scripts")  # the script imports its neighbour rendered_page
    spec = importlib.util.spec_from_file_location("render_gpb", "scripts/render_gate_power_bugs.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    row = {"class": "noise", "defense": "dp-gcl", "epsilon": 1.0, "runs": 10, "caught_by": {}, "errors": [],
           "reason": None}
    base = {"suite": "s", "seeds": 10, "family": 20, "errors": 0, "catalogue": "bug_plants.py",
            "rows": [{**row, "bug": CORRECT, "class": CORRECT, "caught": 1}, {**row, "bug": "reused-noise", "caught": 10}]}
    new = {"suite": "s", "seeds": 10, "family": 20, "errors": 0,
           "rows": [{**row, "bug": CORRECT, "class": CORRECT, "caught": 2},
                    {**row, "bug": "halves-shared", "class": "dependent-noise", "caught": 9}]}
    out = render.add(base, [new], "abc1234")
    assert [r["bug"] for r in out["rows"]] == [CORRECT, "reused-noise", "halves-shared"]
    assert out["classes"][CORRECT]["runs"] == 10 and out["classes"]["dependent-noise"]["caught"] == 9
    assert out["provenance"] == ["rows of `halves-shared` measured at abc1234; the correct cells re-run there alongside "
                                 "them failed 2 of 10 runs (differing from the rows above: dp-gcl at epsilon 1: 1 "
                                 "then 2)"]
    with pytest.raises(SystemExit, match="seed count"):
        render.add(base, [{**new, "seeds": 2}], "abc1234")
