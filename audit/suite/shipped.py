"""The audit suites shipped with privaudit, and resolving a bare suite name (``privaudit run quickstart``).

The suites live in the repository's ``suites/`` directory (the project's one copy). A wheel carries them
as package data in ``audit/suites/`` (``setup.py`` copies them there at build time), so an installed
privaudit finds them from any directory; a source checkout (editable install, ``PYTHONPATH``) reads
``suites/`` beside the packages.
"""

from __future__ import annotations

from pathlib import Path

from privaudit.core.errors import ConfigError

_PACKAGE_DIR = Path(__file__).resolve().parents[1] / "suites"   # installed: package data (privaudit/audit/suites)
_CHECKOUT_DIR = Path(__file__).resolve().parents[2] / "suites"  # source checkout


def suites_dir() -> Path | None:
    """The directory holding the shipped suites (package data first, then the checkout), or None."""
    for d in (_PACKAGE_DIR, _CHECKOUT_DIR):
        if d.is_dir() and any(d.glob("*.toml")):
            return d
    return None


def shipped_suites() -> dict[str, Path]:
    """Shipped suite name (the file's stem) -> its file, sorted by name."""
    d = suites_dir()
    return {} if d is None else {p.stem: p for p in sorted(d.glob("*.toml"))}


def resolve_suite(name_or_path: str | Path) -> Path:
    """A suite file: ``name_or_path`` itself when it exists (or looks like a path), else the shipped suite of
    that name (``quickstart`` -> ``.../suites/quickstart.toml``)."""
    path = Path(name_or_path)
    if path.exists() or path.suffix or len(path.parts) > 1:
        return path
    shipped = shipped_suites()
    if str(name_or_path) in shipped:
        return shipped[str(name_or_path)]
    raise ConfigError(f"suite: {str(name_or_path)!r} is neither a file nor a shipped suite; shipped: "
                      f"{', '.join(shipped) or 'none'} (privaudit suites lists them)")
