"""The claims' checks as last computed, committed beside the code (``verdicts.json``): ``privaudit claims`` reads them
instead of recomputing every accountant on every claim (about two minutes on two CPU cores), as long as nothing they
depend on has changed.

A check (:func:`~privaudit.accountants.paper_claims.check.check_claim`) depends only on code: privaudit's modules it
loads (accountants and core) and the libraries that do its accounting (dp-accounting, Opacus). ``verdicts.json``
records each such module's fingerprint (SHA-256 of its syntax tree without docstrings: comments, docstrings and
layout do not count) and the libraries' versions; :func:`cached_checks` uses it only while every one still matches,
and otherwise says what changed (the command then computes afresh, with a progress bar). NumPy, SciPy and Python
are recorded beside them, not compared: they move the values in their last bits, not at the four digits shown.
``scripts/claims_cache.py`` writes the file; ``tests/test_claims_cache.py`` checks that it matches the code and
that a fresh computation gives it.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

CACHE = Path(__file__).with_name("verdicts.json")
#: The libraries whose versions the cache is keyed on (their code computes the accountants' numbers).
KEYED = ("dp-accounting", "opacus")
#: Recorded beside them for the reader, not compared.
RECORDED = ("numpy", "scipy")
#: The privaudit packages a check can load (the layers below accountants and accountants itself).
LAYERS = ("privaudit.accountants", "privaudit.core")


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(getattr(node.body[0], "value", None),
                                                                       ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
    return tree


def fingerprint(source: str) -> str:
    """SHA-256 of the module's syntax tree, docstrings removed (what it does, not how it is written or told)."""
    tree = _without_docstrings(ast.parse(source))
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode("utf-8")).hexdigest()


def module_fingerprint(name: str) -> str | None:
    """The fingerprint of the module ``name`` as installed now (None: it is gone or has no source)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py") or not Path(origin).is_file():
        return None
    return fingerprint(Path(origin).read_text(encoding="utf-8"))


#: Loaded but computing nothing a check says: this module, and the version string (it moves with every release).
UNKEYED = (__name__, "privaudit.core.version")


def loaded_modules(exclude: Iterable[str] = UNKEYED) -> dict[str, str]:
    """Every privaudit accountants or core module loaded in this process, with its fingerprint."""
    names = sorted(m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in LAYERS)
                   and m not in set(exclude))
    return {name: module_fingerprint(name) or "" for name in names}


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """The keyed libraries' versions, and the recorded ones with Python's."""
    return {"keyed": {lib: _version(lib) for lib in KEYED},
            "recorded": {**{lib: _version(lib) for lib in RECORDED},
                         "python": ".".join(map(str, sys.version_info[:2]))}}


def stale(cache: dict[str, Any]) -> str | None:
    """Why ``cache`` does not hold this code's checks (a module changed or is gone, a keyed library's version
    differs), or None when it does."""
    keyed = environment()["keyed"]
    for lib, version in (cache.get("environment") or {}).get("keyed", {}).items():
        if keyed.get(lib) != version:
            return f"computed with {lib} {version}, this is {keyed.get(lib)}"
    changed = [name for name, fp in (cache.get("modules") or {}).items() if module_fingerprint(name) != fp]
    if changed or not cache.get("modules"):
        return f"{', '.join(changed[:3]) or 'no module recorded'}{' ...' if len(changed) > 3 else ''} changed since"
    return None


def read_cache(path: Path | None = None) -> tuple[dict[str, dict[str, Any]], str | None]:
    """(the cached checks by claim id, None) when ``path`` (default :data:`CACHE`) matches this code; ({}, why not)
    otherwise."""
    path = CACHE if path is None else path
    try:
        cache = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {}, f"no committed checks could be read ({type(exc).__name__})"
    why = stale(cache)
    return ({}, why) if why else (dict(cache.get("claims") or {}), None)


def build_cache(checks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The file's content for ``checks`` (claim id -> its check's ``to_dict()``), computed in this process."""
    return {"about": "privaudit claims' checks, read while the modules and keyed libraries below are unchanged "
                     "(accountants/paper_claims/cache.py); written by scripts/claims_cache.py",
            "environment": environment(), "modules": loaded_modules(), "claims": checks}


def differences(cached: Any, fresh: Any, *, rel: float = 1e-9, where: str = "") -> list[str]:
    """Where two checks' JSON differ: numbers beyond ``rel`` (relative; one CPU's last bits are not a change), any
    other value, key or length exactly."""
    if isinstance(cached, bool) or isinstance(fresh, bool) or not (
            isinstance(cached, (int, float)) and isinstance(fresh, (int, float))):
        if isinstance(cached, dict) and isinstance(fresh, dict):
            if cached.keys() != fresh.keys():
                return [f"{where}: keys {sorted(cached)} != {sorted(fresh)}"]
            return [d for k in cached for d in differences(cached[k], fresh[k], rel=rel, where=f"{where}.{k}")]
        if isinstance(cached, list) and isinstance(fresh, list) and len(cached) == len(fresh):
            return [d for i, (a, b) in enumerate(zip(cached, fresh))
                    for d in differences(a, b, rel=rel, where=f"{where}[{i}]")]
        return [] if cached == fresh else [f"{where}: {cached!r} != {fresh!r}"]
    if abs(cached - fresh) <= rel * max(abs(cached), abs(fresh)):
        return []
    return [f"{where}: {cached!r} != {fresh!r}"]
