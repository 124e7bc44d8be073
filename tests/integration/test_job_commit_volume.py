"""Commits by volume as well as by time (``commit.minRecords``): a burst commits as soon as
enough has arrived, a trickle waits for the interval, and nothing is lost or doubled."""

from __future__ import annotations

import time

import pytest

from floe_sparkapp.ledger import last_commit

from .jobkit import (
    AvroProducer,
    assert_exactly_once,
    create_topic,
    job_config,
    load_table,
    streaming,
    table_rows,
    wait_for_rows,
)
from .test_job_roundtrip import produce_orders

pytestmark = pytest.mark.integration

INTERVAL = 20


def committed_at(config) -> tuple[int, int]:
    """The job's newest commit: its snapshot id and time (ms)."""
    table = load_table(config)
    snapshot_id = last_commit(table, config.writer).snapshot_id
    return snapshot_id, table.snapshot_by_id(snapshot_id).timestamp_ms


def test_a_burst_commits_when_enough_has_arrived_and_a_trickle_when_the_interval_ends(
    stack, spark, tmp_path, unique_name
):
    topic = f"volume-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 150)
    config = job_config(stack, tmp_path, topic, interval=INTERVAL)
    config = config.model_copy(
        update={"commit": config.commit.model_copy(update={"min_records": 100})}
    )

    with streaming(config, spark) as (failures, _):
        wait_for_rows(config, 150, timeout=120)  # the backlog: more than minRecords at once
        _, first = committed_at(config)

        produce_orders(producer, 150, 10)  # a trickle: fewer than minRecords
        time.sleep(5)
        assert len(table_rows(config)) == 150, "a trickle committed before its interval"
        produce_orders(producer, 160, 200)  # a burst: enough, long before the interval ends
        wait_for_rows(config, 360, timeout=120)
        _, burst = committed_at(config)
        assert burst - first < INTERVAL * 1000, (first, burst)

        produce_orders(producer, 360, 10)  # a trickle again: it waits for the interval
        wait_for_rows(config, 370, timeout=120)
        _, trickle = committed_at(config)
        assert trickle - burst >= (INTERVAL - 1) * 1000, (burst, trickle)
        assert not failures

    assert_exactly_once(table_rows(config), producer.sent)


NOTE = {
    "type": "record",
    "name": "Note",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "text", "type": "string"}],
}
LARGE = 16_000  # bytes of text in a large record


def produce_notes(producer: AvroProducer, start_at: int, count: int, size: int) -> None:
    for i in range(start_at, start_at + count):
        producer.send(key=f"n{i}".encode(), value={"id": i, "text": "x" * size}, schema=NOTE)
    producer.flush()


def job_commits(config) -> list[int]:
    """The records of each of the job's commits, oldest first."""
    table = load_table(config)
    return [
        int(s.summary["added-records"])
        for s in sorted(table.snapshots(), key=lambda s: s.sequence_number)
        if s.summary.additional_properties.get("floe.writer") == config.writer
        and "added-records" in s.summary.additional_properties
    ]


def test_a_commit_takes_about_max_bytes_of_records_and_plans_again_when_they_grow(
    stack, spark, tmp_path, unique_name
):
    topic = f"bytes-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = AvroProducer(stack, topic)
    produce_notes(producer, 0, 100, LARGE)  # large records first, then small ones: the sample
    produce_notes(producer, 100, 150, 50)  # of the newest finds small records only
    config = job_config(stack, tmp_path, topic, max_records=1000)
    config = config.model_copy(
        update={"commit": config.commit.model_copy(update={"max_bytes_per_commit": "1Mi"})}
    )
    fit = 1024 * 1024 // LARGE  # large records in 1 MiB

    with streaming(config, spark) as (failures, _):
        wait_for_rows(config, 250, timeout=120)
        assert job_commits(config) == [250]  # the batch that shows the records' size
        produce_notes(producer, 250, 200, LARGE)
        wait_for_rows(config, 450, timeout=180)
        assert not failures

    later = job_commits(config)[1:]
    assert sum(later) == 200 and len(later) >= 200 // fit, later
    assert max(later) <= fit, later  # planned again: about 1 MiB each
    assert_exactly_once(table_rows(config), producer.sent)
