"""The streaming job: a Kafka topic into its Iceberg tables, exactly once.

:func:`run` keeps the query :func:`~.query.start` starts running: it starts it again after a
checkpoint found ahead of the table, a commit's size planned anew or Spark's replay metrics
failure, says DataLoss where the query ran into lost records, and stops it on SIGTERM.  The
tables are made ready in :mod:`.prepare`, where the query starts is :mod:`.start_position`'s.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from . import catalog as catalogs
from . import checkpoint
from .batch_writer import BatchWriter
from .commit_size import CommitSize
from .config import JobConfig
from .kafka_offsets import DataLossError, check_offsets_available
from .prepare import prepare_table, ready_table, registry_of
from .query import FIRST_FETCH_WAIT_MS, VOLUME_CHECK_SECONDS, start
from .session import spark_catalog_conf
from .start_position import (
    lowest_commit,
    record_first_start,
    rejoining,
    rewind_checkpoint,
    start_position,
    table_commits,
)

__all__ = [
    "FIRST_FETCH_WAIT_MS",
    "VOLUME_CHECK_SECONDS",
    "BatchWriter",
    "Stop",
    "StopOnSigterm",
    "lowest_commit",
    "prepare_table",
    "ready_table",
    "record_first_start",
    "registry_of",
    "rejoining",
    "rewind_checkpoint",
    "run",
    "spark_catalog_conf",
    "start",
    "start_position",
    "table_commits",
]

log = logging.getLogger("floe.job")


# Spark 4.1's Kafka source throws this from its progress metrics right after it replays a batch
# from the offset log (a restart after a crash between planning and committing a batch).  The
# batch itself has run and been committed by then, so starting the query again moves on.
_REPLAY_METRICS_BUG = "KafkaMicroBatchStream.metrics"


def run(
    config: JobConfig,
    spark: SparkSession | None = None,
    *,
    available_now: bool = False,
    timeout: float | None = None,
    restarts: int = 3,
    stop: Stop | None = None,
) -> None:
    """Runs the query until it stops (``available_now``) or fails; raises what it failed with.

    A query stopped by :class:`CheckpointAhead` starts again, from the table's offsets; one
    stopped by :class:`.commit_size.Replan`, with the records a commit takes that its last
    batch showed (not counted among the ``restarts``).  SIGTERM (or ``stop``, when given: a
    pool's member) stops the query and returns (a batch it interrupts is simply not
    committed)."""
    terminated = stop if stop is not None else StopOnSigterm()
    size = CommitSize(config.commit)
    attempt = 0
    while attempt <= restarts:
        query = start(config, spark, available_now=available_now, size=size)
        terminated.watch(query)
        try:
            finished = query.awaitTermination(timeout)
        except StreamingQueryException:
            finished = True
        if not finished:
            query.stop()
        if terminated.signalled:
            log.info("stopped by %s", terminated.by)
            return
        error = query.exception()
        if error is None:
            return
        trace = _java_stack_trace(query)
        if size.replan is not None and ("Replan: " in str(error) or "Replan: " in trace):
            dropped = checkpoint.drop_planned(
                spark or SparkSession.builder.getOrCreate(), config.checkpoint_location
            )
            log.info(
                "the query starts again with at most %d records a commit (batch %s planned anew)",
                size.replan,
                dropped,
            )
            size.replanned()
            continue
        attempt += 1
        if "CheckpointAhead: " in str(error) or "CheckpointAhead: " in trace:
            log.warning(
                "restarting the query from the table's offsets (attempt %d of %d): %s",
                attempt,
                restarts,
                str(error).splitlines()[0][:300],
            )
            continue
        if _REPLAY_METRICS_BUG in trace:
            log.warning(
                "restarting the query after Spark's replay metrics failure (attempt %d of %d)",
                attempt,
                restarts,
            )
            continue
        lost = _data_loss(config)
        if lost is not None:
            raise lost from error
        raise error
    raise RuntimeError(f"query kept failing after {restarts} restarts")


def _data_loss(config: JobConfig, tries: int = 5, pause: float = 3) -> DataLossError | None:
    """Whether a failed query ran into lost records: the topic deleted and created again, or
    retention deleting what the table has not got, while the query ran. Spark's Kafka source
    fails on these in its own words; the job then says DataLoss, as it does when it finds them
    at its start, so that it is not restarted only to stop again.  A topic being deleted and
    created again may be missing for a moment: asked again a few times."""
    for attempt in range(tries):
        try:
            catalog = catalogs.load_catalog(config.catalog())
            tables = [catalog.load_table(d.table.identifier) for d in config.destinations()]
            check_offsets_available(
                config, start_position(config, table_commits(config, tables))[0]
            )
            return None
        except DataLossError as error:
            return error
        except Exception as error:  # noqa: BLE001 - cannot tell yet
            log.warning(
                "could not check Kafka's offsets against the table's (%d of %d): %s",
                attempt + 1,
                tries,
                str(error).splitlines()[0][:300],
            )
            time.sleep(pause)
    return None  # the query's own failure stands


class Stop:
    """Stops the watched query when asked (:meth:`request`), also one started after that."""

    by = "request"

    def __init__(self) -> None:
        self.signalled = False
        self.query: Any = None
        self._asked = threading.Event()

    def request(self) -> None:
        self.signalled = True
        self._asked.set()
        if self.query is not None:  # (not from a signal handler: a thread waits on the query)
            threading.Thread(target=self.query.stop, daemon=True).start()

    def watch(self, query: Any) -> None:
        self.query = query
        if self.signalled:
            query.stop()

    def wait(self, seconds: float | None) -> bool:
        """Whether a stop was asked for within ``seconds``."""
        return self._asked.wait(seconds)


class StopOnSigterm(Stop):
    """A :class:`Stop` that SIGTERM asks.  Only the main thread can take signals: elsewhere it
    never fires."""

    by = "SIGTERM"

    def __init__(self) -> None:
        import signal

        super().__init__()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda signum, frame: self.request())


def _java_stack_trace(query: Any) -> str:
    failure = query._jsq.exception()
    if not failure.isDefined():
        return ""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    assert jvm is not None  # the query ran in this process's session
    return str(jvm.org.apache.commons.lang3.exception.ExceptionUtils.getStackTrace(failure.get()))
