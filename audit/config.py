"""Hyper-parameter dataclasses built from plain dicts (suite files, ``--param``), with validation.

Defenses and attacks declare their settings as frozen dataclasses with defaults; :func:`build_config`
turns user input into one, rejecting unknown keys and wrongly typed values with a one-line
``ConfigError`` that names the key and the accepted keys, then runs the dataclass's ``validate()``.
"""

from __future__ import annotations

import typing
from dataclasses import fields
from typing import Any, Mapping

from audit.errors import ConfigError


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
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{field_name}: expected a list, got {value!r}")
        return tuple(value)
    if target is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{field_name}: expected true or false, got {value!r}")
        return value
    if target in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{field_name}: expected a number, got {value!r}")
        if target is int and float(value) != int(value):
            raise ConfigError(f"{field_name}: expected an integer, got {value!r}")
        return target(value)
    if target is str:
        if not isinstance(value, str):
            raise ConfigError(f"{field_name}: expected a string, got {value!r}")
        return value
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
