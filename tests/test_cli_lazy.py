"""The CLI imports only the module of the command it runs: the accountant commands stay free of torch/Opacus."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from privaudit.audit.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]


def test_static_help_matches_each_commands_own():
    for name, (module, help_text) in COMMANDS.items():
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(module).register(sub)
        assert sub.choices.keys() == {name}
        (action,) = [a for a in sub._choices_actions if a.dest == name]
        assert action.help == help_text, name


def test_full_parser_has_every_command():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)
    assert all(callable(sub.choices[n].get_default("func")) for n in COMMANDS)


ACCOUNTANT_COMMANDS = [
    ["epsilon", "--noise-multiplier", "1", "--steps", "100", "--sample-rate", "0.01", "--delta", "1e-5",
     "--accountant", "rdp"],
    ["epsilon", "--noise-multiplier", "1", "--steps", "100", "--sample-rate", "0.01", "--delta", "1e-5",
     "--accountant", "pld", "--json"],
    ["calibrate", "--target-epsilon", "2", "--steps", "100", "--sample-rate", "0.01", "--delta", "1e-5",
     "--accountant", "rdp"],
    ["claims", "--id", "fedemb-tab1-ftrl-rho", "--json"],  # PRV does not apply to tree aggregation
]
PRV = ["epsilon", "--noise-multiplier", "1", "--steps", "10", "--sample-rate", "0.01", "--delta", "1e-5",
       "--accountant", "prv"]


def _imports_after(commands: list[list[str]]) -> list[dict[str, bool]]:
    """Run ``commands`` one after another in one fresh interpreter; after each, its exit code and whether torch and
    Opacus are imported (by it or by a command before it: a module once imported stays imported)."""
    code = ("import sys, contextlib, io\nfrom privaudit.audit.cli import main\n"
            f"for argv in {commands!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()): code = main(argv)\n"
            "    print(code, int('torch' in sys.modules), int('opacus' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""}).stdout.splitlines()
    assert len(out) == len(commands), out
    return [{"code": int(w[0]), "torch": w[1] == "1", "opacus": w[2] == "1"} for w in map(str.split, out)]


@pytest.fixture(scope="module")
def imports_after():
    """The accountant commands, then PRV's, in one interpreter (one start instead of five): a command that imports
    torch fails its own case and every later one; PRV runs last, so Opacus is found imported after it only if it
    imported it itself."""
    return _imports_after(ACCOUNTANT_COMMANDS + [PRV])


@pytest.mark.parametrize("index", range(len(ACCOUNTANT_COMMANDS)), ids=[f"argv{i}" for i in range(4)])
def test_accountant_commands_do_not_import_torch(imports_after, index):
    assert imports_after[index] == {"code": 0, "torch": False, "opacus": False}, ACCOUNTANT_COMMANDS[index]


def test_prv_imports_opacus_only_when_asked(imports_after):
    assert all(not r["opacus"] for r in imports_after[:-1])  # not before PRV asked for it
    assert imports_after[-1]["code"] == 0 and imports_after[-1]["opacus"]


def test_every_command_shows_two_examples_in_its_help(capsys):
    from privaudit.audit.cli import EXAMPLES, main

    assert set(EXAMPLES) == set(COMMANDS)
    for name in COMMANDS:
        with pytest.raises(SystemExit):
            main([name, "--help"])
        out = capsys.readouterr().out
        assert "examples:" in out and all(e in out for e in EXAMPLES[name]) and len(EXAMPLES[name]) == 2, name


def test_every_help_example_parses():
    """Each example a --help shows is a valid command line: the parser accepts it (no missing or unknown option)."""
    import shlex

    from privaudit.audit.cli import EXAMPLES, build_parser

    parser = build_parser()
    for name, examples in EXAMPLES.items():
        for example in examples:
            argv = shlex.split(example.split("||")[0])
            assert argv[0] == "privaudit" and argv[1] == name, example
            args = parser.parse_args(argv[1:])
            assert args.command == name, example
