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

from privaudit.core.errors import ConfigError


#: Sane ranges of numbers whatever their owner (suite files, ``--param``, CLI flags), by field name: a value
#: outside them would hang (epochs for ever), exhaust memory (accountant steps) or cannot be a seed. One table,
#: so a new defense, attack or command that names a field so inherits the check.
MAX_EPOCHS = 10 ** 6
MAX_ACCOUNTED_STEPS = 10 ** 6  # the PLD/PRV accountants need memory linear in T: ~3.4 GB at 2e5 steps
MAX_SEED = 2 ** 32 - 1
MAX_BUDGET_SECONDS = 7 * 24 * 3600.0
MAX_INT = 2 ** 31 - 1  # any other integer setting (a count, a width): more could not be allocated or looped over
RANGES: dict[str, tuple[float, float]] = {
    "epochs": (1, MAX_EPOCHS), "local_steps": (1, MAX_EPOCHS), "rounds": (1, MAX_EPOCHS),
    "steps": (1, MAX_ACCOUNTED_STEPS), "seed": (0, MAX_SEED), "feature_seed": (0, MAX_SEED),
    "budget_seconds": (0, MAX_BUDGET_SECONDS),
}


def check_range(field_name: str, value: float) -> None:
    """ConfigError unless ``value`` lies in the range :data:`RANGES` gives the field's last name (integers
    otherwise within +-:data:`MAX_INT`)."""
    name = field_name.rsplit(".", 1)[-1].lstrip("-").replace("-", "_")
    lo, hi = RANGES.get(name, (-MAX_INT, MAX_INT) if isinstance(value, int) else (-math.inf, math.inf))
    if not lo <= value <= hi:
        raise ConfigError(f"{field_name}: must lie in [{lo:g}, {hi:g}], got {value!r}")


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
    for k in params:  # after the owner's own checks (their messages are more specific), the shared sane ranges
        value = getattr(config, k)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            check_range(f"{prefix}.{k}", value)
    return config
