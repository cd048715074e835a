"""How the benchmark page writes a number: an accuracy in percent, with its interval on the test images."""

from __future__ import annotations

from typing import Any, Mapping

from privaudit.audit.benchmark.stats import accuracy_interval


def pct(x: float | None, digits: int = 1) -> str:
    """A fraction in percent (``-`` for None)."""
    return "-" if x is None else f"{100 * x:.{digits}f}"


def with_interval(cell: Mapping[str, Any] | None, metric: str, source: str = "utility") -> str:
    """The accuracy in percent with its 95% Clopper-Pearson interval on the test images (``source``: the cell's
    ``utility`` or its untrained ``init``)."""
    if not cell or cell.get("error"):
        return "-"
    acc = (cell.get(source) or {}).get(metric)
    n = ((cell.get("vs_init") or {}).get(metric) or {}).get("n")
    if acc is None:
        return "-"
    if not n:
        return pct(acc)
    low, high = accuracy_interval(round(acc * n), int(n))
    return f"{pct(acc)} [{pct(low)}, {pct(high)}]"
