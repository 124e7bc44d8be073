"""Commits by volume as well as by time (``commit.minRecords``): a burst commits as soon as
enough has arrived, a trickle waits for the interval, and nothing is lost or doubled."""

from __future__ import annotations

import time

import pytest

from floe_sparkapp.ledger import last_commit

from .jobkit import (
    AvroProducer, assert_exactly_once, create_topic, job_config, load_table, streaming,
    table_rows, wait_for_rows,
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
        stack, spark, tmp_path, unique_name):
    topic = f"volume-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 150)
    config = job_config(stack, tmp_path, topic, interval=INTERVAL)
    config = config.model_copy(update={"commit": config.commit.model_copy(
        update={"min_records": 100})})

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
