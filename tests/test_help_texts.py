"""Help texts say what the commands check: required flags shown required, ranges and defaults as validated,
a description on every user door, messages naming the flag as typed, ``validate --json`` one object per line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privaudit.audit.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def help_of(command: str) -> str:
    return build_parser([command])._subparsers._group_actions[0].choices[command].format_help()


@pytest.mark.parametrize("command", ["audit-scores", "audit-model", "gate"])
def test_user_doors_have_a_description(command):
    text = help_of(command)
    assert text.split("\n\n")[1].strip()[0].isupper(), text[:400]  # a paragraph under the usage line


def test_required_flags_and_ranges_as_validated():
    model = help_of("audit-model")
    usage = model.split("\n\n")[0]
    assert " --members PATH" in usage and "[--members" not in usage and "[--nonmembers" not in usage
    scores = " ".join(help_of("audit-scores").split())
    assert "required unless --tf-privacy" in scores and "(default example)" in scores
    assert "(default 0.95) (a number in (0, 1))" in scores and "> 0" not in scores.split("--confidence")[1][:80]
    assert "Exit status 1 when the claim is refuted" in scores


@pytest.mark.parametrize("value", ["1", "1.5", "0"])
def test_confidence_outside_0_1_is_one_line(capsys, value):
    assert main(["audit-scores", "--members", "m.npy", "--nonmembers", "n.npy", "--confidence", value]) == 2
    assert "--confidence: must be a number in (0, 1)" in capsys.readouterr().err


def test_probabilities_out_of_range_name_the_flag(tmp_path, capsys):
    np.savez(tmp_path / "m.npz", probs=np.full((4, 2), 2.0), labels=np.zeros(4, int))
    np.savez(tmp_path / "n.npz", probs=np.full((4, 2), 0.5), labels=np.zeros(4, int))
    assert main(["audit-scores", "--members", str(tmp_path / "m.npz"), "--nonmembers", str(tmp_path / "n.npz")]) == 2
    assert "(give --kind score for other scores)" in capsys.readouterr().err


def test_validate_json_is_one_object_per_line(capsys):
    suite = str(ROOT / "suites" / "quickstart.toml")
    assert main(["validate", "--no-machine-checks", "--json", suite, suite]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(json.loads(line)["valid"] for line in lines)
