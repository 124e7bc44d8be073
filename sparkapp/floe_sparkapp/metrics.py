"""Progress metrics of the streaming query, as one structured (JSON) log line per event."""

from __future__ import annotations

import json
import logging
import time

from pyspark.sql.streaming import StreamingQueryListener

log = logging.getLogger("floe.metrics")


class ProgressLogger(StreamingQueryListener):
    """Logs rows/s, batch duration and its phases for every micro-batch of floe's queries.

    The batch writer adds its own line per batch (rows, bytes, decode failures, dead letters,
    commit duration and conflicts), so the two together cover what the job reports.
    """

    def onQueryStarted(self, event) -> None:  # noqa: N802 (Spark's names)
        log.info(json.dumps({"event": "floe.query.started", "name": event.name,
                             "id": str(event.id), "run_id": str(event.runId)}))

    def onQueryProgress(self, event) -> None:  # noqa: N802
        progress = event.progress
        log.info(json.dumps({
            "event": "floe.progress",
            "name": progress.name,
            "id": str(progress.id),
            "batch": progress.batchId,
            "input_rows": progress.numInputRows,
            "input_rows_per_second": round(progress.inputRowsPerSecond or 0.0, 1),
            "processed_rows_per_second": round(progress.processedRowsPerSecond or 0.0, 1),
            "batch_ms": progress.batchDuration,
            "durations_ms": dict(progress.durationMs or {}),
        }))

    def onQueryIdle(self, event) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event) -> None:  # noqa: N802
        log.info(json.dumps({"event": "floe.query.terminated", "id": str(event.id),
                             "error": event.exception}))


_registered: set[int] = set()


def register(spark) -> None:
    """Adds the listener to a session once."""
    key = id(spark)
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


def report_start(spark, writer: str) -> None:
    """Logs, once, the job's start up to its first commit, step by step: the process (the
    earlier of the JVM and Python) to the entry point, to the session, to the query, to the
    first batch committed."""
    if "main" not in _start or "reported" in _start:
        return
    now = _start["reported"] = time.time()
    try:
        jvm = spark.sparkContext._jvm.java.lang.management.ManagementFactory \
            .getRuntimeMXBean().getStartTime() / 1000
    except Exception:  # noqa: BLE001 - the line is still worth having without it
        jvm = _start["main"]
    began = min(jvm, _start["main"])
    main, session = _start["main"], _start.get("session", _start["main"])
    query = _start.get("query", session)
    log.info(json.dumps({
        "event": "floe.started", "writer": writer,
        "process_started": round(began, 3), "jvm_started": round(jvm, 3),
        "launch_seconds": round(main - began, 3),  # spark-submit's JVM starting Python
        "session_seconds": round(session - main, 3),  # locally, the JVM starts here
        "tables_seconds": round(query - session, 3),
        "first_batch_seconds": round(now - query, 3),
        "seconds": round(now - began, 3)}))
