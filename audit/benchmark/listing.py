"""The utility claims as ``privaudit claims`` lists them beside the privacy claims, judged from the committed
reference run (``reports/reference/benchmark-fashion-mnist/benchmark.json`` in a checkout; the wheel carries a copy
beside this module)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from privaudit.audit.benchmark.claims import utility_claims
from privaudit.audit.benchmark.verdict import judge

REFERENCE = "reports/reference/benchmark-fashion-mnist/benchmark.json"


def reference_path() -> Path | None:
    """The committed benchmark reference: the wheel's copy, else the checkout's; None when neither is here."""
    here = Path(__file__).resolve()
    for path in (here.with_name("benchmark.json"), here.parents[2] / REFERENCE):
        if path.is_file():
            return path
    return None


def load_committed() -> dict[str, Any] | None:
    path = reference_path()
    return None if path is None else json.loads(path.read_text(encoding="utf-8"))


def utility_rows(paper: str | None = None) -> list[list[str]]:
    """One row per utility claim (of ``paper``): id, paper and source, statement, verdict."""
    claims = [c for c in utility_claims() if paper is None or c.paper == paper]
    reference = load_committed()
    if reference is None:
        return [[c.id, f"{c.paper} {c.source}", c.statement, "no benchmark reference here"] for c in claims]
    return [[v.claim.id, f"{v.claim.paper} {v.claim.source}", v.claim.statement, v.verdict]
            for v in judge(reference) if paper is None or v.claim.paper == paper]


UTILITY_HEADERS = ["claim", "paper", "statement", "verdict"]
UTILITY_NOTE = ("\nutility claims, judged from the benchmark's committed reference run (docs/benchmark.md: what was "
                "measured and its intervals):")
