"""The ``privaudit`` command line: one entry point, one subcommand per module in ``audit.commands``.

Exit codes: 0 success, 1 gate failed (``run``), 2 bad input (one line on stderr naming the problem),
3 error while running (traceback on stderr).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from typing import Sequence

from audit import __version__
from core.errors import ConfigError

# Each module defines ``register(subparsers)`` which adds its subcommand and sets ``func``.
COMMANDS = (
    "audit.commands.datasets",
    "audit.commands.train",
    "audit.commands.attack",
    "audit.commands.run",
    "audit.commands.report",
    "audit.commands.epsilon",
    "audit.commands.calibrate",
    "audit.commands.claims",
    "audit.commands.alm_curve",
    "audit.commands.sensitivity",
)

EXIT_OK, EXIT_GATE_FAILED, EXIT_BAD_INPUT, EXIT_RUN_ERROR = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and raise ConfigError (exit 2) instead of exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="privaudit", description="Privacy auditing for differentially private "
                     "representation learning: train defenses, attack them, check their claims.")
    parser.add_argument("--version", action="version", version=f"privaudit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in COMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        code = args.func(args)
        return EXIT_OK if code is None else int(code)
    except ConfigError as exc:
        print(f"privaudit: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("privaudit: interrupted", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 - the CLI boundary reports any failure as a run error
        traceback.print_exc()
        return EXIT_RUN_ERROR


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
