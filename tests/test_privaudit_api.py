"""The front door ``privaudit``: its doctests and the README's Python API example run; imports are lazy."""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
from pathlib import Path

import pytest

import privaudit

ROOT = Path(__file__).resolve().parents[1]


def test_front_door_doctests_pass():
    result = doctest.testmod(privaudit, optionflags=doctest.ELLIPSIS, raise_on_error=False)
    assert result.attempted >= 8 and result.failed == 0, result


def test_score_audit_doctest_passes():
    import privaudit.audit.user.scores.score_audit

    result = doctest.testmod(privaudit.audit.user.scores.score_audit)
    assert result.attempted >= 4 and result.failed == 0, result


def test_every_public_name_resolves():
    for name in privaudit.__all__:
        assert getattr(privaudit, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        privaudit.nope  # noqa: B018


def test_import_is_lazy():
    code = "import sys, privaudit; print(int('torch' in sys.modules), int('privaudit.audit' in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""}).stdout.split()
    assert out == ["0", "0"]


def readme_api_example() -> str:
    section = (ROOT / "README.md").read_text().split("## Python API", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return block


def test_readme_python_api_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(readme_api_example(), "README.md#python-api", "exec"), namespace)
    a = namespace["result"]
    assert abs(a.auc - 0.92) < 0.01 and abs(a.eps_lower_bound - 3.7) < 0.1  # what the example's comment says
    from privaudit.attacks.bounds.gdp import gdp_epsilon

    assert a.eps_lower_bound < gdp_epsilon(2.0, 1e-5) == pytest.approx(10.0, abs=0.01)  # sound: below the truth
    assert (tmp_path / "my-audit" / "report.html").is_file()


def test_readme_names_every_public_name():
    section = (ROOT / "README.md").read_text().split("## Python API", 1)[1].split("\n## ", 1)[0]
    missing = [n for n in privaudit.__all__ if n != "__version__" and f"`{n}`" not in section]
    assert missing == []


@pytest.mark.parametrize("old, new", [("check_claims", "check_sensitivity_claims"),
                                      ("summarize_scores", "score_metrics")])
def test_renamed_names_warn_and_still_work(old, new):
    """A renamed public name stays for one release: it warns, names its replacement, and is what it was."""
    with pytest.warns(DeprecationWarning, match=rf"privaudit\.{old} is deprecated .* use privaudit\.{new}"):
        value = getattr(privaudit, old)
    with pytest.warns(DeprecationWarning):  # every use warns, not only the first
        assert getattr(privaudit, old) is value
    assert old not in privaudit.__all__ and new in privaudit.__all__


def test_score_metrics_takes_the_sides_audit_scores_takes_and_keys_tprs_by_number():
    import numpy as np

    rng = np.random.default_rng(1)
    members, nonmembers = rng.normal(1.0, 1.0, 1000), rng.normal(0.0, 1.0, 1000)
    m = privaudit.score_metrics(members, nonmembers)
    scores = np.r_[members, nonmembers]
    membership = np.r_[np.ones(1000, bool), np.zeros(1000, bool)]
    with pytest.warns(DeprecationWarning):
        old = privaudit.summarize_scores(scores, membership)
    assert m.to_dict() == old and 0.7 < m.auc < 0.8
    assert m.tpr_at(0.01) == old["tpr_at_fpr"]["0.01"] and m.tpr_at_fpr[0.1] == old["tpr_at_fpr"]["0.1"]
    with pytest.raises(privaudit.ConfigError, match="fpr: 0.05 is not a computed target; accepted: 0.001, 0.01, 0.1"):
        m.tpr_at(0.05)
    audit = privaudit.audit_scores(members, nonmembers, delta=1e-5)
    assert audit.tpr_at(0.01) == m.tpr_at(0.01) and audit.auc == pytest.approx(m.auc)
