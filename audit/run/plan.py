"""One run's settings, fixed before the output directory is locked, and the lines it logs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from privaudit.audit.suite.model import CellSpec, Suite


def log(message: str, progress: bool) -> None:
    """``message`` on its own line above the progress bar, when ``progress`` is on."""
    if progress:
        from tqdm.auto import tqdm

        tqdm.write(message)


def only_selects(only: Sequence[str], what: str) -> bool:
    """Whether ``--only`` (empty: everything) selects the suite's ``what`` (``sensitivity``, ``step_audit``)."""
    return not only or any(p in (what, "*") for p in only)


@dataclass(frozen=True)
class RunPlan:
    """One run's settings, fixed before the output directory is locked."""

    suite: Suite
    out: Path
    cells: list[CellSpec]  # the cells --only selects (every cell without it)
    only: list[str]
    run_sens: bool  # the sensitivity checks run (or are reused) in this run
    run_step: bool  # the step audits run (or are reused) in this run
    resume: bool
    executor: str
    progress: bool
    started: float
    jobs: int
