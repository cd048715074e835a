"""Packaging: shipped suites found by name from any directory, LICENSE, dependency floors the code supports."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from privaudit.audit.cli import main
from privaudit.audit.suite.shipped import resolve_suite, shipped_suites
from privaudit.audit.suite.load import load_suite
from privaudit.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def test_every_suite_file_is_shipped_and_listed(capsys):
    assert set(shipped_suites()) == {p.stem for p in (ROOT / "suites").glob("*.toml")} >= {"quickstart"}
    assert main(["suites", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert set(listed) == set(shipped_suites()) and listed["quickstart"]["description"]


def test_a_bare_name_resolves_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_suite("quickstart") == shipped_suites()["quickstart"]
    assert load_suite("quickstart").name == "quickstart"
    with pytest.raises(ConfigError, match="neither a file nor a shipped suite; shipped: .*quickstart"):
        resolve_suite("quickstrat")
    assert resolve_suite("suites/quickstart.toml") == Path("suites/quickstart.toml")  # a path stays a path


def test_license_and_dependency_floors():
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    deps = {re.split(r"[<>=;\[ ]", d, maxsplit=1)[0]: d for d in project["dependencies"]}
    assert "torchvision" not in deps  # not imported anywhere: dataset formats are read by core/datasets/formats.py
    assert deps["numpy"].startswith("numpy>=1.26")
    # numpy 2-only functions would break the declared floor
    packages = ("core", "accountants", "defenses", "attacks", "audit", "privaudit")
    numpy2_only = re.compile(r"np\.(trapezoid|unstack|cumulative_sum)\(")
    offenders = [str(p.relative_to(ROOT)) for pkg in packages for p in (ROOT / pkg).rglob("*.py")
                 if numpy2_only.search(p.read_text())]
    assert offenders == []


def built_wheel(tmp_path: Path) -> set[str]:
    """The file names in a wheel built from this checkout (no isolation: the venv's setuptools)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(ROOT),
                    "-w", str(tmp_path)], check=True, cwd=tmp_path, capture_output=True)
    (wheel,) = tmp_path.glob("privaudit-*.whl")
    return set(zipfile.ZipFile(wheel).namelist())


def test_the_wheel_installs_one_import_name_with_the_suites_license_and_front_door(tmp_path):
    """Everything the wheel installs lies under ``privaudit/`` (the layers as ``privaudit.core``, ...) or its
    dist-info: nothing else lands at the top of site-packages."""
    names = built_wheel(tmp_path)
    from privaudit.core.version import __version__

    assert {n.split("/")[0] for n in names} == {"privaudit", f"privaudit-{__version__}.dist-info"}
    layers = ("core", "accountants", "defenses", "attacks", "audit")
    assert {f"privaudit/{layer}/__init__.py" for layer in layers} <= names
    sources = {str(p.relative_to(ROOT)) for layer in layers for p in (ROOT / layer).rglob("*.py")}
    assert {f"privaudit/{s}" for s in sources} <= names  # every module of every layer, subpackages included
    assert {f"privaudit/audit/suites/{p.name}" for p in (ROOT / "suites").glob("*.toml")} <= names
    assert "privaudit/accountants/paper_claims/verdicts.json" in names  # what privaudit claims reads
    assert "privaudit/__init__.py" in names and any(n.endswith("licenses/LICENSE") for n in names)


def test_the_floor_script_installs_every_declared_floor():
    """scripts/floor_test.sh pins each runtime dependency at its declared floor (the combination tested)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = {m.group(1).lower(): m.group(2) for d in project["dependencies"] if ";" not in d
              for m in [re.fullmatch(r"([A-Za-z0-9_-]+)>=([0-9.]+)", d)] if m}
    script = (ROOT / "scripts" / "floor_test.sh").read_text()
    pinned = dict(re.findall(r"([A-Za-z0-9_-]+)==([0-9.]+)", script.split("FLOORS=(", 1)[1].split(")", 1)[0]))

    def padded(version: str) -> tuple[int, ...]:
        parts = tuple(int(p) for p in version.split("."))
        return parts + (0,) * (3 - len(parts))

    assert set(pinned) == set(floors) and len(floors) == 11
    assert {name: padded(v) for name, v in pinned.items()} == {name: padded(v) for name, v in floors.items()}


def test_the_version_is_written_in_one_place():
    """core/version.py holds the version; pyproject.toml reads it, the front door, the harness (``--version``,
    each report) and the installed metadata give the same string, and no other module assigns one."""
    from importlib.metadata import version

    import privaudit
    from privaudit.audit import __version__ as harness
    from privaudit.core.version import __version__

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "privaudit.core.version.__version__"}
    assert privaudit.__version__ == harness == version("privaudit") == __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    assigned = [str(p.relative_to(ROOT)) for pkg in ("core", "accountants", "defenses", "attacks", "audit", "privaudit")
                for p in (ROOT / pkg).rglob("*.py") if re.search(r"^__version__\s*=", p.read_text(), re.M)]
    assert assigned == ["core/version.py"]
