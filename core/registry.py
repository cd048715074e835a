"""Registries: names mapped to ``module:attr`` references, imported on first use.

One mechanism serves every family (defenses, attacks, accountants, executors): a registry is a plain
``dict`` of name -> reference (so ``name in REGISTRY`` and ``", ".join(REGISTRY)`` list the accepted
names), and :meth:`Registry.load` imports the referenced object only when it is asked for, so listing
the names never imports torch or a heavy module. :func:`load_reference` is the same import for a
``module:attr`` reference given directly (plugins named in a suite).
"""

from __future__ import annotations

import importlib
from typing import Any, Generic, Mapping, TypeVar

from privaudit.core.errors import ConfigError, one_of


def _import(reference: str) -> Any:
    module, _, attr = reference.partition(":")
    return getattr(importlib.import_module(module), attr)


def load_reference(reference: str, *, field: str = "reference") -> Any:
    """Import a user-given ``module:attr`` (a plugin); malformed or missing is a ConfigError naming ``field``."""
    module, sep, attr = reference.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"{field} {reference!r} is not of the form module:attr")
    try:
        return _import(reference)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"cannot load {field} {reference!r}: {exc}{_path_hint(module, exc.name)}") from None
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load {field} {reference!r}: {exc}") from None


def _path_hint(module: str, missing: str | None) -> str:
    """Where to point PYTHONPATH when the module a user named is not importable: the current directory when the
    module's file or package is there, else the directory that must hold it."""
    import os

    if not missing or not module.startswith(missing):
        return ""  # a module the user's module imports is missing: an installation problem, not a path one
    top = missing.split(".")[0]
    here = os.getcwd()
    if os.path.exists(os.path.join(here, top + ".py")) or os.path.isdir(os.path.join(here, top)):
        return f"; {top} is in {here}: put that directory on the path (PYTHONPATH={here})"
    return (f"; put the directory that holds {top}.py (or the package folder {top}/) on the path, e.g. "
            f"PYTHONPATH=/path/to/that/directory")


T = TypeVar("T")


class Registry(dict[str, str], Generic[T]):
    """Names of one ``kind`` (e.g. "defense") mapped to ``module:attr`` references to a ``T``, loaded lazily."""

    def __init__(self, kind: str, entries: Mapping[str, str]):
        super().__init__(entries)
        self.kind = kind

    def load(self, name: str) -> T:
        """The object registered as ``name`` (imported now); an unknown name lists the accepted ones."""
        if name not in self:
            raise one_of(self.kind, name, self)
        return _import(self[name])

    def create(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``self.load(name)(*args, **kwargs)``."""
        return self.load(name)(*args, **kwargs)
