"""The operator's metrics: counters count what happened while it ran, never a restart's burst."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from floe_operator import metrics

pytestmark = pytest.mark.unit


def value(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def status(failovers: int, **runs: dict) -> dict:
    return {"conditions": [{"type": "Ready", "status": "True"}],
            "sparkApplication": {"failovers": failovers},
            "maintenance": {"compaction": {"schedule": "0 3 * * *", **runs.get("compaction", {})},
                            "expire_snapshots": {"schedule": "0 4 * * *"}}}


def test_failovers_and_maintenance_runs_count_from_the_first_status_seen():
    where = {"namespace": "metrics-test", "name": "orders"}
    # An operator that starts sees a resource that failed over 5 times before: no burst.
    metrics.record_status(*where.values(), status(5), interval_seconds=30)
    assert value("floe_topic_failovers_total", **where) == 0
    assert value("floe_topic_commit_interval_seconds", **where) == 30
    assert value("floe_maintenance_last_run_failed", **where, action="compaction") == 0
    assert value("floe_maintenance_last_run_failed", **where, action="expire_snapshots") == 0
    metrics.record_status(*where.values(), status(7, compaction={"lastRun": {
        "time": "2026-11-26T03:00:00Z", "outcome": "Failed"}}))
    assert value("floe_topic_failovers_total", **where) == 2
    assert value("floe_maintenance_last_run_failed", **where, action="compaction") == 1
    assert value("floe_maintenance_runs_total", **where, action="compaction",
                 outcome="Failed") == 1
    # The same run seen again is not counted again; the next one, a success, is.
    metrics.record_status(*where.values(), status(7, compaction={"lastRun": {
        "time": "2026-11-26T03:00:00Z", "outcome": "Failed"}}))
    metrics.record_status(*where.values(), status(7, compaction={"lastRun": {
        "time": "2026-11-27T03:00:00Z", "outcome": "Succeeded"}}))
    assert value("floe_maintenance_runs_total", **where, action="compaction",
                 outcome="Failed") == 1
    assert value("floe_maintenance_runs_total", **where, action="compaction",
                 outcome="Succeeded") == 1
    assert value("floe_maintenance_last_run_failed", **where, action="compaction") == 0
    # A deleted resource's series go.
    metrics.forget(*where.values())
    assert value("floe_topic_failovers_total", **where) is None
    assert value("floe_maintenance_last_run_failed", **where, action="compaction") is None


def test_the_reconcile_histogram_has_one_series_for_all_resources():
    metrics.RECONCILE.observe(0.2)
    metrics.record_visit("metrics-test", "a")
    metrics.record_visit("metrics-test", "b")
    assert value("floe_reconcile_duration_seconds_count") >= 1
    assert value("floe_reconciles_total", namespace="metrics-test", name="a") == 1
