"""The streaming job: a Kafka topic into its Iceberg tables, exactly once; the wiring of the
query.

:func:`start` prepares the tables (created from the registry schema, evolved additively,
claimed), checks Kafka against them (:mod:`.kafka_offsets`), picks the starting offsets (the
tables', unless a checkpoint resumes at or below them) and starts a Structured Streaming query
on the session (:mod:`.session`) whose ``foreachBatch`` is a
:class:`~.batch_writer.BatchWriter`; :func:`run` keeps it running.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from . import catalog as catalogs
from . import checkpoint, metrics, partial_batch, schemaless, schemas
from .batch_writer import BatchWriter
from .commit import BranchCommitter, sweep_branches
from .commit_size import CommitSize
from .config import JobConfig, kafka_client_settings
from .contract import ROW_LEVEL
from .evolution import BreakingChange, evolve_for_writer
from .kafka_offsets import (
    DataLossError,
    check_offsets_available,
    check_topic_identity,
    floor_offsets,
    starting_offsets,
    topic_identity,
    topic_partitions,
    watermarks,
)
from .layout import KEY_FIELDS, ensure_table, evolve_partitioning
from .ledger import Committed, claim_table, head, last_commit, summary_properties
from .registry import Registry
from .session import build_session, checkpoint_store, spark_catalog_conf
from .upsert import with_deletion_vectors

log = logging.getLogger("floe.job")
# How often a job committing by volume (commit.minRecords) asks whether enough has arrived.
VOLUME_CHECK_SECONDS = 1


def registry_of(config: JobConfig) -> Registry | None:
    """The value subject's registry (for a raw value with a decoded key, the key's)."""
    if config.value.format != "raw" and config.value.schema_registry is not None:
        return Registry(config.value.schema_registry, config.registry_auth())
    key = config.key_registry()
    return Registry(key, config.registry_auth()) if key is not None else None


def prepare_table(config: JobConfig, registry: Registry | None) -> Any:
    """Creates the table when absent and evolves it to the subjects' latest schemas (the
    value's, and the key's when the key is decoded)."""
    value = key = None
    if registry is not None and config.value.format != "raw":
        latest = registry.latest()
        value = schemas.table_struct(
            latest, config.table.mode, config.value.message, config.value.conversions
        ).struct
    elif config.value.format == "json":  # without a registry: the declared columns, if any
        value = schemaless.configured_value(config.value)
    if config.key.decoded:
        key_registry = config.key_registry()
        assert key_registry is not None  # the contract: a decoded key needs the value's registry
        key = schemas.table_struct(
            Registry(key_registry, config.registry_auth()).latest(),
            message=config.key.message,
        ).struct
    catalog = catalogs.load_catalog(config.catalog())
    table, created = ensure_table(catalog, config.table, value, key)
    if created:
        log.info("created table %s", config.table.identifier)
    elif config.schema_evolution.mode == "additive":
        for column, struct in (("value", value), (KEY_FIELDS, key)):
            if struct is None:
                continue
            try:
                plan = evolve_for_writer(table, struct, column)
                if plan.needs_update:
                    log.info(
                        "evolved table %s: %s",
                        config.table.identifier,
                        "; ".join(str(c) for c in plan.changes),
                    )
            except BreakingChange as change:
                log.warning(
                    "table %s keeps its %s schema: %s", config.table.identifier, column, change
                )
    return table


def rewind_checkpoint(
    spark: SparkSession, config: JobConfig, committed: Committed, partitions: list[int]
) -> tuple[bool, dict[int, int]]:
    """Removes a checkpoint that would resume above the table's offsets (it outlived its table,
    or ``main`` was rolled back), so the query starts from the table's offsets.  Returns
    whether the query resumes from the checkpoint, and the floor of the partitions the table
    has no offsets for (:func:`floor_offsets`)."""
    location = config.checkpoint_location
    if removed := checkpoint.clear_unfinished_writes(spark, location):
        log.warning(
            "the checkpoint at %s held the unfinished write of a killed process's "
            "first batch (%s): removed, the batch runs again",
            location,
            ", ".join(removed),
        )
    resume = checkpoint.resume_offsets(spark, location, config.kafka.topic)
    if resume is None:
        return False, {}
    floor = floor_offsets(spark, config, sorted(set(resume) - set(committed.offsets)))
    ahead = checkpoint.ahead_of(resume, committed.offsets, floor)
    if not ahead:
        return True, floor
    log.warning(
        "the checkpoint at %s is ahead of table %s (%s): it is removed and the job "
        "starts from the table's offsets %s",
        location,
        config.table.identifier,
        "; ".join(ahead),
        committed.offsets or floor or config.kafka.starting_offsets,
    )
    checkpoint.remove(spark, location)
    return False, floor


def ready_table(spark: SparkSession, config: JobConfig, registry: Registry | None) -> Any:
    """The table made ready for the job: created or evolved, upgraded for deletion vectors
    (upsert, cdc), claimed for the writer, partitioned as the spec says (whatever
    schemaEvolution: a partition spec is the user's own change), its branches of interrupted
    batches dropped."""
    table = prepare_table(config, registry)
    if config.table.mode in ROW_LEVEL:
        table = with_deletion_vectors(
            spark, f"{config.table.catalog.name}.{config.table.identifier}", table
        )
    claim_table(table, config.writer)
    changes = evolve_partitioning(table, config.table)
    if changes:
        log.info(
            "evolved the partitioning of table %s: %s", config.table.identifier, "; ".join(changes)
        )
    try:
        swept = sweep_branches(table, config.writer)
        if swept:
            log.info(
                "dropped %d branch(es) of %s left by interrupted batches: %s",
                len(swept),
                config.table.identifier,
                ", ".join(swept),
            )
    except Exception as error:  # noqa: BLE001 - a left branch only pins its snapshot
        log.warning("could not drop the branches of interrupted batches: %s", error)
    return table


def table_commits(config: JobConfig, tables: list[Any]) -> list[Committed]:
    """What the topic's tables have committed (:func:`~.commit.last_commit` of each)."""
    return [
        last_commit(table, config.writer, config.kafka.topic, ref=config.table.ref)
        for table in tables
    ]


def rejoining(config: JobConfig, found: list[Committed]) -> list[bool]:
    """Which of a routed topic's tables (what they committed, :func:`table_commits`) join it
    where the other tables are: those that the newest commit of the topic's tables does not
    name among them (only the topic's own table, when it was not routed).  A route added goes
    on from there (a batch read again must not give it records another table holds); a route
    removed, then added back, too, not from its own older offsets (the topic's own table took
    its records meanwhile): no record lands in two tables."""
    dated = [c for c in found if c.timestamp_ms is not None]
    if len(found) == 1 or not dated:
        return [False] * len(found)
    names = [d.table.identifier for d in config.destinations()]
    newest = max(dated, key=lambda c: c.timestamp_ms or 0)
    known = newest.tables if newest.tables is not None else (names[0],)
    return [name not in known for name in names]


def start_position(config: JobConfig, found: list[Committed]) -> tuple[Committed, list[bool]]:
    """Where the query starts (:func:`lowest_commit` of the tables but those that join again)
    and which tables join again (:func:`rejoining`)."""
    rejoin = rejoining(config, found)
    return lowest_commit([c for c, again in zip(found, rejoin) if not again]), rejoin


def lowest_commit(found: list[Committed]) -> Committed:
    """Where the topic's tables (what they committed, :func:`table_commits`) are all committed
    up to: per partition, the lowest of their offsets.  The query starts there, and each table
    skips what it already has.  A table with no offsets yet (a route just added) goes on from
    where the others are."""
    if len(found) == 1:
        return found[0]
    committed = [c for c in found if c.offsets]
    if not committed:
        return Committed()
    partitions = set().union(*(c.offsets for c in committed))
    return Committed(
        offsets={
            p: min(c.offsets[p] for c in committed if p in c.offsets) for p in sorted(partitions)
        }
    )


def record_first_start(
    spark: SparkSession,
    config: JobConfig,
    tables: list[Any],
    partitions: list[int],
    topic_id: str | None,
) -> Committed:
    """A ``latest`` job's very first start: Kafka's end offsets now, committed (no rows) to
    each of the topic's tables, so that where it started outlives the checkpoint: a job that
    lost its checkpoint before its first batch goes on from there, not from Kafka's end
    again, and the records in between are not skipped."""
    offsets = {p: high for p, (_, high) in watermarks(config, partitions).items()}
    names, routing = config.recorded_routing()
    properties = summary_properties(
        config.writer,
        config.kafka.topic,
        offsets,
        None,
        config.generation,
        0,
        topic_id,
        names,
        routing,
        offsets if names else None,
    )
    for destination, table in zip(config.destinations(), tables):
        committer = BranchCommitter(
            spark,
            destination.table.catalog.name,
            destination.table.identifier,
            config.writer,
            destination.table.ref,
        )
        base = head(table, destination.table.ref)
        committer.publish_summary(base.snapshot_id if base is not None else None, properties)
    log.info(
        "first start of %s at Kafka's latest offsets %s: recorded on its tables",
        config.writer,
        offsets,
    )
    return Committed(offsets=offsets)


FIRST_FETCH_WAIT_MS = 100


def start(
    config: JobConfig,
    spark: SparkSession | None = None,
    *,
    available_now: bool = False,
    query_name: str | None = None,
    size: CommitSize | None = None,
) -> Any:
    """Starts the streaming query; returns it (``available_now`` stops once caught up).
    ``size``: the records a commit takes, as the job's last query left it (else sampled)."""
    if spark is None:
        spark = build_session(config)
        metrics.mark_start("session")
    for key, value in spark_catalog_conf(config).items():
        spark.conf.set(key, value)
    checkpoint_store(spark, config)
    metrics.register(spark)
    registry = registry_of(config)
    tables = [
        ready_table(spark, destination, registry_of(destination))
        for destination in config.destinations()
    ]
    identity = topic_identity(config)
    found = table_commits(config, tables)
    for table_committed in found:
        check_topic_identity(config, table_committed, identity)
    partial_batch.keep_routing(tables[0], config, found[0])
    if partial_batch.finish(
        spark,
        config,
        registry,
        tables[0],
        found[0],
        identity,
        lambda d: ready_table(spark, d, registry_of(d)),
    ):
        for table in tables:
            table.refresh()
        found = table_commits(config, tables)
    committed, rejoin = start_position(config, found)
    for destination, again, table_committed in zip(config.destinations(), rejoin, found):
        if again and table_committed.offsets:
            log.warning(
                "table %s was not among topic %s's tables when they last committed "
                "(its route was removed, then added back): it goes on from where the "
                "other tables are, %s, not from its own offsets %s; the records in "
                "between stay where they landed",
                destination.table.identifier,
                config.kafka.topic,
                committed.offsets,
                table_committed.offsets,
            )
        elif again:
            log.info(
                "table %s joins topic %s's tables (a route added): it goes on from where "
                "the other tables are, %s",
                destination.table.identifier,
                config.kafka.topic,
                committed.offsets,
            )
    check_offsets_available(config, committed)
    partitions = topic_partitions(config)
    resumes, floor = rewind_checkpoint(spark, config, committed, partitions)
    if (
        config.kafka.starting_offsets == "latest"
        and not resumes
        and not any(c.offsets for c in found)
    ):
        committed = record_first_start(spark, config, tables, partitions, identity)
    # (unless a checkpoint resumes; earliest is Spark's own -2, which retention cannot overtake)
    start_at = starting_offsets(
        config, committed, partitions, floor if config.kafka.starting_offsets == "latest" else None
    )
    if not resumes and committed.offsets:
        log.info(
            "no checkpoint at %s: starting from the table's offsets %s",
            config.checkpoint_location,
            committed.offsets,
        )
    size = size or CommitSize(config.commit)
    limit = size.planned(config, partitions)
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", config.kafka.bootstrap_servers)
        .option("subscribe", config.kafka.topic)
        .option("startingOffsets", start_at)
        .option("kafka.isolation.level", config.kafka.isolation_level)
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "true")
        .option("maxOffsetsPerTrigger", str(limit))
        # A new consumer's first fetch of a partition comes back empty after the broker
        # held it this long (500 ms by default) and Spark's consumer then fetches again:
        # every partition's first read in a job (a start's first batch) waited it.  The
        # source fetches only offsets it knows are there, so a fetch finds data at once
        # otherwise; kafka.properties can set it back.
        .option("kafka.fetch.max.wait.ms", str(FIRST_FETCH_WAIT_MS))
    )
    commit = config.commit
    if commit.min_records and not available_now:  # by volume, or by time at the latest
        reader = reader.option("minOffsetsPerTrigger", str(min(commit.min_records, limit))).option(
            "maxTriggerDelay", f"{commit.interval_seconds}s"
        )
    for key, value in kafka_client_settings(config).items():
        reader = reader.option(f"kafka.{key}", value)
    writer = (
        reader.load()
        .writeStream.foreachBatch(
            BatchWriter(
                config,
                spark,
                registry,
                [str(t.metadata.table_uuid) for t in tables],
                identity,
                [committed.offsets if again else None for again in rejoin],
                size=size,
            )
        )
        .option("checkpointLocation", config.checkpoint_location)
        .queryName(query_name or f"floe_{config.writer.replace('/', '_').replace('-', '_')}")
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        # With minRecords, the source is asked every second and plans a batch only once
        # enough has arrived or the interval has passed (Spark's Kafka source's own limits).
        every = VOLUME_CHECK_SECONDS if commit.min_records else commit.interval_seconds
        writer = writer.trigger(processingTime=f"{every} seconds")
    query = writer.start()
    metrics.mark_start("query")
    return query


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
) -> None:
    """Runs the query until it stops (``available_now``) or fails; raises what it failed with.

    A query stopped by :class:`CheckpointAhead` starts again, from the table's offsets; one
    stopped by :class:`.commit_size.Replan`, with the records a commit takes that its last
    batch showed (not counted among the ``restarts``).  SIGTERM stops the query and returns (a
    batch it interrupts is simply not committed)."""
    terminated = _StopOnSigterm()
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
            log.info("stopped by SIGTERM")
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


class _StopOnSigterm:
    """Stops the watched query on SIGTERM, also one started after the signal came.  Only the
    main thread can take signals: elsewhere it never fires."""

    def __init__(self) -> None:
        import signal
        import threading

        self.signalled = False
        self.query: Any = None
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        import threading

        self.signalled = True
        if self.query is not None:  # not from the handler: the main thread waits on the query
            threading.Thread(target=self.query.stop, daemon=True).start()

    def watch(self, query: Any) -> None:
        self.query = query
        if self.signalled:
            query.stop()


def _java_stack_trace(query: Any) -> str:
    failure = query._jsq.exception()
    if not failure.isDefined():
        return ""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    assert jvm is not None  # the query ran in this process's session
    return str(jvm.org.apache.commons.lang3.exception.ExceptionUtils.getStackTrace(failure.get()))
