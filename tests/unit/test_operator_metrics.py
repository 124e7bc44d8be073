"""The operator's metrics: counters count what happened while it ran, never a restart's burst."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from floe_operator import metrics

pytestmark = pytest.mark.unit


def value(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def status(failovers: int, **runs: dict) -> dict:
    return {
        "conditions": [{"type": "Ready", "status": "True"}],
        "sparkApplication": {"failovers": failovers},
        "maintenance": {
            "compaction": {"schedule": "0 3 * * *", **runs.get("compaction", {})},
            "expire_snapshots": {"schedule": "0 4 * * *"},
        },
    }


def test_failovers_and_maintenance_runs_count_from_the_first_status_seen():
    where = {"namespace": "metrics-test", "name": "orders"}
    # An operator that starts sees a resource that failed over 5 times before: no burst.
    metrics.record_status(*where.values(), status(5), interval_seconds=30)
    assert value("floe_topic_failovers_total", **where) == 0
    assert value("floe_topic_commit_interval_seconds", **where) == 30
    assert value("floe_maintenance_last_run_failed", **where, action="compaction") == 0
    assert value("floe_maintenance_last_run_failed", **where, action="expire_snapshots") == 0
    metrics.record_status(
        *where.values(),
        status(7, compaction={"lastRun": {"time": "2026-11-26T03:00:00Z", "outcome": "Failed"}}),
    )
    assert value("floe_topic_failovers_total", **where) == 2
    assert value("floe_maintenance_last_run_failed", **where, action="compaction") == 1
    assert value("floe_maintenance_runs_total", **where, action="compaction", outcome="Failed") == 1
    # The same run seen again is not counted again; the next one, a success, is.
    metrics.record_status(
        *where.values(),
        status(7, compaction={"lastRun": {"time": "2026-11-26T03:00:00Z", "outcome": "Failed"}}),
    )
    metrics.record_status(
        *where.values(),
        status(7, compaction={"lastRun": {"time": "2026-11-27T03:00:00Z", "outcome": "Succeeded"}}),
    )
    assert value("floe_maintenance_runs_total", **where, action="compaction", outcome="Failed") == 1
    assert (
        value("floe_maintenance_runs_total", **where, action="compaction", outcome="Succeeded") == 1
    )
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


def test_the_lag_is_the_visits_own_and_a_stall_is_a_gauge():
    where = {"namespace": "metrics-test", "name": "stalled"}
    shown = {
        "conditions": [{"type": "Ready", "status": "False", "reason": "Stalled"}],
        "offsets": {"lag": 5},
        "landedThrough": "2026-11-18T11:06:33Z",
    }
    metrics.record_status(*where.values(), shown, lag=40)
    assert value("floe_topic_lag_records", **where) == 40  # not the status's older 5
    assert value("floe_topic_stalled", **where) == 1
    assert value("floe_topic_freshness_seconds", **where) > 0
    metrics.record_status(
        *where.values(),
        {"conditions": [{"type": "Ready", "status": "True", "reason": "Landing"}]},
        lag=0,
    )
    assert value("floe_topic_stalled", **where) == 0
    metrics.forget(*where.values())
    assert value("floe_topic_stalled", **where) is None


def test_the_operator_says_what_the_jobs_driver_says_it_is_doing(monkeypatch):
    """The job's floe_job_activity, as its driver serves it, read back by the operator."""
    from prometheus_client import generate_latest

    from floe_operator import observe
    from floe_operator.view import App
    from floe_sparkapp import metrics as job_metrics

    assert set(job_metrics.ACTIVITIES) == set(observe.ACTIVITIES)
    job_metrics.doing("committing", 17)
    asked = []

    def proxied(namespace, pod, port):
        asked.append((namespace, pod, port))
        return generate_latest(REGISTRY).decode()

    monkeypatch.setattr(observe.kube, "job_metrics", proxied)
    said = observe.job_activity("data", App("floe-orders", driver="floe-orders-driver"))
    assert said.startswith("committing micro-batch 17 to the catalog (since 20")
    assert asked == [("data", "floe-orders-driver", 9464)]
    job_metrics.doing("waiting")
    assert observe.job_activity("data", App("floe-orders", driver="x")).startswith(
        "between micro-batches"
    )

    def refused(namespace, pod, port):
        raise ConnectionError("refused")

    monkeypatch.setattr(observe.kube, "job_metrics", refused)
    assert "could not be read (ConnectionError: refused)" in observe.job_activity(
        "data", App("floe-orders", driver="x")
    )
