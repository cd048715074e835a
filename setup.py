"""Build hook: one installed import name, ``privaudit``, over the repository's top-level folders.

The repository keeps its layers at the top (``core/``, ``accountants/``, ``defenses/``, ``attacks/``,
``audit/``, ``privaudit/``, as the layout card fixes them); the wheel installs them as ``privaudit.core``,
``privaudit.accountants``, ... through setuptools' ``package_dir`` mapping, so nothing but ``privaudit`` (and its
dist-info) lands at the top of site-packages. Editable installs map the same names to the folders.

``suites/`` stays the project's one copy of the suites; the wheel carries them as package data in
``privaudit/audit/suites/`` so that ``privaudit run quickstart`` works after a non-editable install, from any
directory (:mod:`privaudit.audit.suite.shipped`). The papers' claims' committed checks
(``accountants/paper_claims/verdicts.json``, what ``privaudit claims`` reads) ship as package data too. Everything
else is in ``pyproject.toml``.
"""

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
LAYERS = ("core", "accountants", "defenses", "attacks", "audit")


def installed_packages() -> tuple[list[str], dict[str, str]]:
    """Every package under its installed name, and the folder each layer maps from."""
    packages = ["privaudit"]
    for layer in LAYERS:
        packages += [f"privaudit.{name}" for name in find_packages(str(ROOT), include=[layer, f"{layer}.*"])]
    return packages, {"privaudit": "privaudit", **{f"privaudit.{layer}": layer for layer in LAYERS}}


BENCHMARK = ROOT / "reports" / "reference" / "benchmark-fashion-mnist" / "benchmark.json"


class BuildPyWithSuites(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "privaudit" / "audit" / "suites"
        target.mkdir(parents=True, exist_ok=True)
        for suite in sorted(ROOT.joinpath("suites").glob("*.toml")):
            self.copy_file(str(suite), str(target / suite.name))
        if BENCHMARK.is_file():  # the benchmark's reference, which `privaudit claims` judges the utility claims from
            self.copy_file(str(BENCHMARK), str(Path(self.build_lib) / "privaudit" / "audit" / "benchmark" /
                                              BENCHMARK.name))


PACKAGES, PACKAGE_DIR = installed_packages()
setup(packages=PACKAGES, package_dir=PACKAGE_DIR, cmdclass={"build_py": BuildPyWithSuites},
      package_data={"privaudit.accountants.paper_claims": ["verdicts.json"]})
