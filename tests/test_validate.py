"""``privaudit validate SUITE...``: exit 0 when every suite is valid, 2 with one line per bad suite naming the file,
the key and the accepted values; nothing is trained or written."""

from __future__ import annotations

import json
from pathlib import Path

from privaudit.audit.cli import main

ROOT = Path(__file__).resolve().parents[1]

# The README's former example: dp-gcl's primary statistic names an attack it does not run.
BROKEN = """
name = "my-audit"
datasets = ["digits"]
epsilons = [1.0, 8.0]

[[defenses]]
name = "dp-gcl"
primary = "gradient-canary"

[[attacks]]
name = "lira"
"""


def test_valid_suites_exit_0_and_say_what_they_would_run(tmp_path, capsys):
    assert main(["validate", str(ROOT / "suites" / "quickstart.toml"), "quickstart"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[1].startswith("quickstart: valid: 13 cells")
    assert "15 sensitivity claims" in out[1] and "step audits of 8 defenses" in out[1]
    assert list(tmp_path.iterdir()) == []


def test_a_bad_suite_exits_2_with_one_line_naming_the_key_and_the_accepted_values(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(BROKEN)
    assert main(["validate", str(ROOT / "suites" / "quickstart.toml"), str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"privaudit: error: {bad}: defenses[0].primary: unknown value 'gradient-canary'; "
                            "accepted: the defense's attacks (lira)\n")
    assert "quickstart.toml: valid" in captured.out
    assert not (tmp_path / "reports").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


def test_machine_checks_can_be_left_out_to_lint_a_gpu_suite(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PRIVAUDIT_DATA_DIR", raising=False)
    gpu = tmp_path / "gpu.toml"
    gpu.write_text('datasets = ["cifar10"]\ndata_dir = "' + str(tmp_path / "none") + '"\n[[defenses]]\nname = "nonprivate"\n')
    assert main(["validate", str(gpu)]) == 2
    assert "datasets[0]: dataset 'cifar10' is missing" in capsys.readouterr().err
    assert main(["validate", "--no-machine-checks", "--json", str(gpu)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["valid"] is True and result["cells"] == 1 and result["error"] is None
