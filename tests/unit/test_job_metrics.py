"""The job's Kafka offset gauges: per topic, as a pool's driver lands several."""

from __future__ import annotations

import json
from types import SimpleNamespace

from prometheus_client import REGISTRY

from floe_sparkapp import metrics


def gauge(name: str, topic: str, partition: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"topic": topic, "partition": partition})


def test_each_topics_lag_is_behind_its_own_tables_offsets() -> None:
    done = SimpleNamespace(
        written=0, raw={}, dead_letters=0, dead_letter_failures=0, conflicts=0, schema_ids=()
    )
    metrics.record_batch(
        ["db.a"],
        [SimpleNamespace(**vars(done), offsets={0: 100}, vtts=None, commit_seconds=0.1)],
        0,
        0,
        0.5,
        "topic-a",
    )
    metrics.record_batch(
        ["db.b"],
        [SimpleNamespace(**vars(done), offsets={0: 5}, vtts=None, commit_seconds=0.1)],
        0,
        0,
        0.5,
        "topic-b",
    )
    latest = {"topic-a": {"0": 120}, "topic-b": {"0": 7}}
    metrics.record_progress([SimpleNamespace(latestOffset=json.dumps(latest))])
    assert gauge("floe_job_kafka_latest_offset", "topic-a", "0") == 120
    assert gauge("floe_job_kafka_lag_records", "topic-a", "0") == 20
    assert gauge("floe_job_kafka_latest_offset", "topic-b", "0") == 7
    assert gauge("floe_job_kafka_lag_records", "topic-b", "0") == 2
