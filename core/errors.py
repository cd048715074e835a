"""Errors that mean "bad input" (exit status 2) as opposed to a failure while running (status 3)."""

from __future__ import annotations

from typing import Iterable


class ConfigError(ValueError):
    """Invalid user input: a bad CLI flag, suite key, dataset directory or function argument.

    The message is one line that names the offending field and, where there is a closed set, the
    accepted values. The CLI prints it as ``privaudit: error: <message>`` and exits with status 2.
    """


def one_of(field: str, value: object, accepted: Iterable[object]) -> ConfigError:
    """Build the standard "unknown value" error: names the field, the value and the accepted set."""
    accepted = list(accepted)
    return ConfigError(f"{field}: unknown value {value!r}; accepted: {', '.join(map(str, accepted))}")


def require(condition: bool, message: str) -> None:
    """Raise ``ConfigError(message)`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(message)


def check_positive(field: str, value: float, *, allow_zero: bool = False) -> None:
    """Validate a number that must be > 0 (or >= 0 with ``allow_zero``)."""
    ok = value >= 0 if allow_zero else value > 0
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{field}: must be {bound}, got {value!r}")


def check_probability(field: str, value: float, *, open_interval: bool = True) -> None:
    """Validate a number in (0, 1) (or [0, 1] with ``open_interval=False``)."""
    ok = 0 < value < 1 if open_interval else 0 <= value <= 1
    if not ok:
        interval = "(0, 1)" if open_interval else "[0, 1]"
        raise ConfigError(f"{field}: must lie in {interval}, got {value!r}")
