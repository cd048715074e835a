"""What the JUnit tests share: a file read by a real JUnit reader (junitparser, as CI tools parse it) and checked
against the structure of Jenkins' ``junit-10.xsd`` (the schema GitLab's test reports and the JUnit actions accept):
the elements each may hold, their attributes, and counts that add up."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

# junit-10.xsd: element -> (children it may hold, attributes it may carry, attributes it must carry)
SCHEMA = {
    "testsuites": ({"testsuite"}, {"name", "time", "tests", "failures", "disabled", "errors"}, set()),
    "testsuite": ({"properties", "testcase", "system-out", "system-err"},
                  {"name", "tests", "failures", "errors", "group", "time", "disabled", "skipped", "timestamp",
                   "hostname", "id", "package", "file", "log", "url", "version"}, {"name", "tests"}),
    "properties": ({"property"}, set(), set()),
    "property": (set(), {"name", "value"}, {"name", "value"}),
    "testcase": ({"skipped", "error", "failure", "system-out", "system-err"},
                 {"name", "assertions", "time", "classname", "status", "group", "file", "line"}, {"name"}),
    "failure": (set(), {"type", "message"}, set()),
    "error": (set(), {"type", "message"}, set()),
    "skipped": (set(), {"message"}, set()),
    "system-out": (set(), set(), set()),
    "system-err": (set(), set(), set()),
}
# testsuites in junit-10.xsd carries no "skipped"; GitLab and the JUnit actions read it, so it is allowed here
SCHEMA["testsuites"][1].add("skipped")


def check_structure(path: Path) -> None:
    """Every element and attribute as the schema allows; a suite's counts are its cases'."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    for node in root.iter():
        children, allowed, required = SCHEMA[node.tag]
        assert {c.tag for c in node} <= children, (node.tag, [c.tag for c in node])
        assert set(node.attrib) <= allowed and required <= set(node.attrib), (node.tag, node.attrib)
    for suite in root:
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        for tag, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
            assert int(suite.get(key)) == sum(c.find(tag) is not None for c in cases), key
        for case in cases:
            float(case.get("time"))
            assert sum(case.find(t) is not None for t in ("failure", "error", "skipped")) <= 1


@dataclass(frozen=True)
class Read:
    classname: str
    name: str
    outcome: str
    message: str
    text: str
    out: str


def read_junit(path: Path) -> tuple[dict[str, int], list[Read]]:
    """(the suites' totals, each case) as junitparser reads ``path``; the structure checked first."""
    from junitparser import Error, Failure, JUnitXml, Skipped

    check_structure(path)
    xml = JUnitXml.fromfile(str(path))
    cases, totals = [], {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in xml:
        for key in totals:
            totals[key] += int(getattr(suite, key) or 0)
        for case in suite:
            results = list(case.result)
            kind = {Failure: "failed", Error: "error", Skipped: "skipped"}.get(type(results[0]), "?") \
                if results else "passed"
            cases.append(Read(case.classname, case.name, kind, results[0].message or "" if results else "",
                              (results[0].text or "") if results else "", case.system_out or ""))
    return totals, cases
