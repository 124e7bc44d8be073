"""What an append's single pass makes of its counts (its valid-through time, the writer schema
ids it was not decoded for), and how many tasks write it (no services)."""

from types import SimpleNamespace

import pytest

from floe_sparkapp.batch_decoder import BatchDecoder, UnplannedSchemas
from floe_sparkapp.batch_write import SMALL_BATCH_RECORDS, Pass, write_tasks

pytestmark = pytest.mark.unit


def counted(seen: dict, expected: dict) -> Pass:
    return Pass(SimpleNamespace(get={"rows": 9, "bytes": 900, **seen}), expected)


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


def test_the_valid_through_time_is_the_least_newest_timestamp_of_the_batchs_partitions():
    found = counted({"newest": "3:1700000000123,11:1700000000456,12:1600000000000"}, {})
    found.newest = True
    # (partition 12's records were all below the table's offsets: not the batch's)
    assert found.vtts(None, [3, 11], None) == 1700000000123
    assert found.read()["vtts"] == 1700000000123  # kept with the counts, for the outcome


def test_a_batchs_ids_are_noted_and_those_it_was_not_decoded_for_decode_it_again():
    decoder = BatchDecoder(None, None, None, "c.t")
    decoder.recent["value"].update({3: 1})
    found = counted({"value_ids_3": True, "value_ids_low": 7, "value_ids_high": 7}, {})
    found.expected = {"value_ids": ("_schema_id", [3])}
    with pytest.raises(UnplannedSchemas, match=r"batch 2 has writer schema ids .*: value \[7\]"):
        decoder.check(found.ids(None), 2)
    assert decoder.recent["value"] == {3: 2, 7: 2}  # the next try is decoded for 7
    decoder.check(found.ids(None), 2)
