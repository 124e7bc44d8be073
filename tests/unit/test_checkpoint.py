"""Reading Spark's offset log and comparing it with the table's offsets."""

from floe_sparkapp.checkpoint import ahead_of, parse_initial_offsets, parse_offset_log

ENTRY = (
    'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795491010270,"conf":{}}\n'
    '{"orders":{"2":40,"1":38,"0":12}}'
)


def test_an_offset_log_entry_gives_the_topics_end_offsets():
    assert parse_offset_log(ENTRY, "orders") == {0: 12, 1: 38, 2: 40}
    assert parse_offset_log(ENTRY, "payments") is None
    assert parse_offset_log("v1\n{}\n-", "orders") is None


def test_the_sources_initial_offsets_skip_the_header_and_unresolved_positions():
    text = '\x00v1\n{"orders":{"0":0,"1":-2,"2":7}}'
    assert parse_initial_offsets(text, "orders") == {0: 0, 2: 7}


def test_a_start_above_the_table_is_ahead_below_or_equal_is_a_replay():
    table = {0: 12, 1: 38, 2: 40}
    assert ahead_of({0: 12, 1: 30, 2: 40}, table) == []
    assert ahead_of({0: 13, 1: 38, 2: 40}, table) == [
        "partition 0: the checkpoint is at 13, the table's committed offset is 12"
    ]


def test_a_partition_the_table_has_not_got_is_compared_with_kafkas_earliest():
    assert ahead_of({0: 5, 1: 3}, {}) == []
    assert ahead_of({0: 5, 1: 3}, {}, floor={0: 0, 1: 3}) == [
        "partition 0: the checkpoint is at 5, Kafka's earliest offset is 0"
    ]
