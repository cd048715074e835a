"""Hyper-parameter dataclasses built from plain dicts (suite files, ``--param``), with validation.

Defenses and attacks declare their settings as frozen dataclasses with defaults; :func:`build_config`
turns user input into one, rejecting unknown keys and wrongly typed values with a one-line
``ConfigError`` that names the key and the accepted keys, then runs the dataclass's ``validate()``.
"""

from __future__ import annotations

import math
import typing
from dataclasses import fields
from typing import Any, Mapping

from core.errors import ConfigError


def _expect(field_name: str, ok: bool, what: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{field_name}: expected {what}, got {value!r}")


def coerce(field_name: str, value: Any, annotation: Any) -> Any:
    """Coerce a suite/CLI value to a config field's declared type, or raise ConfigError."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if value is None:
        if type(None) in typing.get_args(annotation):
            return None
        raise ConfigError(f"{field_name}: must not be empty")
    target = args[0] if origin is typing.Union or (origin is not None and str(origin) == "types.UnionType") else annotation
    if target is tuple or typing.get_origin(target) is tuple:
        _expect(field_name, isinstance(value, (list, tuple)), "a list", value)
        return tuple(value)
    if target is bool:
        _expect(field_name, isinstance(value, bool), "true or false", value)
        return value
    if target in (int, float):
        _expect(field_name, isinstance(value, (int, float)) and not isinstance(value, bool), "a number", value)
        _expect(field_name, math.isfinite(value), "a finite number", value)
        _expect(field_name, target is float or (math.isfinite(value) and float(value) == int(value)), "an integer", value)
        return target(value)
    if target is str:
        _expect(field_name, isinstance(value, str), "a string", value)
    return value


def build_config(config_cls: type, params: Mapping[str, Any], *, owner: str, prefix: str) -> Any:
    """Build ``config_cls`` from ``params``; ``owner`` names it in unknown-key errors, ``prefix`` in field errors."""
    hints = typing.get_type_hints(config_cls)
    accepted = [f.name for f in fields(config_cls)]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ConfigError(f"{owner}: unknown parameter {unknown[0]!r}; accepted: {', '.join(accepted)}")
    config = config_cls(**{k: coerce(f"{prefix}.{k}", v, hints[k]) for k, v in params.items()})
    validate = getattr(config, "validate", None)
    if validate is not None:
        validate()
    return config
