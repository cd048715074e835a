"""The runner end to end on tiny suites: report schema and recomputability, SIGKILL + --resume, the gate."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from privaudit.attacks.bounds.one_run import one_run_bound
from privaudit.attacks.metrics import summarize
from privaudit.audit.cli import main
from privaudit.core.io import load_npz, read_json
from privaudit.audit.report import TOP_LEVEL
from privaudit.audit.run.runner import run_suite
from privaudit.audit.suite.load import load_suite

ROOT = Path(__file__).resolve().parents[1]
CELL_KEYS = {"id", "dataset", "defense", "target_epsilon", "delta", "seed", "claim", "epsilon", "utility", "attacks",
             "gate", "details"}
ATTACK_KEYS = ["auc", "tpr_at_fpr", "eps_lower_bound", "eps_lb_method", "n_members", "n_nonmembers"]


def comparable(report: dict) -> dict:
    """A report as compared between runs of the same suite: whole (wall-clock times are in timings.json only)."""
    return report


def test_report_json_schema_and_every_number_recomputes_from_the_scores(tiny_run):
    result, out = tiny_run
    report = read_json(out / "report.json")
    assert list(report) == list(TOP_LEVEL)
    assert report["version"] and report["device"] == "cpu" and "created" not in report
    assert read_json(out / "timings.json")["created"].endswith("Z")
    assert report["suite"]["name"] == "tiny" and report["sensitivity"] == []
    assert report["gate"] == {"status": "pass", "reasons": [], "notes": report["gate"]["notes"],
                              "family_wise_error": pytest.approx(0.05), "controls": 0, "controls_caught": 0}
    assert result.exit_code == 0
    ids = [c["id"] for c in report["cells"]]
    assert ids == ["digits/kernel-sum/eps=1/seed=0", "digits/kernel-sum/eps=4/seed=0", "digits/nonprivate/seed=0"]
    for cell in report["cells"]:
        assert set(cell) == CELL_KEYS
        assert set(cell["claim"]) >= {"mechanism", "relation", "unit", "paper_accountant"}
        assert set(cell["epsilon"]) >= {"rdp"} and set(cell["utility"]) >= {"knn_accuracy", "linear_probe_accuracy"}
        assert set(cell["gate"]) == {"status", "reasons", "comparisons", "released_noise"}
        assert cell["gate"]["status"] == "pass" and cell["gate"]["released_noise"] == []  # no white-box canaries
        assert list(cell["attacks"]) == ["loss", "lira"]
        for attack in cell["attacks"].values():
            assert list(attack)[:6] == ATTACK_KEYS
            assert set(attack["tpr_at_fpr"]) == {"0.001", "0.01", "0.1"}
            arrays = load_npz(out / attack["scores"])
            m = summarize(arrays["scores"], arrays["membership"])
            assert attack["auc"] == pytest.approx(m["auc"], abs=1e-12)
            assert attack["tpr_at_fpr"] == m["tpr_at_fpr"]
            assert (attack["n_members"], attack["n_nonmembers"]) == (m["n_members"], m["n_nonmembers"])
            bound = attack["details"]["bound"]
            again = one_run_bound(arrays["scores"], arrays["membership"], k_pos=bound["counts"]["k_pos"],
                                  k_neg=bound["counts"]["k_neg"], beta=1 - bound["confidence"], delta=bound["delta"])
            assert attack["eps_lower_bound"] == pytest.approx(again.epsilon, abs=1e-9)
    private, baseline = report["cells"][0], report["cells"][2]
    assert private["target_epsilon"] == 1.0 and private["epsilon"]["rdp"] == pytest.approx(1.0, rel=1e-3)
    assert private["gate"]["comparisons"][0]["verdict"] == "consistent"
    assert baseline["epsilon"]["rdp"] is None and baseline["details"]["epsilon"]["rdp"]["infinite"]
    assert baseline["gate"]["comparisons"][0]["verdict"] == "not comparable"
    md = (out / "report.md").read_text()
    assert "**Gate: PASS**" in md and "| kernel-sum | 1 | 1 |" in md
    for name in ("roc-loss", "roc-lira", "epsilon", "privacy-utility"):
        assert (out / "plots" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"plots/{name}.png" in md


@pytest.mark.slow  # 19 s: the default run kills a run by SIGKILL and SIGTERM and resumes it (test_run_endings.py)
def test_sigkill_then_resume_reuses_finished_cells_and_equals_an_uninterrupted_run(tiny_suite, tiny_run, tmp_path):
    _, reference_out = tiny_run
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    proc = subprocess.Popen([sys.executable, "-m", "privaudit", "run", str(tiny_suite), "--out", str(out), "--quiet"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    try:
        while time.time() < deadline and not list(out.glob("cells/*/cell.json")):
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finished = sorted(out.glob("cells/*/cell.json"))
    assert finished, "the run was killed before any cell finished"
    assert not (out / "report.json").exists(), "the run finished before it was killed"
    for path in out.rglob("*"):  # nothing torn: every artifact parses
        if path.suffix == ".json" and not path.name.startswith("."):
            read_json(path)
        elif path.suffix == ".npz":
            load_npz(path)
    stamps = {p: p.stat().st_mtime_ns for p in finished}

    resumed = run_suite(load_suite(tiny_suite), out=out, resume=True, progress=False)
    reused = {read_json(p)["record"]["id"] for p in finished}
    assert set(resumed.reused) == reused and not reused & set(resumed.ran)
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # not retrained, not rewritten
    assert not list(out.rglob(".*.tmp"))
    assert comparable(read_json(out / "report.json")) == comparable(read_json(reference_out / "report.json"))


def test_resume_skips_everything_when_the_run_finished(tiny_suite, tiny_run, tmp_path, capsys):
    _, reference_out = tiny_run
    out = tmp_path / "copy"
    import shutil

    shutil.copytree(reference_out, out)
    first = read_json(reference_out / "timings.json")
    again = run_suite(load_suite(tiny_suite), out=out, resume=True, progress=False)
    assert again.ran == [] and len(again.reused) == 3
    assert comparable(again.report) == comparable(read_json(reference_out / "report.json"))
    # The reused cells keep the times the first run measured; the first run's wall time is kept beside this one's.
    timings = read_json(out / "timings.json")
    assert timings["cells"] == first["cells"] and timings["peak_rss_mb"] == first["peak_rss_mb"]
    assert timings["earlier"] == [{"created": first["created"], "total": first["total"], "jobs": first["jobs"]}]
    # The pages are generated from report.json alone: regenerating them gives the same text.
    html = (out / "report.html").read_text()
    (out / "report.html").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "report.html").read_text() == html
    assert main(["report", str(tmp_path)]) == 2


LEAKY = """
name = "leaky"
out = "{out}"
allow_plugins = true
epsilons = [1.0]

[[defenses]]
name = "leaky_defense:NoisyKernelSum"
label = "leaky"

[[defenses]]
name = "leaky_defense:NoisyKernelSum"
label = "honest"
params = {{ leak_factor = 1.0 }}

[[attacks]]
name = "loss"
"""


NOT_RUN = "cell {}: no result (it has not run in this output directory); the gate judges the whole suite"


def test_planted_leaky_defense_fails_the_gate_naming_the_cell(tmp_path, capsys):
    path = tmp_path / "leaky.toml"
    path.write_text(LEAKY.format(out=tmp_path / "out"))
    assert main(["run", str(path), "--quiet", "--jobs", "1"]) == 1
    stdout = capsys.readouterr().out
    report = read_json(tmp_path / "out" / "report.json")
    assert report["gate"]["status"] == "fail"
    assert len(report["gate"]["reasons"]) == 1
    reason = report["gate"]["reasons"][0]
    assert reason.startswith("cell digits/leaky/eps=1/seed=0: loss's sound lower bound eps_lb = ")
    assert "(97.5% confidence, family-wise over 2) exceeds the smallest applicable epsilon" in reason
    assert reason in stdout
    leaky, honest = report["cells"]
    comparison = leaky["gate"]["comparisons"][0]
    # The gate's bound is the attack's recomputed at beta / 2 (two comparisons): smaller, still above every epsilon.
    assert comparison["gate_eps_lower_bound"] < leaky["attacks"]["loss"]["eps_lower_bound"]
    assert comparison["gate_eps_lower_bound"] > max(v for v in leaky["epsilon"].values() if v)
    assert comparison["epsilon"] == min(v for v in leaky["epsilon"].values() if v)
    assert honest["gate"] == {"status": "pass", "reasons": [], "comparisons": honest["gate"]["comparisons"],
                              "released_noise": []}
    assert honest["gate"]["comparisons"][0]["verdict"] == "consistent"
    assert "FAIL" in (tmp_path / "out" / "report.html").read_text()


def test_a_failing_cell_is_a_run_error_named_in_the_gate(tmp_path, capsys):
    path = tmp_path / "broken.toml"
    path.write_text(LEAKY.format(out=tmp_path / "out").replace("NoisyKernelSum\"\nlabel = \"honest\"",
                                                               "Broken\"\nlabel = \"broken\""))
    assert main(["run", str(path), "--quiet", "--only", "*/broken/*"]) == 3
    report = read_json(tmp_path / "out" / "report.json")
    assert [c["id"] for c in report["cells"]] == ["digits/broken/eps=1/seed=0"]
    # the cell --only left out has no result: the gate judges the whole suite, so a partial run never passes it
    assert report["gate"]["reasons"] == ["cell digits/broken/eps=1/seed=0 errored: train: RuntimeError: "
                                         "planted failure while training", NOT_RUN.format("digits/leaky/eps=1/seed=0")]
    assert not list((tmp_path / "out").glob("cells/*/cell.json"))  # an errored cell is retried on --resume


def test_sensitivity_verdicts_gate_and_witnesses_are_kept(tmp_path, monkeypatch):
    from privaudit.audit.sensitivity import SensitivityResult

    calls = []

    def check_claims(claim_ids, *, budget_seconds, evaluations, seed, progress, witness_dir):
        calls.append((claim_ids, budget_seconds, evaluations, seed))
        witness = Path(witness_dir) / "dpgcl.group-chunk.seed0.safetensors"
        witness.parent.mkdir(parents=True, exist_ok=True)
        witness.write_bytes(b"planted witness")
        row = {"source": "paper", "relation": "replace-one", "bound": 1.0, "config": {}}
        return [SensitivityResult(**{"claim": "dpcl.mean", **row, "observed": 0.9, "ratio": 0.9, "verdict": "holds",
                                     "witness": None}),
                SensitivityResult(**{"claim": "dpgcl.group[random]", **row, "observed": 0.8, "ratio": 0.8,
                                     "verdict": "holds", "witness": None}),
                SensitivityResult(**{"claim": "dpgcl.group[chunk]", **row, "observed": 2.0, "ratio": 2.0,
                                     "verdict": "violated", "witness": str(witness)})]

    monkeypatch.setattr("privaudit.audit.sensitivity.check_claims", check_claims)
    witness = Path("sensitivity/witnesses/dpgcl.group-chunk.seed0.safetensors")
    base = LEAKY.format(out=tmp_path / "out").replace('label = "leaky"', 'label = "leaky"\nparams = { leak_factor = 1.0 }')
    suite = tmp_path / "s.toml"
    suite.write_text(base + "[sensitivity]\nclaims = ['dpcl.mean', 'dpgcl.group']\nbudget_seconds = 2\n")
    result = run_suite(load_suite(suite), progress=False, only=["*/honest/*", "sensitivity"])
    assert calls == [(["dpcl.mean", "dpgcl.group"], 2.0, None, 0)]
    assert result.exit_code == 1
    assert result.report["gate"]["reasons"] == [
        NOT_RUN.format("digits/leaky/eps=1/seed=0"),
        f"sensitivity claim dpgcl.group[chunk] (paper) violated: observed 2 > bound 1 (witness: {witness.as_posix()})"]
    assert (tmp_path / "out" / witness).read_bytes() == b"planted witness"
    assert "timings" not in read_json(tmp_path / "out" / "sensitivity.json")  # evidence: its digest is in run.json
    assert [r["claim"] for r in result.report["sensitivity"]] == ["dpcl.mean", "dpgcl.group[random]",
                                                                  "dpgcl.group[chunk]"]
    html = (tmp_path / "out" / "report.html").read_text()
    assert 'id="sensitivity-table"' in html and witness.as_posix() in html

    suite.write_text(base + "[sensitivity]\nclaims = ['dpcl.mean', 'dpgcl.group']\nbudget_seconds = 2\n"
                            "expect = { 'dpgcl.group[chunk]' = 'violated' }\n")
    again = run_suite(load_suite(suite), progress=False, only=["*/honest/*", "sensitivity"], resume=True)
    assert len(calls) == 1  # the verdicts were reused: same claims, budget and seed
    # the documented violation no longer fails; the cell --only left out still does (a partial run never passes)
    assert again.exit_code == 1 and again.report["gate"]["reasons"] == [NOT_RUN.format("digits/leaky/eps=1/seed=0")]
    assert any("expected by the suite (known-broken claim)" in n for n in again.report["gate"]["notes"])
    assert again.reused == ["digits/honest/eps=1/seed=0"]
    np.testing.assert_equal(again.report["cells"], result.report["cells"])


@pytest.mark.slow  # 30 s: the default run gates a suite on a stand-in check (above) and finds dpgcl.group[chunk] violated (test_headline_findings.py)
def test_real_sensitivity_checks_gate_the_suite_and_their_witnesses_replay(tmp_path):
    """The register's checks themselves (no stand-in): DP-GCL's chunk grouping breaks Thm. 2."""
    from privaudit.audit.sensitivity import replay

    out = tmp_path / "out"
    body = (f'name = "sens"\nout = "{out.as_posix()}"\n[[defenses]]\nname = "nonprivate"\n'
            "[sensitivity]\nclaims = ['dpcl.mean', 'dpgcl.group[chunk]']\nevaluations = 240\nseed = 2\n")
    suite = tmp_path / "s.toml"
    suite.write_text(body)
    failed = run_suite(load_suite(suite), progress=False, only=["sensitivity"])
    rows = {r["claim"]: r for r in failed.report["sensitivity"]}
    assert rows["dpcl.mean"]["verdict"] == "holds" and rows["dpcl.mean"]["observed"] <= rows["dpcl.mean"]["bound"]
    chunk = rows["dpgcl.group[chunk]"]
    assert chunk["verdict"] == "violated" and chunk["observed"] > chunk["bound"]
    assert failed.exit_code == 1
    assert failed.report["gate"]["reasons"][0] == NOT_RUN.format("digits/nonprivate/seed=0")
    assert failed.report["gate"]["reasons"][1].startswith(
        "sensitivity claim dpgcl.group[chunk] (DP-GCL Thms. 2-3 (Eqs. 10, 13; App. A)) violated: observed ")
    assert replay(out / chunk["witness"])["reproduced"]
    # wall-clock fields stay out of the report (reruns with the same seed give the same report.json)
    assert "search_seconds" not in chunk["config"] and all("seconds" not in s for s in chunk["config"]["settings"])
    timing = read_json(out / "timings.json")["sensitivity_claims"]["dpgcl.group[chunk]"]
    assert timing["search_seconds"] > 0 and len(timing["settings"]) == len(chunk["config"]["settings"])

    suite.write_text(body + "expect = { 'dpgcl.group[chunk]' = 'violated' }\n")
    passed = run_suite(load_suite(suite), progress=False, only=["sensitivity"], resume=True)
    assert passed.report["sensitivity"] == failed.report["sensitivity"]
    # the sensitivity checks pass the gate now; the cell --only left out does not (a partial run never passes)
    assert passed.exit_code == 1 and passed.report["gate"]["reasons"] == [NOT_RUN.format("digits/nonprivate/seed=0")]


@pytest.mark.parametrize("table, message", [
    ("claims = ['dpcl.nope']", "sensitivity.claims[0]: unknown claim 'dpcl.nope'; accepted: reference.clipped-sum.add-remove"),
    ("claims = ['dpcl.mean']\nexpect = { 'dpgcl.group[chunk]' = 'violated' }",
     "sensitivity.expect.dpgcl.group[chunk]: not among the claims this suite checks"),
    ("all = true\nexpect = { 'dpcl.mean' = 'broken' }", "sensitivity.expect.dpcl.mean: unknown value 'broken'"),
    ("all = true\nevaluations = 10\nbudget_seconds = 3", "give either evaluations or budget_seconds"),
    ("all = true\nevaluations = 0", "sensitivity.evaluations: must be >= 1"),
])
def test_bad_sensitivity_tables_exit_2_naming_the_key(tmp_path, capsys, table, message):
    suite = tmp_path / "s.toml"
    suite.write_text(f'name = "bad"\nout = "{(tmp_path / "out").as_posix()}"\n[[defenses]]\nname = "nonprivate"\n'
                     f"[sensitivity]\n{table}\n")
    assert main(["run", str(suite)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_step_audits_are_saved_as_strict_json_without_seconds(tiny_suite, tmp_path, monkeypatch, capsys):
    """A step audit's infinite bound is null in report.json (which the one checked reader refuses otherwise) and in
    its evidence alike, so ``privaudit gate`` finds them equal; its seconds go to timings.json only."""
    from privaudit.audit.verify.evidence import recompute
    from privaudit.audit.report.schema import load_report

    def planted(suite, out, progress=True, names=None):
        pair = {"pair": "canonical", "verdict": "not refuted", "mu_lower": 0.5, "epsilon_lower": 2.0,
                "epsilon_from_mu": float("inf"), "seconds": 1.5}
        return [{"defense": "dpsgd", "relation": "add-remove", "claim": {"mu": 1.0, "epsilon": 8.0},
                 "verdict": "not refuted", "power": 0.25, "pairs": [pair], "seconds": 2.5}], []

    monkeypatch.setattr("privaudit.audit.step.runs.run_suite_step_audits", planted)
    suite = tmp_path / "s.toml"
    suite.write_text(tiny_suite.read_text() + "\n[step_audit]\ndefenses = ['dpsgd']\n")
    out = tmp_path / "out"
    run_suite(load_suite(suite), out=out, progress=False, only=["step_audit"])
    (row,) = load_report(out)["step_audit"]
    assert row["pairs"][0]["epsilon_from_mu"] is None and "seconds" not in row and "seconds" not in row["pairs"][0]
    saved = read_json(out / "step_audit" / "results.json")["results"]
    assert saved == [row]
    assert read_json(out / "timings.json")["step_audit_defenses"] == {"dpsgd": {"seconds": 2.5, "pairs": [1.5]}}
    reasons = recompute(out).gate.reasons
    assert reasons and not [r for r in reasons if "step audit" in r]  # only the cells --only left out
