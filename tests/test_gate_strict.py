"""Strict expectations, end to end: a documented violation that does not reproduce fails the run, a quantity that
raises fails it naming the exception, an errored step pair fails it; the auditing commands exit non-zero when part
of their work errored."""

from __future__ import annotations

import json

import pytest

from privaudit.audit.cli import main
from privaudit.audit.run.runner import run_suite
from privaudit.audit.suite.load import load_suite
from privaudit.core.errors import ConfigError

SUITE = """
name = "strict"
out = "{out}"
[[defenses]]
name = "nonprivate"
[sensitivity]
claims = ["reference.clipped-sum.add-remove"]
evaluations = 40
"""


def _run(tmp_path, extra: str = ""):
    path = tmp_path / "s.toml"
    path.write_text(SUITE.format(out=(tmp_path / "out").as_posix()) + extra)
    return run_suite(load_suite(path), progress=False, only=["sensitivity"])


def _sensitivity_reasons(result) -> list[str]:
    return [r for r in result.report["gate"]["reasons"] if r.startswith("sensitivity")]


def test_a_documented_violation_that_does_not_reproduce_fails_naming_it(tmp_path):
    """A clipped sum's sensitivity is C: a suite documenting it as violated loses power, and the gate says so."""
    result = _run(tmp_path, 'expect = { "reference.clipped-sum.add-remove" = "violated" }\n')
    assert result.exit_code == 1
    assert _sensitivity_reasons(result) == [
        "sensitivity claim reference.clipped-sum.add-remove: expected violated, found not refuted (observed "
        f"{result.report['sensitivity'][0]['observed']:.4g}, bound 1): the auditor lost power; if the claim was fixed, "
        "update the suite's sensitivity.expect"]


def test_a_quantity_that_raises_fails_naming_the_exception(tmp_path, monkeypatch):
    from privaudit.audit.sensitivity.claim_spec import ClaimSpec

    def broken(self, setting, ctx):
        raise RuntimeError("planted failure in the quantity")

    monkeypatch.setattr(ClaimSpec, "target", broken)
    result = _run(tmp_path)
    assert result.exit_code == 1 and result.report["sensitivity"][0]["verdict"] == "error"
    [reason] = _sensitivity_reasons(result)
    assert reason.startswith("sensitivity claim reference.clipped-sum.add-remove errored: setting {")
    assert reason.endswith("RuntimeError: planted failure in the quantity")


def test_an_inconclusive_verdict_fails_unless_allowed(tmp_path):
    """Too few pairs to cover the settings: inconclusive, which fails the gate unless the suite allows it."""
    body = SUITE.replace("evaluations = 40", "evaluations = 2")
    path = tmp_path / "s.toml"
    path.write_text(body.format(out=(tmp_path / "out").as_posix()))
    failed = run_suite(load_suite(path), progress=False, only=["sensitivity"])
    assert failed.report["sensitivity"][0]["verdict"] == "inconclusive"
    assert any("is inconclusive" in r and "allow_inconclusive" in r for r in _sensitivity_reasons(failed))
    path.write_text(body.format(out=(tmp_path / "out").as_posix())
                    + 'allow_inconclusive = ["reference.clipped-sum.add-remove"]\n')
    allowed = run_suite(load_suite(path), progress=False, only=["sensitivity"], resume=True)
    assert _sensitivity_reasons(allowed) == []
    assert any("allowed by the suite" in n for n in allowed.report["gate"]["notes"])


@pytest.mark.parametrize("table, message", [
    ('allow_inconclusive = ["dpcl.mean"]', "sensitivity.allow_inconclusive[0]: 'dpcl.mean' is not among the claims"),
    ('expect = { "reference.clipped-sum.add-remove" = "violated" }\n'
     'allow_inconclusive = ["reference.clipped-sum.add-remove"]', "is expected violated (sensitivity.expect)"),
    ("allow_inconclusive = [1]", "sensitivity.allow_inconclusive[0]: expected claim ids, got 1"),
])
def test_allow_inconclusive_is_validated(tmp_path, table, message):
    path = tmp_path / "s.toml"
    path.write_text(SUITE.format(out=(tmp_path / "out").as_posix()) + table + "\n")
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        load_suite(path)


def test_step_audit_pair_errors_fail_the_gate_and_the_command(tmp_path, capsys, monkeypatch):
    from privaudit.audit.step import audit as step_audit
    from privaudit.audit.step.gate import step_gate
    from privaudit.audit.suite.model import StepAuditConfig

    cfg = StepAuditConfig(("dp-clip", "dpcl-simclr"), 1000, "all", 8.0, 10, 0, {"dpcl-simclr": "refuted"})
    ok = {"defense": "dp-clip", "verdict": "error", "claim": {"mu": 0.3}, "power": 0.9,
          "pairs": [{"pair": "canary", "verdict": "not refuted", "mu_lower": 0.28},
                    {"pair": "extreme", "verdict": "error", "error": "RuntimeError: can't allocate memory"}]}
    lost = {"defense": "dpcl-simclr", "verdict": "not refuted", "claim": {"mu": 0.58}, "power": 0.4,
            "pairs": [{"pair": "witness", "verdict": "not refuted", "mu_lower": 0.23}]}
    reasons, _ = step_gate([ok, lost], cfg)
    assert reasons == ["step audit of dp-clip: pair extreme errored: RuntimeError: can't allocate memory",
                       "step audit of dpcl-simclr: expected refuted, found not refuted (power 0.40): the auditor lost "
                       "power; if the claim was fixed, update the suite's step_audit.expect"]
    # the command: an --out that is a file is refused before any work; a pair that cannot run exits 3
    existing = tmp_path / "file"
    existing.write_text("not a directory")
    args = ["audit-step", "--defense", "control-undernoised", "--pair", "canary", "--draws", "2000"]
    assert main(args + ["--out", str(existing)]) == 2
    assert "--out" in capsys.readouterr().err
    def no_memory(*args, **kwargs):
        raise RuntimeError("can't allocate memory")

    monkeypatch.setattr(step_audit, "_gaussian_pair", no_memory)  # the pair's bound fails as a large audit would
    assert main(["audit-step", "--defense", "dp-clip", "--pair", "canary", "--draws", "100", "--json"]) == 3
    row = json.loads(capsys.readouterr().out)["pairs"][0]
    assert row["verdict"] == "error" and row["error"]
