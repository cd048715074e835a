"""``privaudit gate`` and ``privaudit report`` recompute the gate from a run's evidence: report.json's status is
never the answer, and an edited or hand-written report, an edited bound, count, epsilon or score file cannot pass."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from privaudit.audit.cli import main
from privaudit.audit.verify.evidence import MANIFEST, recompute
from privaudit.audit.run.cache import file_sha256, read_keyed, write_keyed
from privaudit.audit.run.runner import run_suite
from privaudit.audit.suite.model import config_hash
from privaudit.audit.suite.load import load_suite
from privaudit.core.io import read_json

SUITE = """
name = "gated"
out = "{out}"
allow_plugins = true
epsilons = [1.0]

[[defenses]]
name = "leaky_defense:NoisyKernelSum"
label = "honest"
params = {{ leak_factor = 1.0 }}
primary = "loss"

[[defenses]]
name = "leaky_defense:NoisyKernelSum"
label = "control"
control = {control}
primary = "loss"

[[attacks]]
name = "loss"
"""
HONEST, CONTROL = "digits/honest/eps=1/seed=0", "digits/control/eps=1/seed=0"


def _suite(tmp, out, control: bool):
    path = tmp / f"gated-{control}.toml"
    path.write_text(SUITE.format(out=out.as_posix(), control=str(control).lower()))
    return load_suite(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(passing run, failing run): an honest Gaussian mechanism beside a tenfold under-noised one, first declared
    a positive control (caught: the gate passes), then, resumed in a copy, as an ordinary claim (it fails)."""
    tmp = tmp_path_factory.mktemp("gated")
    passing, failing = tmp / "pass", tmp / "fail"
    assert run_suite(_suite(tmp, passing, True), progress=False).exit_code == 0
    shutil.copytree(passing, failing)
    again = run_suite(_suite(tmp, failing, False), resume=True, progress=False)
    assert again.exit_code == 1 and again.ran == []  # the cells are reused: only the gate changes
    return passing, failing


@pytest.fixture
def copy(runs, tmp_path):
    made = []

    def make(which: int):
        made.append(which)
        out = tmp_path / f"{('pass', 'fail')[which]}{len(made)}"
        shutil.copytree(runs[which], out)
        return out
    return make


def _edit_report(out, edit) -> None:
    report = read_json(out / "report.json")
    edit(report)
    (out / "report.json").write_text(json.dumps(report))


def _forge(out, rel: str, edit) -> None:
    """Edit a keyed evidence file and re-digest it, and the manifest over it: what only a deliberate forger does."""
    path = out / rel
    saved = read_json(path)
    content = {k: v for k, v in saved.items() if k not in ("schema", "key", "files", "digest")}
    edit(content)
    write_keyed(path, out, saved["key"], content, [out / f for f in saved["files"]])
    manifest = read_json(out / MANIFEST)
    body = {k: v for k, v in manifest.items() if k not in ("schema", "key", "files", "digest")}
    body["evidence"] = {f: file_sha256(out / f) for f in body["evidence"]}  # every listed file, as it is now
    write_keyed(out / MANIFEST, out, config_hash(manifest["suite"]), body, [])


def _cell_json(out, cid: str) -> str:
    grid = {g["id"]: g["dir"] for g in read_json(out / MANIFEST)["grid"]}
    return f"{grid[cid]}/cell.json"


def test_gate_recomputes_a_run_and_prints_bound_claim_margin(runs, capsys):
    passing, failing = runs
    assert main(["gate", str(passing)]) == 0
    out = capsys.readouterr().out
    assert f"gate: PASS (recomputed from the evidence in {passing})" in out and "margin" in out and "caught" in out
    report = read_json(passing / "report.json")
    honest = report["cells"][0]["gate"]["comparisons"][0]
    row = next(line for line in out.splitlines() if line.startswith(HONEST))
    assert f"{honest['epsilon'] - honest['gate_eps_lower_bound']:.4g}" in row
    assert recompute(passing).gate.to_dict() == report["gate"]  # the runner's gate is the one recomputed
    assert main(["gate", str(failing)]) == 1
    out = capsys.readouterr().out
    assert "gate: FAIL" in out and f"cell {CONTROL}: loss's sound lower bound" in out


def test_gate_and_run_write_their_verdicts_as_junit(runs, copy, tmp_path, capsys):
    """``--junit``: a case per cell and check, read by a JUnit reader; the failing run's one failure carries the
    gate's reason; ``run`` (resumed: its cells reused) writes the cases ``gate`` recomputes."""
    from junit_check import read_junit

    passing, failing = runs
    assert main(["gate", str(passing), "--junit", str(tmp_path / "pass.xml")]) == 0
    totals, cases = read_junit(tmp_path / "pass.xml")
    assert totals["failures"] == totals["errors"] == 0 and totals["tests"] == len(cases)
    assert {(c.classname, c.name, c.outcome) for c in cases} >= {(HONEST, "loss", "passed"),
                                                                  (CONTROL, "loss", "passed"),
                                                                  (CONTROL, "positive control", "passed")}
    capsys.readouterr()
    assert main(["gate", str(failing), "--junit", str(tmp_path / "fail.xml")]) == 1
    printed = capsys.readouterr().out
    totals, cases = read_junit(tmp_path / "fail.xml")
    (failed,) = [c for c in cases if c.outcome == "failed"]
    assert totals["failures"] == 1 and (failed.classname, failed.name) == (CONTROL, "loss")
    assert failed.message.startswith(f"cell {CONTROL}: loss's sound lower bound") and f"  - {failed.message}" in printed
    assert "bound: " in failed.text and "claim: " in failed.text
    out = copy(1)
    suite = tmp_path / "again.toml"
    suite.write_text(SUITE.format(out=out.as_posix(), control="false"))
    assert main(["run", str(suite), "--resume", "--quiet", "--jobs", "1", "--junit", str(tmp_path / "run.xml")]) == 1
    _, ran = read_junit(tmp_path / "run.xml")
    assert [(c.classname, c.name, c.outcome, c.message) for c in ran] == \
        [(c.classname, c.name, c.outcome, c.message) for c in cases]
    assert main(["gate", str(passing), "--junit", str(passing)]) == 2  # a directory: refused before any work


def test_an_edited_status_or_a_hand_written_report_cannot_pass(copy, tmp_path, capsys):
    out = copy(1)
    _edit_report(out, lambda r: r["gate"].update(status="pass", reasons=[]))
    assert main(["gate", str(out)]) == 1
    text = capsys.readouterr().out
    assert "report.json says the gate is 'pass', its evidence says 'fail'" in text
    assert f"cell {CONTROL}: loss's sound lower bound" in text
    # a whole report written by hand (a violating cell, status pass) in a directory without evidence
    alone = tmp_path / "alone"
    alone.mkdir()
    report = read_json(out / "report.json")
    (alone / "report.json").write_text(json.dumps(report))
    assert main(["gate", str(alone)]) == 1
    assert "run.json is missing: there is no evidence of what ran" in capsys.readouterr().out
    # ... or put over a real run's report: its cells are not the evidence's
    passing = copy(0)
    _edit_report(passing, lambda r: r["cells"][0]["attacks"]["loss"].update(eps_lower_bound=9.0))
    assert main(["gate", str(passing)]) == 1
    assert f"report.json's cell {HONEST} differs from its evidence" in capsys.readouterr().out
    (alone / "report.json").write_text("{garbled")
    assert main(["gate", str(alone)]) == 2


def test_edited_evidence_fails_even_when_re_digested(copy, capsys):
    out = copy(0)
    rel = _cell_json(out, CONTROL)
    saved = read_json(out / rel)
    saved["record"]["attacks"]["loss"]["details"]["bound"]["epsilon"] = 0.1
    (out / rel).write_text(json.dumps(saved))  # edited in place: its digest no longer matches
    assert main(["gate", str(out)]) == 1
    text = capsys.readouterr().out
    assert f"{rel} was changed since the run (sha256 mismatch)" in text
    assert f"cell {CONTROL}: its evidence cannot be trusted: cell.json was edited or is corrupt" in text

    def lower_bound(content):  # a forger lowers the control's bound and re-digests: the counts give it away
        attack = content["record"]["attacks"]["loss"]
        attack["eps_lower_bound"] = attack["details"]["bound"]["epsilon"] = 0.1

    out = copy(1)
    _forge(out, _cell_json(out, CONTROL), lower_bound)
    assert main(["gate", str(out)]) == 1
    assert "bound recomputes to" in capsys.readouterr().out

    def fewer_correct(content):  # ... and the counts too: the saved scores give it away
        bound = content["record"]["attacks"]["loss"]["details"]["bound"]
        bound["counts"]["v"] = bound["counts"]["r"] // 2

    out = copy(1)
    _forge(out, _cell_json(out, CONTROL), fewer_correct)
    assert main(["gate", str(out)]) == 1
    assert "bound's v recounts to" in capsys.readouterr().out


def test_an_edited_epsilon_or_score_file_fails(copy, capsys):
    out = copy(0)
    _forge(out, _cell_json(out, HONEST), lambda c: c["record"]["epsilon"].update(rdp=50.0))
    assert main(["gate", str(out)]) == 1
    assert f"cell {HONEST}: accountant rdp re-accounts the claim to" in capsys.readouterr().out
    out = copy(0)
    _forge(out, _cell_json(out, HONEST), lambda c: c["record"]["attacks"]["loss"].update(auc=0.5))
    assert main(["gate", str(out)]) == 1
    assert f"cell {HONEST}: loss: its AUC recomputes to" in capsys.readouterr().out
    out = copy(0)
    saved, _ = read_keyed(out / _cell_json(out, HONEST), read_json(out / _cell_json(out, HONEST))["key"], out)
    scores = out / saved["record"]["attacks"]["loss"]["scores"]
    arrays = dict(np.load(scores))
    arrays["scores"] = arrays["scores"][::-1].copy()
    np.savez(scores.with_suffix(""), **arrays)
    assert main(["gate", str(out)]) == 1
    assert "was changed or is corrupt (sha256 mismatch)" in capsys.readouterr().out


def test_report_renders_the_recomputed_gate(copy):
    out = copy(1)
    _edit_report(out, lambda r: r["gate"].update(status="pass", reasons=[]))
    edited = (out / "report.json").read_text()
    assert main(["report", str(out)]) == 0
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "**Gate: FAIL**" in md and "Gate: PASS" not in md and "Gate: PASS" not in html
    assert "report.json says the gate is 'pass'" in md
    assert (out / "report.json").read_text() == edited  # report.json is left as it is


# -- a DP cell's claim checks (its trace, its own step audit) and its trajectory bound -----------------------------
DP = "digits/dp-gcl/eps=8/seed=0"


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory):
    """One DP-GCL cell (one epoch from a random init, 2000 gradient canaries): its claim checks and its trajectory
    bound saved as evidence; the gate passes."""
    from privaudit.audit.suite.load import parse_suite

    raw = {"name": "claimed", "datasets": ["digits"], "delta": 1e-5, "epsilons": [8.0],
           "defenses": [{"name": "dp-gcl", "primary": "gradient-canary",
                         "params": {"epochs": 1, "init": "random", "batch_size": 128}}],
           "attacks": [{"name": "gradient-canary", "params": {"canaries": 2000}}]}
    out = tmp_path_factory.mktemp("claimed") / "out"
    assert run_suite(parse_suite(raw), out=out, progress=False).exit_code == 0
    return out


@pytest.fixture
def dp_copy(dp_run, tmp_path):
    def make():
        out = tmp_path / f"dp{len(list(tmp_path.iterdir()))}"
        shutil.copytree(dp_run, out)
        return out
    return make


def _evidence_rel(out) -> str:
    return read_json(out / _cell_json(out, DP))["record"]["claim_checks"]["evidence"]


def test_claim_checks_are_evidence_the_gate_recomputes(dp_run, capsys):
    rel = _evidence_rel(dp_run)
    assert rel in read_json(dp_run / MANIFEST)["evidence"]
    again = recompute(dp_run)
    assert again.gate.status == "pass" and again.gate.to_dict() == read_json(dp_run / "report.json")["gate"]
    methods = [c["method"] for c in again.report["cells"][0]["gate"]["comparisons"]]
    assert "white-box-trajectory" in methods and methods.count("step-gdp") == 2
    noise = again.report["cells"][0]["gate"]["released_noise"][0]  # recomputed: pooled, across steps, per tensor
    assert "unjudged" not in noise["independence"] and noise["tensors"]["tensors"] and not noise["tensors"]["uncovered"]
    assert main(["gate", str(dp_run)]) == 0


def test_an_edited_trace_fails_naming_the_file_or_the_step(dp_copy, capsys):
    out = dp_copy()
    rel = _evidence_rel(out)
    evidence = read_json(out / rel)
    evidence["trace"]["noise_std"][1] /= 2
    (out / rel).write_text(json.dumps(evidence))  # edited: its hash in run.json and cell.json no longer matches
    assert main(["gate", str(out)]) == 1
    assert f"{rel} was changed since the run (sha256 mismatch)" in capsys.readouterr().out
    _forge(out, _cell_json(out, DP), lambda c: None)  # ... re-hashed by a forger: the trace check is re-run on it
    assert main(["gate", str(out)]) == 1
    text = capsys.readouterr().out
    assert f"cell {DP}: its trace does not match its claim: step 2: noise multiplier" in text
    assert "its trace check recomputes to 1 mismatch(es)" in text
    assert "its step audit's claim noise_multiplier_added recomputes to" in text


def test_edited_counts_of_the_trajectory_and_step_bounds_fail(dp_copy, capsys):
    def trajectory(content):  # fewer false negatives: a larger bound than the run's
        attack = content["record"]["attacks"]["gradient-canary"]
        attack["details"]["trajectory_bound"]["counts"]["fn"] //= 2

    def ladder(content):  # a rung of the mechanism bound's guess ladder with one right guess fewer
        rung = content["record"]["attacks"]["gradient-canary"]["details"]["mechanism_bound"]["counts"]["ladder"][-1]
        rung["v"] -= 1

    def step_pair(content):
        pair = content["record"]["claim_checks"]["step_audit"]["pairs"][0]
        pair["mu_lower"] *= 0.5

    def step_claim(content):  # a larger per-step claim hides a refutation
        content["record"]["claim_checks"]["step_audit"]["claim"]["mu"] *= 2

    for edit, said in ((trajectory, "gradient-canary: trajectory_bound recomputes to"),
                       (ladder, "gradient-canary: mechanism_bound's ladder recounts to"),
                       (step_pair, "pair canary's mu_lower recomputes to"),
                       (step_claim, "its step audit's claim mu recomputes to")):
        out = dp_copy()
        _forge(out, _cell_json(out, DP), edit)
        assert main(["gate", str(out)]) == 1
        assert said in capsys.readouterr().out, said
