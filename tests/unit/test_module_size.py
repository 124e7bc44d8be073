"""No module of the product is longer than :data:`LIMIT` lines without a reason written at its
top.

A module holds one concern and stays short.  One that grows past the limit is split by concern
(a sibling module taking a concern out, or a package whose ``__init__`` re-exports its names),
or says why it is not: a comment line among its first three lines,

    # Longer than 450 lines: <the reason, in a few words>

the reason at least :data:`REASON_WORDS` words long."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "operator" / "floe_operator", ROOT / "sparkapp" / "floe_sparkapp"]
LIMIT = 450
MARKER = re.compile(rf"^# Longer than {LIMIT} lines: (?P<reason>.*\S)\s*$")
MARKER_LINES = 3  # the marker is one of the module's first lines
REASON_WORDS = 3


def modules(roots: list[Path] = PRODUCT) -> list[Path]:
    """Every module under ``roots`` (the product's packages), their subpackages' included."""
    return sorted(
        path for root in roots for path in root.rglob("*.py") if "__pycache__" not in path.parts
    )


def reason(text: str) -> str | None:
    """The reason written at the top of a module's ``text`` for its length, if any."""
    for line in text.splitlines()[:MARKER_LINES]:
        found = MARKER.match(line)
        if found and len(found.group("reason").split()) >= REASON_WORDS:
            return found.group("reason")
    return None


def too_long(paths: list[Path]) -> list[tuple[Path, int]]:
    """The modules longer than :data:`LIMIT` lines without a reason at their top, with their
    lengths."""
    found = []
    for path in paths:
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > LIMIT and reason(text) is None:
            found.append((path, lines))
    return found


def test_no_module_of_the_product_is_longer_than_the_limit_without_a_reason():
    found = modules()
    assert len(found) > 50, f"only {len(found)} modules found under {PRODUCT}"
    over = too_long(found)
    assert not over, (
        f"{len(over)} module(s) longer than {LIMIT} lines without a reason at the top: "
        + "; ".join(f"{path.relative_to(ROOT)} ({lines} lines)" for path, lines in over)
        + ". Split each by concern (a sibling module taking a concern out, or a package whose "
        f"__init__ re-exports its names), or write why it stays whole as a comment line among "
        f"its first {MARKER_LINES} lines: '# Longer than {LIMIT} lines: <the reason, "
        f"{REASON_WORDS} words or more>'."
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"# Longer than {LIMIT} lines: one state machine, read top to bottom\n'''Doc.'''\n",
            "one state machine, read top to bottom",
        ),
        (
            f"'''Doc,\nover two lines.'''\n# Longer than {LIMIT} lines: the generated table "
            "of codes\n",
            "the generated table of codes",
        ),
        ("'''Doc.'''\n\n\n# Longer than 450 lines: too far down the module\n", None),
        (f"# Longer than {LIMIT} lines: because\n", None),  # no reason in one word
        (f"# Longer than {LIMIT} lines:\n", None),
        ("# longer than 450 lines, as it must be here\n", None),
        (f"x = 1  # Longer than {LIMIT} lines: not a line of its own\n", None),
    ],
)
def test_the_reason_is_read_as_the_module_doc_says(text, expected):
    assert reason(text) == expected


def test_a_long_module_is_found_unless_it_gives_its_reason(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    (tmp_path / "reasoned.py").write_text(
        f"# Longer than {LIMIT} lines: a table that reads best whole\n" + "x = 1\n" * LIMIT
    )
    (tmp_path / "short.py").write_text("x = 1\n" * LIMIT)
    found = modules([tmp_path])
    assert [path.name for path in found] == ["reasoned.py", "short.py", "long.py"]
    assert too_long(found) == [(tmp_path / "sub" / "long.py", LIMIT + 1)]
