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
    import privaudit.audit.score_audit

    result = doctest.testmod(privaudit.audit.score_audit)
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
    from privaudit.attacks.bounds import gdp_epsilon

    assert a.eps_lower_bound < gdp_epsilon(2.0, 1e-5) == pytest.approx(10.0, abs=0.01)  # sound: below the truth
    assert (tmp_path / "my-audit" / "report.html").is_file()


def test_readme_names_every_public_name():
    section = (ROOT / "README.md").read_text().split("## Python API", 1)[1].split("\n## ", 1)[0]
    missing = [n for n in privaudit.__all__ if n != "__version__" and f"`{n}`" not in section]
    assert missing == []
