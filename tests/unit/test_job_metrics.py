"""The job's progress line and offset gauges, from a micro-batch's progress as Spark writes it
(``StreamingQueryProgress.json``): what the listener reads in one call per batch."""

from __future__ import annotations

import json
import logging

import pytest

from floe_sparkapp import metrics

# A Kafka query's progress as Spark 4.1's StreamingQueryProgress.json gives it (trimmed of the
# fields the job does not read); the NaN rate Spark leaves out.
PROGRESS = {
    "id": "5d1a0f3e-8b7e-4f7a-9c57-0d2f7c1e9a11",
    "runId": "8a3c1f52-2e44-4c1e-9f0c-6a1d7c5b2e90",
    "name": "floe_orders",
    "timestamp": "2026-11-30T05:40:00.000Z",
    "batchId": 7,
    "batchDuration": 412,
    "numInputRows": 800,
    "processedRowsPerSecond": 1941.747572815534,
    "durationMs": {"addBatch": 351, "latestOffset": 12, "triggerExecution": 412},
    "sources": [
        {
            "description": "KafkaV2[Subscribe[orders]]",
            "startOffset": {"orders": {"0": 100, "1": 300}},
            "endOffset": {"orders": {"0": 500, "1": 700}},
            "latestOffset": {"orders": {"0": 520, "1": 700}},
            "numInputRows": 800,
        }
    ],
    "sink": {"description": "ForeachBatchSink"},
}


def gauge(name: str, partition: str) -> float | None:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, {"partition": partition})


def test_a_progress_is_logged_and_its_offsets_and_lag_recorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics._committed.clear()
    metrics._committed["db.orders"] = {0: 500, 1: 690}
    with caplog.at_level(logging.INFO, logger="floe.metrics"):
        metrics.ProgressLogger().progress(json.loads(json.dumps(PROGRESS)))
    [line] = [json.loads(r.getMessage()) for r in caplog.records if r.name == "floe.metrics"]
    assert line == {
        "event": "floe.progress",
        "name": "floe_orders",
        "id": "5d1a0f3e-8b7e-4f7a-9c57-0d2f7c1e9a11",
        "batch": 7,
        "input_rows": 800,
        "input_rows_per_second": 0.0,
        "processed_rows_per_second": 1941.7,
        "batch_ms": 412,
        "durations_ms": {"addBatch": 351, "latestOffset": 12, "triggerExecution": 412},
    }
    assert gauge("floe_job_kafka_latest_offset", "0") == 520
    assert gauge("floe_job_kafka_latest_offset", "1") == 700
    assert gauge("floe_job_kafka_lag_records", "0") == 20
    assert gauge("floe_job_kafka_lag_records", "1") == 10
    metrics._committed.clear()


def test_offsets_left_as_text_are_read_and_unreadable_ones_skipped() -> None:
    metrics.record_progress(
        [
            {"latestOffset": json.dumps({"orders": {"3": 42}})},
            {"latestOffset": "not json"},
            {"latestOffset": None},
        ]
    )
    assert gauge("floe_job_kafka_latest_offset", "3") == 42
