"""Every shipped suite validates (the GPU suites with digits in place of their local CIFAR-10 directory)."""

from pathlib import Path

import pytest

from privaudit.audit.suite.load import parse_suite

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

SUITES = sorted((Path(__file__).resolve().parents[1] / "suites").glob("*.toml"))


@pytest.mark.parametrize("path", SUITES, ids=[p.stem for p in SUITES])
def test_shipped_suite_is_valid(path):
    raw = tomllib.loads(path.read_text())
    gpu = raw.get("datasets") != ["digits"]
    if gpu:
        raw["datasets"] = ["digits"]  # the suite's own data is a local directory this test does not have
    suite = parse_suite(raw, str(path))
    assert suite.cells() and suite.description
    if not gpu:
        assert suite.out == f"reports/{suite.name}"


def test_quickstart_covers_the_baselines_and_all_five_paper_methods():
    suite = parse_suite(tomllib.loads((SUITES[0].parent / "quickstart.toml").read_text()), "quickstart.toml")
    names = {d.name for d in suite.defenses}
    assert {"nonprivate", "alm", "dp-gcl", "logit-dp", "dp-fedemb"} <= names
    assert names & {"dpcl-simclr", "dpcl-barlow"}
    assert suite.datasets == ("digits",) and {a.name for a in suite.attacks} >= {"loss", "lira"}
