"""Prometheus metrics of the operator, served on FLOE_METRICS_PORT (/metrics).

The per-resource gauges (``namespace``, ``name`` labels) mirror the status the operator just
wrote, so a dashboard and ``kubectl get kit`` never disagree. Counters that the status holds as
totals (failovers, maintenance runs) count what this process saw happen: a resource's first
status after the operator starts is their baseline, so an operator restart never shows as a
burst. The reconcile histogram has no per-resource labels (one series per bucket, however many
resources); the visits per resource are a counter.
"""

from __future__ import annotations

import time
from contextlib import suppress
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from floe_sparkapp import version

from .clock import epoch
from .status import STALLED as STALLED_REASON

LABELS = ("namespace", "name")

READY = Gauge("floe_topic_ready", "1 when the Ready condition is True.", LABELS)
LAG = Gauge("floe_topic_lag_records", "Records in Kafka not yet committed to the table.", LABELS)
FRESHNESS = Gauge(
    "floe_topic_freshness_seconds",
    "Age of the newest record timestamp committed to the table.",
    LABELS,
)
STALLED = Gauge(
    "floe_topic_stalled",
    "1 while the running job has committed nothing for "
    "several commit intervals though Kafka has records for it (Ready: Stalled).",
    LABELS,
)
SNAPSHOT = Gauge(
    "floe_topic_last_commit_timestamp_seconds", "Commit time of the job's newest snapshot.", LABELS
)
INTERVAL = Gauge("floe_topic_commit_interval_seconds", "The spec's commit interval.", LABELS)
COMMITS = Counter(
    "floe_topic_commits_total",
    "Snapshots the job committed to the table, as the operator counted them.",
    LABELS,
)
FAILOVERS = Counter(
    "floe_topic_failovers_total", "Times the operator recreated a failed or ended job.", LABELS
)
MAINTENANCE_RUNS = Counter(
    "floe_maintenance_runs_total",
    "Maintenance runs that recorded their outcome on the table.",
    (*LABELS, "action", "outcome"),
)
MAINTENANCE_FAILED = Gauge(
    "floe_maintenance_last_run_failed", "1 when the action's last run failed.", (*LABELS, "action")
)
RECONCILES = Counter("floe_reconciles_total", "Reconcile visits finished.", LABELS)
RECONCILE = Histogram(
    "floe_reconcile_duration_seconds",
    "Duration of one reconcile visit.",
    buckets=(0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.35, 0.5, 0.75, 1, 1.5, 2.5, 5, 10, 30),
)
ERRORS = Counter("floe_reconcile_errors_total", "Reconcile visits that raised an error.", LABELS)
BUILD = Gauge("floe_build_info", "floe's version; always 1.", ("version",))

_PER_TOPIC = (
    READY,
    LAG,
    FRESHNESS,
    STALLED,
    SNAPSHOT,
    INTERVAL,
    COMMITS,
    FAILOVERS,
    RECONCILES,
    ERRORS,
)
_PER_ACTION = (MAINTENANCE_RUNS, MAINTENANCE_FAILED)

# What the last status said, per resource: failovers and each action's last run time.
_seen: dict[tuple[str, str], dict[str, Any]] = {}


def serve(port: int) -> None:
    BUILD.labels(version()).set(1)
    if port:
        start_http_server(port)


def record_status(
    namespace: str,
    name: str,
    status: dict[str, Any],
    interval_seconds: float | None = None,
    lag: int | None = None,
) -> None:
    """The gauges from the status a visit wrote, and ``lag``, the one the visit saw (the
    status's lag is refreshed only when it tells something new: :func:`status.steady_lag`)."""
    labels = (namespace, name)
    ready = [c for c in status.get("conditions", []) if c.get("type") == "Ready"]
    READY.labels(*labels).set(1 if ready and ready[0].get("status") == "True" else 0)
    STALLED.labels(*labels).set(1 if ready and ready[0].get("reason") == STALLED_REASON else 0)
    if lag is None:
        lag = (status.get("offsets") or {}).get("lag")
    if lag is not None:
        LAG.labels(*labels).set(lag)
    if status.get("landedThrough"):
        FRESHNESS.labels(*labels).set(max(0.0, time.time() - epoch(status["landedThrough"])))
    committed = (status.get("table") or {}).get("committedAt")
    if committed:
        SNAPSHOT.labels(*labels).set(epoch(committed))
    if interval_seconds is not None:
        INTERVAL.labels(*labels).set(interval_seconds)
    ERRORS.labels(*labels)
    seen = _seen.get(labels)
    failovers = (status.get("sparkApplication") or {}).get("failovers", 0)
    scheduled = {
        action: entry for action, entry in (status.get("maintenance") or {}).items() if entry
    }
    runs = {action: entry["lastRun"] for action, entry in scheduled.items() if entry.get("lastRun")}
    FAILOVERS.labels(*labels).inc(max(0, failovers - seen["failovers"]) if seen else 0)
    for action in scheduled:  # 0 until a run failed
        run = runs.get(action) or {}
        MAINTENANCE_FAILED.labels(*labels, action).set(1 if run.get("outcome") == "Failed" else 0)
    for action, run in runs.items():
        new = seen is not None and (seen["runs"].get(action) or {}).get("time") != run.get("time")
        MAINTENANCE_RUNS.labels(*labels, action, str(run.get("outcome", "Unknown"))).inc(
            1 if new else 0
        )
    _seen[labels] = {"failovers": failovers, "runs": runs}


def record_visit(namespace: str, name: str) -> None:
    RECONCILES.labels(namespace, name).inc()


def record_commits(namespace: str, name: str, new_commits: int) -> None:
    COMMITS.labels(namespace, name).inc(new_commits)


def forget(namespace: str, name: str) -> None:
    """Drops a deleted resource's series."""
    _seen.pop((namespace, name), None)
    for metric in _PER_TOPIC:
        with suppress(KeyError):
            metric.remove(namespace, name)
    for metric in _PER_ACTION:
        for labels in [s for s in list(metric._metrics) if s[:2] == (namespace, name)]:
            metric.remove(*labels)
