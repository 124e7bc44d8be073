"""The job's metrics: Prometheus metrics the driver serves while it runs (``FLOE_METRICS_PORT``,
``/metrics``), and the streaming query's progress as one structured (JSON) log line per event.

The metrics are per table where a topic is routed (``table``, its identifier); the resource's
namespace and name come from the pod's labels where Prometheus scrapes it (the chart's
PodMonitor).  Counters start at zero for every table (and reason) when the job starts, so a
query over them has series before the first record.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import Counter, Enum, Gauge, Histogram, start_http_server
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

log = logging.getLogger("floe.metrics")

PORT_VARIABLE = "FLOE_METRICS_PORT"
# Micro-batches and commits take from a fraction of a second to minutes.
SECONDS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)

ROWS = Counter(
    "floe_job_rows",
    "Rows committed to the table (an upsert or cdc table: records applied).",
    ["table"],
)
RAW = Counter(
    "floe_job_records_raw",
    "Records kept raw (value_raw, the reason in value_error), by reason.",
    ["table", "reason"],
)
DEAD_LETTERS = Counter(
    "floe_job_dead_letters", "Records kept raw that were sent to the dead-letter topic.", ["table"]
)
DEAD_LETTER_FAILURES = Counter(
    "floe_job_dead_letter_failures",
    "Records kept raw that the dead-letter topic refused (they are in the table only).",
    ["table"],
)
COMMITS = Counter("floe_job_commits", "Snapshots the job committed.", ["table"])
CONFLICTS = Counter(
    "floe_job_commit_conflicts", "Commits tried again after another writer's commit.", ["table"]
)
INPUT_RECORDS = Counter("floe_job_input_records", "Records the job read from Kafka.")
INPUT_BYTES = Counter(
    "floe_job_input_bytes", "Bytes of the keys and values the job read from Kafka."
)
BATCHES = Counter("floe_job_batches", "Micro-batches the job wrote.")
BATCH_SECONDS = Histogram(
    "floe_job_batch_duration_seconds",
    "Seconds a micro-batch took, from its start to its last table's commit.",
    buckets=SECONDS,
)
COMMIT_SECONDS = Histogram(
    "floe_job_commit_duration_seconds",
    "Seconds one table's commit of a micro-batch took.",
    buckets=SECONDS,
)
LANDED = Gauge(
    "floe_job_landed_timestamp_seconds",
    "Kafka timestamp the table holds every "
    "partition's records through (the oldest of the partitions' newest landed "
    "records).",
    ["table"],
)
COMMITTED = Gauge(
    "floe_job_committed_offset",
    "The next offset the table's commits hold, per Kafka partition.",
    ["table", "partition"],
)
LATEST = Gauge(
    "floe_job_kafka_latest_offset",
    "The partition's end offset in Kafka when the newest micro-batch was planned.",
    ["topic", "partition"],
)
LAG = Gauge(
    "floe_job_kafka_lag_records",
    "Records in Kafka beyond what the job committed, per "
    "partition, when the newest micro-batch was planned.",
    ["topic", "partition"],
)
SCHEMAS = Gauge(
    "floe_job_schema_seen_timestamp_seconds",
    "When the job last wrote a record of the writer schema id.",
    ["schema_id"],
)
STARTED = Gauge("floe_job_start_time_seconds", "When the job's process started.")
# What the driver is doing now, for a stall to say where the job is stuck (the operator reads
# these when a job has not committed for several intervals while Kafka has records for it).
# (The operator says them in words: floe_operator.observe.ACTIVITIES.)
ACTIVITIES = (
    "starting",
    "waiting",
    "reading",
    "loading_table",
    "sending_dead_letters",
    "writing",
    "committing",
    "expiring",
    "retrying",
)
ACTIVITY = Enum(
    "floe_job_activity",
    "What the driver is doing now (1 for the current state).",
    states=list(ACTIVITIES),
)
ACTIVITY_SINCE = Gauge(
    "floe_job_activity_since_timestamp_seconds",
    "When the driver began what floe_job_activity says it is doing.",
)
BATCH = Gauge("floe_job_batch_id", "The micro-batch the driver writes now, or wrote last.")
INFO = Gauge(
    "floe_job_info",
    "The job's writer (namespace/name) and floe's version; always 1.",
    ["writer", "version"],
)


class ProgressLogger(StreamingQueryListener):
    """Logs rows/s, batch duration and its phases for every micro-batch of floe's queries.

    The batch writer adds its own line per batch (rows, bytes, decode failures, dead letters,
    commit duration and conflicts), so the two together cover what the job reports.
    """

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802 (Spark's names)
        log.info(
            json.dumps(
                {
                    "event": "floe.query.started",
                    "name": event.name,
                    "id": str(event.id),
                    "run_id": str(event.runId),
                }
            )
        )

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802
        progress = event.progress
        record_progress(progress.sources)
        log.info(
            json.dumps(
                {
                    "event": "floe.progress",
                    "name": progress.name,
                    "id": str(progress.id),
                    "batch": progress.batchId,
                    "input_rows": progress.numInputRows,
                    "input_rows_per_second": round(progress.inputRowsPerSecond or 0.0, 1),
                    "processed_rows_per_second": round(progress.processedRowsPerSecond or 0.0, 1),
                    "batch_ms": progress.batchDuration,
                    "durations_ms": dict(progress.durationMs or {}),
                }
            )
        )

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802
        log.info(
            json.dumps(
                {"event": "floe.query.terminated", "id": str(event.id), "error": event.exception}
            )
        )


_registered: set[int] = set()
_registering = threading.Lock()  # (a pool's members start their queries side by side)


def register(spark: SparkSession) -> None:
    """Adds the listener to a session once."""
    key = id(spark)
    with _registering:
        if key not in _registered:
            spark.streams.addListener(ProgressLogger())
            _registered.add(key)


# When this process's job got to each step of its start (epoch seconds), for one log line at its
# first commit: how long a start (a failover, a spec change) keeps the table waiting, and where.
_start: dict[str, float] = {}


def mark_start(step: str, at: float | None = None) -> None:
    """Records the first time the process reached ``step`` (``main``: the job's entry point;
    ``session``: its SparkSession built; ``query``: its tables ready and its query started).
    A process that never marked ``main`` (a test running the job in its own session) reports
    nothing."""
    _start.setdefault(step, time.time() if at is None else at)


def starting(writer: str, at: float) -> None:
    """Marks the job's entry point (``at``) and logs that it starts."""
    mark_start("main", at)
    log.info(json.dumps({"event": "floe.starting", "writer": writer}))


def report_start(spark: SparkSession, writer: str) -> None:
    """Logs, once, the job's start up to its first commit, step by step: the process (the
    earlier of the JVM and Python) to the entry point, to the session, to the query, to the
    first batch committed."""
    if "main" not in _start or "reported" in _start:
        return
    now = _start["reported"] = time.time()
    try:
        view: Any = spark.sparkContext._jvm  # (None without a JVM: caught as any failure)
        jvm = view.java.lang.management.ManagementFactory.getRuntimeMXBean().getStartTime() / 1000
    except Exception:  # noqa: BLE001 - the line is still worth having without it
        jvm = _start["main"]
    began = min(jvm, _start["main"])
    main, session = _start["main"], _start.get("session", _start["main"])
    query = _start.get("query", session)
    log.info(
        json.dumps(
            {
                "event": "floe.started",
                "writer": writer,
                "process_started": round(began, 3),
                "jvm_started": round(jvm, 3),
                "launch_seconds": round(main - began, 3),  # spark-submit's JVM starting Python
                "session_seconds": round(session - main, 3),  # locally, the JVM starts here
                "tables_seconds": round(query - session, 3),
                "first_batch_seconds": round(now - query, 3),
                "seconds": round(now - began, 3),
            }
        )
    )


# --- Prometheus ---------------------------------------------------------------------------


def serve(writer: str, tables: Iterable[str], started: float) -> None:
    """Serves the metrics on ``FLOE_METRICS_PORT`` (the pod's ``metrics`` port), if set; every
    table's counters start at zero."""
    from . import version
    from .contract import RAW_REASONS

    port = int(os.environ.get(PORT_VARIABLE) or 0)
    if not port:
        return
    STARTED.set(started)
    ACTIVITY_SINCE.set(started)
    INFO.labels(writer, version()).set(1)
    for table in tables:
        for counter in (ROWS, DEAD_LETTERS, DEAD_LETTER_FAILURES, COMMITS, CONFLICTS):
            counter.labels(table)
        for reason in RAW_REASONS:
            RAW.labels(table, reason)
    try:
        start_http_server(port)
    except OSError as error:  # the job lands its topic all the same
        log.warning("could not serve metrics on port %d: %s", port, error)


_activity = ["starting"]


def doing(activity: str, batch: int | None = None) -> None:
    """Notes what the driver does from now on (one of ACTIVITIES), and the batch it is on."""
    if batch is not None:
        BATCH.set(batch)
    if activity != _activity[0]:
        _activity[0] = activity
        ACTIVITY.state(activity)
        ACTIVITY_SINCE.set(time.time())


# Per table, its topic (a pool's driver lands several) and the offsets the job committed.
_committed: dict[str, tuple[str, dict[int, int]]] = {}


def record_batch(
    tables: list[str],
    outcomes: list[Any],
    input_rows: int,
    input_bytes: int,
    seconds: float,
    topic: str,
) -> None:
    """What one micro-batch of ``topic`` did, per table (``outcomes``:
    :class:`.table_writer.Outcome`)."""
    now = time.time()
    BATCHES.inc()
    BATCH_SECONDS.observe(seconds)
    INPUT_RECORDS.inc(input_rows)
    INPUT_BYTES.inc(input_bytes)
    for table, outcome in zip(tables, outcomes):
        ROWS.labels(table).inc(outcome.written)
        for reason, count in outcome.raw.items():
            RAW.labels(table, reason).inc(count)
        DEAD_LETTERS.labels(table).inc(outcome.dead_letters)
        DEAD_LETTER_FAILURES.labels(table).inc(outcome.dead_letter_failures)
        CONFLICTS.labels(table).inc(outcome.conflicts)
        for schema_id in outcome.schema_ids:
            SCHEMAS.labels(str(schema_id)).set(now)
        if outcome.offsets is None:  # nothing new for this table
            continue
        COMMITS.labels(table).inc()
        COMMIT_SECONDS.observe(outcome.commit_seconds)
        if outcome.vtts is not None:
            LANDED.labels(table).set(outcome.vtts / 1000)
        _committed[table] = (topic, dict(outcome.offsets))
        for partition, offset in outcome.offsets.items():
            COMMITTED.labels(table, str(partition)).set(offset)


def record_progress(sources: list[Any]) -> None:
    """Kafka's end offsets when the newest micro-batch was planned, and each topic's lag
    behind the offsets every table of it committed."""
    for source in sources or []:
        try:
            latest = json.loads(source.latestOffset or "null") or {}
        except (TypeError, ValueError):
            continue
        for topic, partitions in latest.items():
            # (a copy: a pool's members record their batches in threads of their own)
            mine = [c for of, c in list(_committed.values()) if of == topic]
            for partition, end in partitions.items():
                LATEST.labels(topic, partition).set(end)
                held = [c[int(partition)] for c in mine if int(partition) in c]
                if held:
                    LAG.labels(topic, partition).set(max(0, end - min(held)))
