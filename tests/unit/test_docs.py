"""The README and the docs: every relative link points at a file that exists, and every anchor
at a heading of its file (as GitHub names them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted(p for p in ROOT.glob("*/README.md")),
    *sorted(ROOT.glob("examples/**/*.md")),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _prose(path: Path) -> list[str]:
    """The file's lines outside code blocks."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    found = set()
    for line in _prose(path):
        heading = re.match(r"^#{1,6} (.*)$", line)
        if heading:
            title = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower())
            found.add(title.replace(" ", "-"))
    return found


def links() -> list[tuple[Path, str]]:
    return [
        (path, target)
        for path in DOCS
        for line in _prose(path)
        for target in LINK.findall(line)
        if not target.startswith(("http://", "https://", "mailto:"))
    ]


def test_the_docs_are_where_the_readme_says():
    assert {p.name for p in (ROOT / "docs").glob("*.md")} >= {
        "resource.md",
        "install.md",
        "tables.md",
        "job.md",
        "local-stack.md",
        "development.md",
    }


@pytest.mark.parametrize("path, target", links(), ids=lambda v: str(v)[-60:])
def test_every_relative_link_and_anchor_resolves(path, target):
    file, _, anchor = target.partition("#")
    resolved = (path.parent / file).resolve() if file else path
    assert resolved.exists(), f"{path.relative_to(ROOT)}: {target}: no such file"
    if anchor and resolved.suffix == ".md":
        assert anchor in anchors(resolved), (
            f"{path.relative_to(ROOT)}: {target}: no heading #{anchor} in "
            f"{resolved.relative_to(ROOT)}"
        )


def test_each_operation_in_the_docs_is_one_the_api_server_takes():
    """The YAML of each operation in docs/operations.md validates against the CRD's models."""
    import re

    import yaml

    from floe_operator.operation import OperationSpec

    text = (ROOT / "docs" / "operations.md").read_text()
    found = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    operations = [doc for doc in found if doc.get("kind") == "KafkaIcebergOperation"]
    assert {doc["spec"]["type"] for doc in operations} == {
        "Rollback",
        "Repair",
        "Backfill",
        "Replay",
    }
    for doc in operations:
        OperationSpec.model_validate(doc["spec"])
