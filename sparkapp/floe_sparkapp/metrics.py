"""Progress metrics of the streaming query, as one structured (JSON) log line per event."""

from __future__ import annotations

import json
import logging

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
