"""What a run of the suite took: its wall time, each group's, and the slowest tests.

Read from the JUnit report (``reports/junit.xml``), where each test case carries its group,
its worker and when it started as properties (tests/conftest.py)::

    python -m tests.suite_report reports/junit.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Case:
    name: str
    seconds: float
    group: str
    worker: str
    started: float | None
    outcome: str
    waited: float  # for the locks of the parts of the stack it uses, before its time began


def cases(path: Path) -> tuple[float, list[Case]]:
    """The suite's time and its test cases."""
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    found: list[Case] = []
    for case in (c for suite in suites for c in suite.iter("testcase")):
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        outcome = next(
            (child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed"
        )
        started = properties.get("started")
        found.append(
            Case(
                f"{case.get('classname')}::{case.get('name')}",
                float(case.get("time") or 0),
                properties.get("group", "-"),
                properties.get("worker", "-"),
                float(started) if started else None,
                outcome,
                float(properties.get("waited") or 0),
            )
        )
    return sum(float(suite.get("time") or 0) for suite in suites), found


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def summary(path: Path, slowest: int = 10) -> list[str]:
    wall, found = cases(path)
    by_group: dict[str, list[Case]] = defaultdict(list)
    for case in found:
        by_group[case.group].append(case)
    lines = [f"the suite: {len(found)} tests in {_minutes(wall)}"]
    for group, members in sorted(by_group.items(), key=lambda kv: -sum(c.seconds for c in kv[1])):
        busy = sum(c.seconds for c in members)
        starts = [c.started for c in members if c.started is not None]
        ends = [c.started + c.seconds for c in members if c.started is not None]
        span = f", from the first to the last {_minutes(max(ends) - min(starts))}" if starts else ""
        workers = sorted({c.worker for c in members})
        waited = sum(c.waited for c in members)
        lines.append(
            f"  {group}: {len(members)} tests, {_minutes(busy)} of tests{span}, "
            f"{_minutes(waited)} waiting for the tests beside them "
            f"(workers {', '.join(workers)})"
        )
    lines.append(f"the {slowest} slowest tests:")
    for case in sorted(found, key=lambda c: -c.seconds)[:slowest]:
        lines.append(f"  {case.seconds:7.1f} s  [{case.group}] {case.name}")
    return lines


if __name__ == "__main__":
    for line in summary(Path(sys.argv[1] if len(sys.argv) > 1 else "reports/junit.xml")):
        print(line)
