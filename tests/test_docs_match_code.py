"""The reference pages that describe the code's shape are checked against it: docs/cli.md's synopsis lists every
subcommand with every option the parser takes (and no other); docs/layout.md names every module and package of
every layer, of audit's subpackages and of attacks/bounds/, and every file of examples/ and scripts/ (and no file
that is gone); and no public function or class of the layers is dead (defined but named nowhere else in the
repository)."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

from privaudit.audit.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("core", "accountants", "defenses", "attacks", "audit", "privaudit")


def synopsis() -> dict[str, str]:
    """docs/cli.md's synopsis: subcommand -> its entry (its first line and the indented lines after it)."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    block = re.search(r"```text\n(.*?)```", text, re.S).group(1)
    entries: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        head = re.match(r"privaudit ([\w-]+)", line)
        if head:
            current = head.group(1)
            assert current not in entries, f"docs/cli.md lists {current} twice"
            entries[current] = line
        elif current and line.startswith(" "):
            entries[current] += " " + line
    return entries


def parser_options() -> dict[str, set[str]]:
    """Every subcommand's long options, from the parser itself (``--help`` aside)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {name: {o for a in sub.choices[name]._actions for o in a.option_strings if o.startswith("--")} - {"--help"}
            for name in sub.choices}


def test_cli_synopsis_lists_every_subcommand_with_every_option():
    entries, options = synopsis(), parser_options()
    assert sorted(entries) == sorted(COMMANDS) == sorted(options)
    wrong = {name: (sorted(options[name] - set(re.findall(r"--[\w-]+", entries[name]))),
                    sorted(set(re.findall(r"--[\w-]+", entries[name])) - options[name]))
             for name in COMMANDS}
    assert {name: diff for name, diff in wrong.items() if diff != ([], [])} == {}


def test_cli_page_says_where_each_subcommand_is_described():
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    table = text.split("| command | page |", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"`([\w-]+)`", table))
    assert listed == set(COMMANDS)


def layout_rows() -> dict[str, str]:
    text = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([\w./]+)/` \| (.*) \|$", text, re.M)}


#: Subpackages with a row of their own in docs/layout.md (every subpackage of ``audit`` and the bound modules'):
#: the row names every module and package in them, as a layer's row does.
SUBPACKAGES = tuple(sorted(f"audit/{p.name}" for p in (ROOT / "audit").iterdir()
                           if p.is_dir() and (p / "__init__.py").is_file())) + ("attacks/bounds",)


def unnamed(folder: Path, row: str) -> list[str]:
    """The modules (``x.py``) and packages (``x/``) directly in ``folder`` that ``row`` does not name."""
    names = [p.name for p in folder.glob("*.py") if p.name != "__init__.py"]
    names += [f"{p.name}/" for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").is_file()]
    return sorted(n for n in names if f"`{n}`" not in row)


def test_layout_names_every_module_and_package_of_every_layer():
    rows = layout_rows()
    missing = {layer: unnamed(ROOT / layer, rows.get(layer, "")) for layer in LAYERS}
    assert missing == {layer: [] for layer in LAYERS}


def test_layout_names_every_module_and_package_of_every_subpackage():
    rows = layout_rows()
    assert "audit/run" in SUBPACKAGES and "audit/sensitivity" in SUBPACKAGES
    assert [p for p in SUBPACKAGES if p not in rows] == []
    missing = {package: unnamed(ROOT / package, rows[package]) for package in SUBPACKAGES}
    assert missing == {package: [] for package in SUBPACKAGES}


@pytest.mark.parametrize("folder", ["examples", "scripts"])
def test_layout_names_every_example_and_script(folder):
    files = sorted(p.name for p in (ROOT / folder).iterdir() if p.is_file())
    assert [f for f in files if f"`{f}`" not in layout_rows()[folder]] == []


def test_layout_names_no_module_that_is_gone():
    rows = layout_rows()
    for layer in (*LAYERS, *SUBPACKAGES):
        named = re.findall(r"`([\w]+\.py)`", rows[layer])
        present = {p.name for p in (ROOT / layer).rglob("*.py")}
        assert sorted(set(named) - present) == [], layer


# Dead code known and kept (each entry must still be dead, so the list can only shrink): none.
KNOWN_DEAD: set[tuple[str, str]] = set()


def repository_text() -> str:
    """Every source, test, script, example and page of the repository but this file (which names dead code)."""
    paths = [p for folder in (*LAYERS, "tests", "scripts", "examples", "docs") for p in (ROOT / folder).rglob("*")
             if p.suffix in (".py", ".md", ".sh", ".toml") and p.resolve() != Path(__file__).resolve()]
    paths += [ROOT / "README.md", ROOT / "setup.py", ROOT / "pyproject.toml"]
    return "\n".join(p.read_text(encoding="utf-8") for p in paths)


def dead_definitions(sources: dict[str, str], text: str) -> set[tuple[str, str]]:
    """(path, name) of each public top-level function or class of ``sources`` (path -> source) without a decorator
    (a decorator may register it) whose name occurs once in ``text``: at its definition, so nothing calls, tests
    or documents it."""
    words = Counter(re.findall(r"\w+", text))
    return {(path, node.name) for path, source in sources.items() for node in ast.parse(source).body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")
            and not node.decorator_list and words[node.name] == 1}


def test_no_public_function_or_class_is_dead():
    sources = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for layer in LAYERS
               for p in (ROOT / layer).rglob("*.py")}
    assert dead_definitions(sources, repository_text()) == KNOWN_DEAD


def test_the_dead_code_check_finds_dead_code():
    source = "def used():\n    return 1\n\n\ndef orphan_helper():\n    return used()\n\n\n@register\ndef hook():\n    pass\n"
    assert dead_definitions({"m.py": source}, source + "\nused()") == {("m.py", "orphan_helper")}
