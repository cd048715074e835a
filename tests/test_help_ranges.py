"""``--help`` and the errors agree: every ranged option's help states the range its validator enforces, in the
validator's words, and the validator accepts that range's ends and refuses what lies just outside it, naming it.
No help text states a numeric bound of its own (it would be a second, drifting copy)."""

from __future__ import annotations

import argparse
import math
import re

import pytest

from privaudit.audit.cli import build_parser

# audit-model's help and errors belong to its own tests (tests/test_audit_model.py).
OWN_TESTS = {"audit-model"}


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def ranged_options() -> list[tuple[str, argparse.Action]]:
    return [(name, action) for name, command in subcommands().items() for action in command._actions
            if getattr(action.type, "accepts", None)]


def outside(bound: float, below: bool, is_int: bool) -> float:
    """The nearest value on the wrong side of ``bound``."""
    if is_int:
        return bound - 1 if below else bound + 1
    return bound - max(abs(bound), 1.0) * 1e-6 if below else bound + max(abs(bound), 1.0) * 1e-6


def test_every_ranged_option_is_found():
    names = {f"{name} {action.option_strings[0]}" for name, action in ranged_options()}
    assert {"epsilon --steps", "epsilon --delta", "run --jobs", "train --seed", "train --target-epsilon",
            "sensitivity --budget-seconds", "calibrate --target-epsilon"} <= names


@pytest.mark.parametrize("name, action", ranged_options(),
                         ids=[f"{n} {a.option_strings[0]}" for n, a in ranged_options()])
def test_help_states_the_range_the_validator_enforces(name, action):
    parse = action.type
    assert parse.accepts in action.help, f"{name} {action.option_strings[0]}: help {action.help!r}"
    lo, hi, lo_open, hi_open = parse.bounds
    is_int = parse.accepts.startswith("an integer")
    for bound, is_open, below in ((lo, lo_open, True), (hi, hi_open, False)):
        if bound is None:
            continue
        if not is_open:
            parse(str(bound))  # the closed end is accepted
        for bad in ([bound] if is_open else []) + [outside(bound, below, is_int)]:
            with pytest.raises(argparse.ArgumentTypeError) as refused:
                parse(repr(bad) if not is_int else str(bad))
            assert str(refused.value).startswith(f"must be {parse.accepts}, got ")
    if lo is not None and hi is not None and not is_int and math.isfinite(hi):
        parse(str((lo + hi) / 2))


def test_the_parser_error_names_the_option_and_the_same_range():
    from privaudit.core.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        build_parser().parse_args(["epsilon", "--noise-multiplier", "1", "--steps", "10", "--sample-rate", "0.01",
                                   "--delta", "2"])
    assert str(refused.value) == "argument --delta: must be a number in (0, 1), got 2"
    (delta,) = [a for a in subcommands()["epsilon"]._actions if "--delta" in a.option_strings]
    assert "(a number in (0, 1))" in delta.help


BOUND_WORDS = re.compile(r"(at most|at least|>=|<=|below|above|between)\s*\d")


@pytest.mark.parametrize("name", sorted(set(subcommands()) - OWN_TESTS))
def test_no_help_states_a_bound_of_its_own(name):
    """A bound stated in words beside the validator's would be a second copy; only ``accepts`` states ranges."""
    stray = []
    for action in subcommands()[name]._actions:
        text = action.help or ""
        accepts = getattr(action.type, "accepts", "")
        if BOUND_WORDS.search(text.replace(f"({accepts})", "") if accepts else text):
            stray.append(f"{action.option_strings}: {text}")
    assert stray == []


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_rendered_help_shows_each_range(name):
    """What ``privaudit NAME --help`` prints (wrapped by argparse) carries every ranged option's range."""
    command = subcommands()[name]
    shown = " ".join(command.format_help().split())
    missing = [action.option_strings[0] for action in command._actions
               if getattr(action.type, "accepts", None) and " ".join(action.type.accepts.split()) not in shown]
    assert missing == []
