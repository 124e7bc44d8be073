"""Prometheus metrics of the operator, per resource, served on FLOE_METRICS_PORT (/metrics).

The gauges mirror the status the operator just wrote, so a dashboard and ``kubectl get kit``
never disagree; reconcile duration and errors are measured around each visit.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from .clock import epoch

LABELS = ("namespace", "name")

READY = Gauge("floe_topic_ready", "1 when the Ready condition is True.", LABELS)
LAG = Gauge("floe_topic_lag_records", "Records in Kafka not yet committed to the table.", LABELS)
FRESHNESS = Gauge("floe_topic_freshness_seconds",
                  "Age of the newest record timestamp committed to the table.", LABELS)
SNAPSHOT = Gauge("floe_topic_last_commit_timestamp_seconds",
                 "Commit time of the job's newest snapshot.", LABELS)
COMMITS = Counter("floe_topic_commits_total",
                  "Snapshots the job committed to the table, as the operator counted them.",
                  LABELS)
FAILOVERS = Gauge("floe_topic_failovers", "Times the operator recreated a failed job.", LABELS)
RECONCILE = Histogram("floe_reconcile_duration_seconds", "Duration of one reconcile visit.",
                      LABELS, buckets=(0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.35, 0.5, 0.75, 1,
                                       1.5, 2.5, 5, 10, 30))
ERRORS = Counter("floe_reconcile_errors_total", "Reconcile visits that raised an error.", LABELS)

_PER_TOPIC = (READY, LAG, FRESHNESS, SNAPSHOT, COMMITS, FAILOVERS, RECONCILE, ERRORS)


def serve(port: int) -> None:
    if port:
        start_http_server(port)


def record_status(namespace: str, name: str, status: dict[str, Any]) -> None:
    labels = (namespace, name)
    ready = [c for c in status.get("conditions", []) if c.get("type") == "Ready"]
    READY.labels(*labels).set(1 if ready and ready[0].get("status") == "True" else 0)
    if (status.get("offsets") or {}).get("lag") is not None:
        LAG.labels(*labels).set(status["offsets"]["lag"])
    if status.get("freshnessSeconds") is not None:
        FRESHNESS.labels(*labels).set(status["freshnessSeconds"])
    committed = (status.get("table") or {}).get("committedAt")
    if committed:
        SNAPSHOT.labels(*labels).set(epoch(committed))
    FAILOVERS.labels(*labels).set((status.get("sparkApplication") or {}).get("failovers", 0))


def record_commits(namespace: str, name: str, new_commits: int) -> None:
    COMMITS.labels(namespace, name).inc(new_commits)


def forget(namespace: str, name: str) -> None:
    """Drops a deleted resource's series."""
    for metric in _PER_TOPIC:
        try:
            metric.remove(namespace, name)
        except KeyError:
            pass
