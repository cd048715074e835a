"""The README's two quickstart commands: .ci/run runs the test one verbatim, the main one is runnable."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def test_readme_has_exactly_two_quickstart_commands():
    commands = quickstart_commands()
    assert len(commands) == 2
    assert all("\n" not in c for c in commands)
    assert "pip install ." in commands[0] and "privaudit " in commands[0]
    assert "pip install '.[dev]'" in commands[1] and commands[1].endswith("pytest -n 2")


def test_ci_runs_the_readme_test_command_exactly():
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert quickstart_commands()[1] in ci_lines


def test_main_command_uses_an_existing_subcommand():
    from privaudit.audit.cli import build_parser

    main = quickstart_commands()[0].split("&& privaudit ", 1)[1].split()
    args = build_parser().parse_args(main)
    assert callable(args.func)
