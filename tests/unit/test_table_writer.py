"""What an append's single pass makes of its counts (no services)."""

from types import SimpleNamespace

import pytest

from floe_sparkapp.table_writer import _Pass

pytestmark = pytest.mark.unit


def counted(seen: dict, expected: dict) -> _Pass:
    return _Pass(SimpleNamespace(get={"rows": 9, "bytes": 900, **seen}), expected)


def test_ids_found_are_those_decoded_for_that_were_seen_and_the_least_and_greatest_other():
    found = counted({"value_ids_3": True, "value_ids_4": None, "value_ids_low": 7,
                     "value_ids_high": 8, "key_ids_low": None, "key_ids_high": None},
                    {"value_ids": ("_schema_id", [3, 4]), "key_ids": ("_key_schema_id", [])})
    assert found.read() == {"input_rows": 9, "bytes": 900, "value_ids": (3, 7, 8),
                            "key_ids": ()}
    assert found.between == []  # nothing can lie between 7 and 8


def test_more_ids_may_lie_between_the_least_and_greatest_other():
    found = counted({"value_ids_low": 7, "value_ids_high": 12},
                    {"value_ids": ("_schema_id", [])})
    assert found.read()["value_ids"] == (7, 12)
    assert found.between == ["value_ids"]
    found.read()  # read once: the JVM's counts are not asked for again
    assert found.between == ["value_ids"]
