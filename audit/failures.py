"""The one line a failed part of a run (a cell, a worker, a side check, a search setting) leaves for the
report and the gate."""

from __future__ import annotations


def failure_line(what: str, exc: BaseException) -> str:
    """``"<what>: <exception type>: <first line of its message>"``."""
    return f"{what}: {type(exc).__name__}: {exc}".splitlines()[0]
