"""Errors that mean "bad input" (exit status 2) as opposed to a failure while running (status 3)."""

from __future__ import annotations

import errno
import math
from typing import Iterable

#: The errors that mean "no space left": on the disk (ENOSPC) or in the user's quota (EDQUOT).
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class ConfigError(ValueError):
    """Invalid user input: a bad CLI flag, suite key, dataset directory or function argument.

    The message is one line that names the offending field and, where there is a closed set, the
    accepted values. The CLI prints it as ``privaudit: error: <message>`` and exits with status 2.
    """


class RunStopped(BaseException):
    """The run must end now, whatever catches ``Exception`` on the way (a cell's error handler turns failures
    into failed cells; a worker pool sends a task's exception back to the parent): like KeyboardInterrupt, it
    derives from BaseException, so it passes those handlers, in the process that raised it and, through the
    pool, in the run's main process. The CLI prints :meth:`line` and exits with :attr:`exit_code`."""

    exit_code = 3

    def line(self) -> str:
        return f"privaudit: {self}"


class Terminated(RunStopped):
    """A termination signal (SIGTERM, SIGHUP) arrived: the run stops its workers, writes nothing more and exits
    with 128 + the signal's number (143 for SIGTERM), as a process killed by it would."""

    def __init__(self, signum: int, hint: str = ""):
        super().__init__(signum, hint)
        self.signum, self.hint = signum, hint

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        return 128 + self.signum

    def __str__(self) -> str:
        import signal

        return (f"terminated by {signal.Signals(self.signum).name}: stopped, nothing half-written left"
                + (f"; {self.hint}" if self.hint else ""))


class DiskFull(RunStopped):
    """A write found no space left (ENOSPC, EDQUOT). The atomic writers raise it after removing their temporary
    file, so no file was replaced; bad conditions rather than a bug, hence exit status 2 and one line."""

    exit_code = 2

    def __init__(self, path: str, strerror: str):
        super().__init__(path, strerror)
        self.path, self.strerror = path, strerror

    def __str__(self) -> str:
        return (f"cannot write {self.path}: {self.strerror}; no file was replaced (free some space, then run again: "
                "privaudit run --resume keeps what finished)")

    def line(self) -> str:
        return f"privaudit: error: {self}"


def one_of(field: str, value: object, accepted: Iterable[object]) -> ConfigError:
    """Build the standard "unknown value" error: names the field, the value and the accepted set."""
    accepted = list(accepted)
    return ConfigError(f"{field}: unknown value {value!r}; accepted: {', '.join(map(str, accepted))}")


def require(condition: bool, message: str) -> None:
    """Raise ``ConfigError(message)`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(message)


def check_positive(field: str, value: float, *, allow_zero: bool = False, finite: bool = False) -> None:
    """Validate a number that must be > 0 (or >= 0 with ``allow_zero``), and finite with ``finite``."""
    ok = value >= 0 if allow_zero else value > 0
    if not ok or (finite and not math.isfinite(value)):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{field}: must be {'a finite number ' if finite else ''}{bound}, got {value!r}")


def check_probability(field: str, value: float, *, open_interval: bool = True) -> None:
    """Validate a number in (0, 1) (or [0, 1] with ``open_interval=False``)."""
    ok = 0 < value < 1 if open_interval else 0 <= value <= 1
    if not ok:
        interval = "(0, 1)" if open_interval else "[0, 1]"
        raise ConfigError(f"{field}: must lie in {interval}, got {value!r}")
