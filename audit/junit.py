"""Verdicts as JUnit XML, the test report CI systems show per test case (GitLab's test reports, Jenkins, Azure
Pipelines; GitHub through the common JUnit actions).

One :class:`Case` per cell and check: its name, its outcome (passed, failed, error, skipped), the message a failure
carries (the gate's own words) and its details (the bound and the claim). :func:`junit_xml` writes the elements and
attributes those readers share -- Jenkins' ``junit-10.xsd``, which GitLab and the JUnit actions also read::

    <testsuites name tests failures errors skipped time>
      <testsuite name tests failures errors skipped time>
        <properties><property name value/>...</properties>
        <testcase name classname time>
          <failure message type>message, details</failure> | <error message type>message, details</error>
          | <skipped message/> <system-out>details</system-out> | <system-out>details</system-out> (passed)
        </testcase>
      </testsuite>
    </testsuites>

No timestamp or host is written: the same verdicts give the same bytes. :func:`write_junit` writes the file
atomically; :func:`check_junit_path` refuses an unwritable path before any work starts.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

OUTCOMES = ("passed", "failed", "error", "skipped")
#: Characters XML 1.0 cannot hold (control characters other than tab, newline and carriage return).
_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@dataclass(frozen=True)
class Case:
    """One test case: ``classname`` groups it (the cell, the audit), ``name`` is the check; ``message``: why it
    failed, errored or was skipped (one line); ``details``: the bound and the claim, whatever the outcome."""

    classname: str
    name: str
    outcome: str
    message: str = ""
    details: str = ""
    time: float = 0.0

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome: one of {', '.join(OUTCOMES)}, got {self.outcome!r}")


def _text(value: str) -> str:
    return _INVALID.sub("?", value)


def _counts(cases: Sequence[Case]) -> dict[str, str]:
    count = {o: sum(c.outcome == o for c in cases) for o in OUTCOMES}
    return {"tests": str(len(cases)), "failures": str(count["failed"]), "errors": str(count["error"]),
            "skipped": str(count["skipped"]), "time": f"{sum(c.time for c in cases):.3f}"}


def _case(case: Case) -> ET.Element:
    node = ET.Element("testcase", {"name": _text(case.name), "classname": _text(case.classname),
                                   "time": f"{case.time:.3f}"})
    if case.outcome == "skipped":
        ET.SubElement(node, "skipped", {"message": _text(case.message.splitlines()[0] if case.message else "")})
    elif case.outcome in ("failed", "error"):
        tag = "failure" if case.outcome == "failed" else "error"
        first = case.message.splitlines()[0] if case.message else case.outcome
        child = ET.SubElement(node, tag, {"message": _text(first), "type": "refuted" if tag == "failure" else "error"})
        child.text = _text("\n".join(part for part in (case.message, case.details) if part))
    if case.details and case.outcome in ("passed", "skipped"):  # a failure's or error's text holds them already
        ET.SubElement(node, "system-out").text = _text(case.details)
    return node


def junit_xml(name: str, cases: Sequence[Case], properties: Mapping[str, str] | None = None) -> bytes:
    """The JUnit XML document of ``cases``: one test suite ``name`` (the command's subject), its ``properties``."""
    root = ET.Element("testsuites", {"name": _text(name), **_counts(cases)})
    suite = ET.SubElement(root, "testsuite", {"name": _text(name), **_counts(cases)})
    if properties:
        props = ET.SubElement(suite, "properties")
        for key, value in properties.items():
            ET.SubElement(props, "property", {"name": _text(str(key)), "value": _text(str(value))})
    for case in cases:
        suite.append(_case(case))
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"


def check_junit_path(path: str | os.PathLike[str]) -> Path:
    """``--junit FILE`` checked before any work: not a directory, its directory creatable and writable (one line,
    exit 2, otherwise)."""
    from privaudit.core.errors import ConfigError
    from privaudit.core.io import check_output_dir

    target = Path(path)
    if not str(path).strip() or target.is_dir():
        raise ConfigError(f"--junit: {str(path)!r} must be a file path (e.g. privaudit-junit.xml), not a directory")
    check_output_dir(target.parent, "--junit")
    return target


def write_junit(path: str | os.PathLike[str], name: str, cases: Sequence[Case],
                properties: Mapping[str, str] | None = None) -> Path:
    """Write :func:`junit_xml` to ``path`` atomically."""
    from privaudit.core.io import atomic_write_bytes

    return atomic_write_bytes(path, junit_xml(name, cases, properties))
