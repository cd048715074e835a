"""Argument helpers shared by CLI subcommands."""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
from typing import Any

from privaudit.core.config import MAX_SEED
from privaudit.core.errors import ConfigError
from privaudit.core.io import to_json

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


TABLE_WIDTH = 120  # columns: what a CI log or a terminal shows without wrapping


def _show(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def interval(lo: float | None, hi: float | None, lo_open: bool = False, hi_open: bool = False) -> str:
    """``in [lo, hi]``, ``in (lo, hi)``, ``> lo``, ``<= hi``, ... (the empty string when unbounded)."""
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{_show(lo)}, {_show(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_show(lo)}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {_show(hi)}"
    return ""


def integer(lo: int | None = None, hi: int | None = None):
    """An argparse type: an integer in [lo, hi]. Its ``accepts`` text (``an integer in [lo, hi]``) is what the
    error says and what :func:`document_ranges` appends to the option's help, so the two cannot disagree."""
    accepts = f"an integer {interval(lo, hi)}".strip()

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be {accepts}, got {text}")
        return value
    parse.accepts, parse.bounds = accepts, (lo, hi, False, False)  # type: ignore[attr-defined]
    return parse


def number(*, lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
           positive: bool = False):
    """An argparse type: a finite number (inf and nan are refused) in the interval ``lo``..``hi`` (open at an
    end with ``lo_open`` / ``hi_open``; ``positive``: > 0). Its ``accepts`` text is what the error says and what
    :func:`document_ranges` appends to the option's help."""
    if positive:
        lo, lo_open = 0.0, True
    accepts = f"a number {interval(lo, hi, lo_open, hi_open)}".strip()

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text}")
        below = lo is not None and (value <= lo if lo_open else value < lo)
        above = hi is not None and (value >= hi if hi_open else value > hi)
        if below or above:
            raise argparse.ArgumentTypeError(f"must be {accepts}, got {text}")
        return value
    parse.accepts, parse.bounds = accepts, (lo, hi, lo_open, hi_open)  # type: ignore[attr-defined]
    return parse


#: The probabilities' range (delta): open at both ends.
PROBABILITY = {"lo": 0.0, "hi": 1.0, "lo_open": True, "hi_open": True}


def document_ranges(parser: argparse.ArgumentParser) -> None:
    """Append to each option's help the range its type accepts (``integer``/``number``'s ``accepts``), unless
    the help states it already: ``--help`` then says what the validator checks, in its words."""
    for action in parser._actions:
        accepts = getattr(action.type, "accepts", None)
        if accepts and action.help and action.help is not argparse.SUPPRESS and accepts not in action.help:
            action.help = f"{action.help} ({accepts})"


SEED = integer(0, MAX_SEED)


def add_data_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", default="digits", help="dataset name (default: digits, embedded)")
    parser.add_argument("--data-dir", default=None,
                        help="directory holding torchvision-format datasets (or set PRIVAUDIT_DATA_DIR)")
    parser.add_argument("--seed", type=SEED, default=0, help="seed for splits, initialisation and noise")


def add_budget_args(parser: argparse.ArgumentParser) -> None:
    """``--target-epsilon``, ``--delta``, ``--noise-multiplier``: the privacy budget of a DP defense."""
    parser.add_argument("--target-epsilon", type=number(positive=True), default=None,
                        help="privacy budget epsilon (DP defenses)")
    parser.add_argument("--delta", type=number(**PROBABILITY), default=None, help="delta (default 1/(N ln N))")
    parser.add_argument("--noise-multiplier", type=number(lo=0.0), default=None,
                        help="fix the noise instead of calibrating")


def budget_from_args(args: argparse.Namespace, defense: Any) -> Any:
    """The :class:`privaudit.defenses.Budget` of :func:`add_budget_args`' options; a private budget for a
    non-private ``defense`` is bad input."""
    from privaudit.defenses import Budget

    budget = Budget(target_epsilon=args.target_epsilon, delta=args.delta, noise_multiplier=args.noise_multiplier)
    if budget.private and not defense.private:
        raise ConfigError(f"--target-epsilon/--noise-multiplier: defense {args.defense!r} is not private")
    return budget


def add_output_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def add_junit_arg(parser: argparse.ArgumentParser) -> None:
    """``--junit FILE``: the verdicts as JUnit XML, one test case per cell and check (:mod:`privaudit.audit.junit`)."""
    parser.add_argument("--junit", default=None, metavar="FILE",
                        help="also write the verdicts as JUnit XML to FILE, one test case per cell and check (for "
                             "a CI system's test report)")


def junit_target(args: argparse.Namespace) -> Any:
    """``--junit``'s path checked before any work (None without it)."""
    from privaudit.audit.junit import check_junit_path

    return None if args.junit is None else check_junit_path(args.junit)


def write_junit_cases(path: Any, name: str, cases: list[Any]) -> None:
    """Write ``cases`` to ``path`` (from :func:`junit_target`; nothing when None) as JUnit XML, atomically."""
    if path is None:
        return
    from privaudit.audit import __version__
    from privaudit.audit.junit import write_junit

    write_junit(path, name, cases, {"privaudit": __version__})


def parse_params(items: list[str] | None) -> dict[str, Any]:
    """Parse ``KEY=VALUE`` pairs; values are read as TOML literals (numbers, booleans, lists) or strings."""
    params: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--param: expected KEY=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip().replace("-", "_")
        try:
            params[key] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            params[key] = raw
    return params


def check_plugins(defense: str, params: dict[str, Any], allow_plugins: bool) -> None:
    """Without ``--allow-plugins``, refuse a ``--defense module:Class`` and a ``--param`` that names code
    (the defense's ``code_params``, e.g. ``user-model``'s factory): importing either runs its code."""
    from privaudit.defenses import DEFENSES

    if allow_plugins:
        return
    if ":" in defense and defense not in DEFENSES:
        raise ConfigError(f"--defense: {defense!r} is a plugin: importing it runs its code; pass --allow-plugins "
                          "to allow it")
    if defense in DEFENSES:
        from privaudit.defenses.registry import defense_class

        for name in getattr(defense_class(defense), "code_params", ()):
            if params.get(name):
                raise ConfigError(f"--param {name}: {params[name]!r} is a plugin: importing it runs its code; pass "
                                  "--allow-plugins to allow it")


def check_attack_plugin(attack: str, allow_plugins: bool) -> None:
    """Without ``--allow-plugins``, refuse an ``--attack module:Class``: importing it runs its code."""
    from privaudit.attacks.registry import is_plugin

    if is_plugin(attack) and not allow_plugins:
        raise ConfigError(f"--attack: {attack!r} is a plugin: importing it runs its code; pass --allow-plugins "
                          "to allow it")


def emit_json(obj: Any, *, one_line: bool = False) -> None:
    """Print ``obj`` as JSON (indented; ``one_line``: on one line, for one object per line)."""
    sys.stdout.write(to_json(obj, indent=None if one_line else 2) + "\n")


def format_table(headers: list[str], rows: list[list[Any]], width: int = TABLE_WIDTH) -> str:
    """A plain aligned text table at most ``width`` columns wide: the widest columns are wrapped onto
    continuation lines (at spaces where possible) until the table fits. Trailing spaces are stripped."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return "-" if v is None else str(v)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    floor = [max(8, len(h)) for h in headers]
    while sum(widths) + 2 * (len(widths) - 1) > width:
        i = max(range(len(widths)), key=lambda k: widths[k] - floor[k])
        if widths[i] <= floor[i]:
            break  # cannot narrow further; let it overflow rather than lose text
        widths[i] -= 1

    def render(row: list[str]) -> list[str]:
        wrapped = [textwrap.wrap(c, w, break_long_words=True, break_on_hyphens=False) or [""]
                   for c, w in zip(row, widths)]
        height = max(len(w) for w in wrapped)
        return ["  ".join((w[k] if k < len(w) else "").ljust(widths[j]) for j, w in enumerate(wrapped)).rstrip()
                for k in range(height)]

    lines = render(headers) + ["  ".join("-" * w for w in widths)]
    for row in cells:
        lines += render(row)
    return "\n".join(lines)


def add_claim_args(parser: argparse.ArgumentParser, *, default_delta: float | None = None) -> None:
    """The claim to audit: ``--claimed-epsilon E --delta D [--relation] [--unit]`` or ``--opacus-state FILE``,
    and ``--confidence`` of the verdict (:mod:`privaudit.audit.user.claim`)."""
    from privaudit.audit.user.claim import RELATIONS, UNITS

    parser.add_argument("--claimed-epsilon", type=number(positive=True), default=None, metavar="E",
                        help="the epsilon you claim (a verdict and its ceiling are reported against it)")
    parser.add_argument("--delta", type=number(), default=default_delta, metavar="D",
                        help="the claim's delta" + (f" (default {default_delta:g})" if default_delta else ""))
    parser.add_argument("--relation", default="add-remove", help=f"the claim's neighbouring relation: "
                        f"{', '.join(RELATIONS)} (default add-remove)")
    parser.add_argument("--unit", default="example", help=f"the claim's privacy unit: {', '.join(UNITS)} "
                        "(default example)")
    parser.add_argument("--opacus-state", default=None, metavar="FILE",
                        help="an Opacus accountant's saved state_dict (torch.save(accountant.state_dict(), FILE)): "
                             "the claim is its history's epsilon at --delta, tested against that mechanism")
    parser.add_argument("--confidence", type=number(**PROBABILITY), default=0.95,
                        help="confidence of the bounds and the verdict (default 0.95)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite files in --out that privaudit did not write (or that changed since)")


def claim_of(args: argparse.Namespace) -> Any:
    """The :class:`privaudit.audit.user.claim.UserClaim` of :func:`add_claim_args`' flags (None: no claim)."""
    from privaudit.audit.user.claim import claim_from_args

    if not 0 < args.confidence < 1:
        raise ConfigError(f"--confidence: must lie in (0, 1), got {args.confidence!r}")
    return claim_from_args(args.claimed_epsilon, args.delta, args.relation, args.unit, args.opacus_state)


def refuted_status(verdict: Any) -> int:
    """The exit status of an audit of a user's claim: 1 when the verdict is "refuted" (a pipeline can act on it),
    else 0 (not refuted, or no claim given)."""
    return 1 if verdict is not None and verdict.verdict == "refuted" else 0


def show_required(parser: argparse.ArgumentParser, actions: list[argparse.Action]) -> None:
    """Show ``actions`` as required in ``parser``'s usage line while the command checks them itself (its one-line
    message naming both, rather than argparse's)."""
    for action in actions:
        action.required = True
    parser.usage = parser.format_usage().removeprefix("usage: ").rstrip("\n")
    for action in actions:
        action.required = False
