"""What the page-rendering scripts share: save a reference, write its page or check that the page is its render."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def save_reference(path: Path, result: dict[str, Any]) -> None:
    """``result`` as the committed reference (indented, keys sorted, a final newline)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def write_or_check(page: Path, text: str, check: bool) -> int:
    """Write ``text`` to ``page`` (0); with ``check``, write nothing and return 1 when the page is not ``text``."""
    name = f"{page.parent.name}/{page.name}"
    if check:
        same = page.is_file() and page.read_text(encoding="utf-8") == text
        print(f"{name} is " + ("the reference's render" if same else "stale: run the script"))
        return 0 if same else 1
    page.write_text(text, encoding="utf-8")
    return 0
