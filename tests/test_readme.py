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


def ci_jobs() -> list[dict]:
    """The README's CI section's YAML jobs (GitLab's, then GitHub Actions'), parsed."""
    import yaml

    text = (ROOT / "README.md").read_text()
    section = text.split("## Use in CI", 1)[1].split("\n## ", 1)[0]
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", section, flags=re.S)]


def _junit_of(lines: list[str]) -> str:
    """The ``--junit`` file of the privaudit commands in ``lines``, each parsed by the CLI's parser."""
    from privaudit.audit.cli import build_parser

    found = []
    for line in lines:
        for part in line.split("&&"):
            words = part.split()
            if words[:1] == ["privaudit"]:
                args = build_parser(words[1:]).parse_args(words[1:])
                assert callable(args.func)
                found += [args.junit] if getattr(args, "junit", None) else []
    assert len(found) == 1, found
    return found[0]


def test_the_ci_jobs_commands_parse_and_their_junit_file_is_the_one_the_ci_reads():
    gitlab, github = ci_jobs()
    (job,) = gitlab.values()
    junit = _junit_of(job["script"])
    assert job["artifacts"]["reports"]["junit"] == junit and job["artifacts"]["when"] == "always"
    (job,) = github.values()
    steps = job["steps"]
    assert _junit_of([s["run"] for s in steps if "run" in s]) == junit
    report = next(s for s in steps if s.get("uses", "").startswith("mikepenz/action-junit-report@"))
    assert report["with"]["report_paths"] == junit and report["if"] == "always()"
    assert job["permissions"]["checks"] == "write"  # the action posts its check run
