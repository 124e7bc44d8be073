"""What an append's single pass makes of its counts, and how many tasks write it (no
services)."""

from types import SimpleNamespace

import pytest

from floe_sparkapp.table_writer import SMALL_BATCH_RECORDS, _Pass, write_tasks

pytestmark = pytest.mark.unit


def counted(seen: dict, expected: dict) -> _Pass:
    return _Pass(SimpleNamespace(get={"rows": 9, "bytes": 900, **seen}), expected)


def test_ids_found_are_those_decoded_for_that_were_seen_and_the_least_and_greatest_other():
    found = counted(
        {
            "value_ids_3": True,
            "value_ids_4": None,
            "value_ids_low": 7,
            "value_ids_high": 8,
            "key_ids_low": None,
            "key_ids_high": None,
        },
        {"value_ids": ("_schema_id", [3, 4]), "key_ids": ("_key_schema_id", [])},
    )
    assert found.read() == {"input_rows": 9, "bytes": 900, "value_ids": (3, 7, 8), "key_ids": ()}
    assert found.between == []  # nothing can lie between 7 and 8


def test_more_ids_may_lie_between_the_least_and_greatest_other():
    found = counted({"value_ids_low": 7, "value_ids_high": 12}, {"value_ids": ("_schema_id", [])})
    assert found.read()["value_ids"] == (7, 12)
    assert found.between == ["value_ids"]
    found.read()  # read once: the JVM's counts are not asked for again
    assert found.between == ["value_ids"]


def test_a_small_batch_over_more_partitions_than_cores_is_written_one_task_a_core():
    partitions = list(range(64))
    above = dict.fromkeys(partitions, 1000)
    assert write_tasks(partitions, dict.fromkeys(partitions, 1100), above, 2) == 2
    # (records below a partition's committed offset are not the batch's)
    assert (
        write_tasks(partitions, dict.fromkeys(partitions, 1000 + SMALL_BATCH_RECORDS - 1), above, 4)
        == 4
    )


def test_a_large_batch_or_few_partitions_is_written_as_it_is_read():
    partitions = list(range(64))
    assert write_tasks(partitions, dict.fromkeys(partitions, SMALL_BATCH_RECORDS), {}, 2) is None
    assert write_tasks([0, 1], {0: 10, 1: 10}, {}, 2) is None  # no more partitions than cores
    # one partition's backlog makes the batch large, however idle the others
    skewed = dict.fromkeys(partitions, 1) | {0: SMALL_BATCH_RECORDS * 64}
    assert write_tasks(partitions, skewed, {}, 2) is None


def test_a_coalesced_batch_counts_the_newest_timestamp_of_each_partition():
    found = counted({"newest": "3:1700000000123,11:1700000000456"}, {})
    found.newest = True
    assert found.read()["newest"] == {3: 1700000000123, 11: 1700000000456}
    found = counted({"newest": ""}, {})  # no rows
    found.newest = True
    assert found.read()["newest"] == {}
