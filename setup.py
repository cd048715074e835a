"""Build hook: ship the repository's ``suites/*.toml`` as package data in ``audit/suites/``.

``suites/`` stays the project's one copy of the suites (a top-level directory, where the README's commands
point); the wheel carries them inside the ``audit`` package so that ``privaudit suites`` and
``privaudit run quickstart`` work after a non-editable install, from any directory
(:mod:`audit.shipped`). Everything else is in ``pyproject.toml``.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithSuites(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "audit" / "suites"
        target.mkdir(parents=True, exist_ok=True)
        for suite in sorted(Path(__file__).resolve().parent.joinpath("suites").glob("*.toml")):
            self.copy_file(str(suite), str(target / suite.name))


setup(cmdclass={"build_py": BuildPyWithSuites})
