"""The streaming job: a Kafka topic into its Iceberg table, exactly once.

:func:`start` prepares the table (created from the registry schema, evolved additively), picks
the starting offsets (the table's, unless a checkpoint resumes at or below them) and starts a
Structured Streaming query whose ``foreachBatch`` runs :class:`BatchWriter`.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import catalog as catalogs
from . import checkpoint, metrics, routing, schemas
from .commit import sweep_branches
from .ledger import Committed, claim_table, last_commit, merge_offsets
from .config import JobConfig, kafka_client_settings, kafka_consumer
from .contract import ROW_LEVEL
from .decode import frame
from .evolution import BreakingChange, evolve_for_writer
from .layout import KEY_FIELDS, ensure_table
from .librdkafka import librdkafka_settings
from .registry import Registry
from .table_writer import TableWriter
from .upsert import with_deletion_vectors

log = logging.getLogger("floe.job")


class DataLossError(RuntimeError):
    """Kafka no longer has records the table has not got: never skipped silently."""


def _consumer(config: JobConfig) -> Any:
    """A confluent-kafka consumer of the job's consumer group (no subscription)."""
    return kafka_consumer(config, config.consumer_group)


def spark_catalog_conf(config: JobConfig) -> dict[str, str]:
    conf = catalogs.spark_conf(config.catalog())
    # The job changes the table through PyIceberg too (creation, evolution): never cache it.
    conf[f"spark.sql.catalog.{config.table.catalog.name}.cache-enabled"] = "false"
    return conf


def build_session(config: JobConfig) -> SparkSession:
    builder = SparkSession.builder.appName(f"floe {config.writer}")
    builder = builder.config("spark.sql.extensions",
                             "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    for key, value in spark_catalog_conf(config).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    context = spark.sparkContext
    chosen = shuffle_partitions(dict(context.getConf().getAll()), context.defaultParallelism)
    if chosen is not None:
        spark.conf.set(SHUFFLE_PARTITIONS, chosen)
    return spark


def checkpoint_store(spark: SparkSession, config: JobConfig) -> None:
    """Hadoop's S3A reaches a checkpoint in the warehouse's bucket with the catalog's S3
    settings (before the query first opens it: Hadoop caches a bucket's file system)."""
    context = spark.sparkContext
    given = {key for key, _ in context.getConf().getAll()}  # spec.spark.conf among them
    hadoop = context._jsc.hadoopConfiguration()
    for key, value in catalogs.s3a_conf(config.catalog(), config.checkpoint_location,
                                        given).items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)


SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def shuffle_partitions(conf: dict[str, str], cores: int) -> str | None:
    """The shuffle partitions of a batch's joins and merges, unless the user set them
    (``spec.spark.conf``): the job's cores. Spark's default of 200 is sized for batch jobs over
    large data: a micro-batch's MERGE would run 200 tasks per stage, seconds of each batch.
    On a cluster the executors the job asked for count (they may not have registered when the
    session starts, when Spark's own figure is 2). A checkpoint keeps the value it was made
    with (Spark's offset log), so a query that ran before goes on with its own."""
    if SHUFFLE_PARTITIONS in conf:
        return None
    try:
        asked = int(conf["spark.executor.instances"]) * int(conf.get("spark.executor.cores", "1"))
    except (KeyError, ValueError):
        asked = 0
    return str(max(1, cores, asked))


def _registry(config: JobConfig) -> Registry | None:
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
        value = schemas.table_struct(latest, config.table.mode, config.value.message).struct
    if config.key.decoded:
        key = schemas.table_struct(Registry(config.key_registry(), config.registry_auth())
                                   .latest()).struct
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
                    log.info("evolved table %s: %s", config.table.identifier,
                             "; ".join(str(c) for c in plan.changes))
            except BreakingChange as change:
                log.warning("table %s keeps its %s schema: %s", config.table.identifier,
                            column, change)
    return table


def starting_offsets(config: JobConfig, committed: Committed, partitions: list[int],
                     floor: dict[int, int] | None = None) -> str:
    """Spark's startingOffsets: the table's offsets where it has some, else ``floor`` (where a
    ``latest`` job first started, when its checkpoint was removed), else the configured
    start."""
    known = {**(floor or {}), **committed.offsets}
    if not known:
        return config.kafka.starting_offsets
    fallback = -2 if config.kafka.starting_offsets == "earliest" else -1
    offsets = {str(p): known.get(p, fallback) for p in sorted(set(partitions) | set(known))}
    return json.dumps({config.kafka.topic: offsets})


def topic_partitions(config: JobConfig) -> list[int]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": config.kafka.bootstrap_servers,
                         **librdkafka_settings(kafka_client_settings(config))})
    metadata = admin.list_topics(config.kafka.topic, timeout=30)
    topic = metadata.topics.get(config.kafka.topic)
    if topic is None or topic.error is not None:
        return []
    return sorted(topic.partitions)


def topic_identity(config: JobConfig) -> str | None:
    """``<cluster id>/<topic id>``: which Kafka topic the job reads, told apart from one of the
    same name created again or on another cluster; None when Kafka does not say (no such
    topic yet)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": config.kafka.bootstrap_servers,
                         **librdkafka_settings(kafka_client_settings(config))})
    try:
        topic = admin.describe_topics(TopicCollection([config.kafka.topic]),
                                      request_timeout=30)[config.kafka.topic].result()
        cluster = admin.describe_cluster(request_timeout=30).result()
    except Exception as error:  # noqa: BLE001 - an unknown topic is created on first write
        if "UNKNOWN_TOPIC" in str(error):
            return None
        raise
    return f"{cluster.cluster_id}/{topic.topic_id}"


def check_topic_identity(config: JobConfig, committed: Committed,
                         identity: str | None) -> None:
    """Fails when a table's offsets (``committed``) were committed from another topic of the
    same name: one deleted and created again (and perhaps refilled past the table's offsets,
    where the offsets alone cannot tell), or one on another cluster (``bootstrapServers``
    changed)."""
    if identity is None or committed.topic_id is None or committed.topic_id == identity:
        return
    recorded_cluster, recorded_topic = committed.topic_id.split("/", 1)
    cluster, topic = identity.split("/", 1)
    what = ("kafka.bootstrapServers names another Kafka cluster (cluster ID "
            f"{recorded_cluster} then, {cluster} now)" if recorded_cluster != cluster else
            f"the topic was deleted and created again (topic ID {recorded_topic} then, "
            f"{topic} now)")
    raise DataLossError(
        f"DataLoss: topic {config.kafka.topic} is not the topic table "
        f"{config.table.identifier}'s offsets were committed from: {what}. Its offsets say "
        "nothing about where this topic's records are: floe writes none of them over the "
        "table's offsets. To ingest this topic from its start, create the resource again with "
        "another table.identifier.")


def watermarks(config: JobConfig, partitions: list[int]) -> dict[int, tuple[int, int]]:
    """Kafka's earliest and next offset of each partition."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(config)
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(config.kafka.topic, p),
                                                  timeout=30) for p in partitions}
    finally:
        consumer.close()


def check_offsets_available(config: JobConfig, committed: Committed) -> None:
    """Fails when Kafka no longer holds what follows the table's committed offsets: retention
    deleted records the table has not got, or the topic was deleted and created again (its
    offsets started over below the table's)."""
    if not committed.offsets:
        return
    lost, reset = [], []
    marks = watermarks(config, sorted(committed.offsets))
    for partition, offset in sorted(committed.offsets.items()):
        low, high = marks[partition]
        if high < offset:
            reset.append(f"partition {partition}: the table has offsets below {offset}, "
                         f"Kafka's latest is {high}")
        elif low > offset:
            lost.append(f"partition {partition}: the table has offsets below {offset}, "
                        f"Kafka's earliest is {low} ({low - offset} records lost)")
    if reset:
        raise DataLossError(
            f"DataLoss: topic {config.kafka.topic}: Kafka's offsets are below the table's, so "
            f"the topic was deleted and created again (or truncated); {'; '.join(reset)}. "
            "floe does not write records whose offsets the table already holds: to ingest "
            "the new topic from its start, create the resource again with another "
            "table.identifier.")
    if lost:
        raise DataLossError(
            f"DataLoss: topic {config.kafka.topic}: Kafka retention deleted records the "
            f"table has not got; {'; '.join(lost)}. floe never skips records silently: "
            "restore them or reset the table's offsets.")


def floor_offsets(spark: SparkSession, config: JobConfig,
                  partitions: list[int]) -> dict[int, int]:
    """Where ``partitions`` start when the table has no offsets for them: Kafka's earliest
    offsets (``startingOffsets: earliest``), or where the job first started (``latest``: the
    checkpoint's initial offsets), as ``startingOffsets`` applies to the very first start
    only."""
    if not partitions:
        return {}
    if config.kafka.starting_offsets == "earliest":
        return {p: low for p, (low, _) in watermarks(config, partitions).items()}
    initial = checkpoint.start_offsets(spark, config.checkpoint_location,
                                       config.kafka.topic, 0) or {}
    return {p: initial[p] for p in partitions if p in initial}


def rewind_checkpoint(spark: SparkSession, config: JobConfig, committed: Committed,
                      partitions: list[int]) -> tuple[bool, dict[int, int]]:
    """Removes a checkpoint that would resume above the table's offsets (it outlived its table,
    or ``main`` was rolled back), so the query starts from the table's offsets.  Returns
    whether the query resumes from the checkpoint, and the floor of the partitions the table
    has no offsets for (:func:`floor_offsets`)."""
    location = config.checkpoint_location
    resume = checkpoint.resume_offsets(spark, location, config.kafka.topic)
    if resume is None:
        return False, {}
    floor = floor_offsets(spark, config, sorted(set(resume) - set(committed.offsets)))
    ahead = checkpoint.ahead_of(resume, committed.offsets, floor)
    if not ahead:
        return True, floor
    log.warning("the checkpoint at %s is ahead of table %s (%s): it is removed and the job "
                "starts from the table's offsets %s", location, config.table.identifier,
                "; ".join(ahead), committed.offsets or floor or config.kafka.starting_offsets)
    checkpoint.remove(spark, location)
    return False, floor


@dataclass
class BatchWriter:
    """``foreachBatch`` function: one micro-batch into the topic's tables, exactly once each.

    Without routes the batch goes to the one table.  With routes, each record's table is
    picked first (:func:`.routing.routed`), from the value as its writer wrote it; each table
    then gets its records, decoded only with the writer schemas routed to it, and commits them
    with the batch's end offsets on its own, so a crash between two tables' commits leaves each
    table whole and the batch, replayed, is a no-op where it was committed."""

    config: JobConfig
    spark: SparkSession
    registry: Registry | None
    table_uuids: list[str | None] | None = None  # of the tables the job started on
    topic_id: str | None = None  # <cluster id>/<topic id>, recorded with the offsets
    rejoins_at: list[dict[int, int] | None] | None = None  # per table (:func:`rejoining`)
    tables: list[TableWriter] = field(init=False)
    previous_end: tuple[int, dict[int, int] | None] = (-1, None)  # the last batch's end

    def __post_init__(self) -> None:
        destinations = self.config.destinations()
        uuids = self.table_uuids or [None] * len(destinations)
        rejoins = self.rejoins_at or [None] * len(destinations)
        names = tuple(d.table.identifier for d in destinations) if len(destinations) > 1 else ()
        self.tables = [TableWriter(destination, self.spark, self.registry, table_uuid=uuid,
                                   floor=self._floor, alone=len(destinations) == 1,
                                   topic_id=self.topic_id, tables=names, rejoins_at=rejoin)
                       for destination, uuid, rejoin in zip(destinations, uuids, rejoins)]

    def _floor(self, partitions: list[int]) -> dict[int, int]:
        return floor_offsets(self.spark, self.config, partitions)

    def _commit_consumer_group(self, offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        try:
            consumer = _consumer(self.config)
            try:
                consumer.commit(offsets=[TopicPartition(self.config.kafka.topic, p, o)
                                         for p, o in sorted(offsets.items())], asynchronous=False)
            finally:
                consumer.close()
        except Exception as error:  # lag tooling only; the table holds the truth
            log.warning("could not commit offsets to consumer group %s: %s",
                        self.config.consumer_group, error)

    def _stats(self, batch: DataFrame) -> list[Any]:
        """Per Kafka partition: last offset, newest timestamp, rows, bytes and (Avro) the writer
        schema ids, in one pass over the batch."""
        aggregates = [F.max("offset").alias("last"), F.max("timestamp").alias("latest"),
                      F.count(F.lit(1)).alias("rows"),
                      F.sum(F.coalesce(F.length("key"), F.lit(0))
                            + F.coalesce(F.length("value"), F.lit(0))).alias("bytes")]
        if self.config.value.format != "raw":  # JSON: only values framed for JSON Schema
            batch = frame(batch)
            aggregates.append(F.collect_set("_schema_id").alias("schema_ids"))
        if self.config.key.format == "avro":
            batch = frame(batch, "key")
            aggregates.append(F.collect_set("_key_schema_id").alias("key_ids"))
        return batch.groupBy("partition").agg(*aggregates).collect()

    def _logged_offsets(self, batch_id: int) -> tuple[dict[int, int] | None,
                                                      dict[int, int] | None]:
        """Where the batch starts and ends, from Spark's offset log.  The ends cover records
        the batch does not see (transaction markers, aborted or compacted records), so the
        next batch starts exactly where the table says this one ended."""
        location, topic = self.config.checkpoint_location, self.config.kafka.topic
        previous_id, previous_end = self.previous_end
        start = (previous_end if previous_id == batch_id - 1 and previous_end is not None
                 else checkpoint.start_offsets(self.spark, location, topic, batch_id))
        end = checkpoint.end_offsets(self.spark, location, topic, batch_id)
        self.previous_end = (batch_id, end)
        return start, end

    def _batch_offsets(self, batch_id: int, stats: list[Any]) -> tuple[dict[int, int] | None,
                                                                       dict[int, int]]:
        """Where the batch starts and ends: the offset log's, or past the records seen."""
        start, end = self._logged_offsets(batch_id)
        seen = {int(r["partition"]): int(r["last"]) + 1 for r in stats}
        return start, merge_offsets(seen, end or {})

    @property
    def single_pass(self) -> bool:
        """Whether a batch is read once, by the write: an append to one table with no
        dead-letter topic.  Routes pick each record's table from a first pass, a merge reads
        its rows twice, and dead letters are sent before the commit."""
        return (not self.config.routes and self.config.table.mode not in ROW_LEVEL
                and self.config.dead_letter is None)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        if self.single_pass:
            start, end = self._logged_offsets(batch_id)
            if end is not None:
                self._write(batch, batch_id, start, end, started)
                return
        batch = batch.persist()
        try:
            stats = self._stats(batch)
            stats_seconds = time.monotonic() - started
            start, batch_next = self._batch_offsets(batch_id, stats)
            if not batch_next:
                return
            latest = [int(r["latest"].timestamp() * 1000) for r in stats]
            vtts = min(latest) if latest else None
            schema_ids, key_ids = (sorted({i for r in stats for i in (r[name] or [])})
                                   if stats and name in stats[0] else []
                                   for name in ("schema_ids", "key_ids"))
            input_rows = sum(int(r["rows"]) for r in stats)
            input_bytes = sum(int(r["bytes"] or 0) for r in stats)
            self._write(batch, batch_id, start, batch_next, started, stats_seconds,
                        (vtts, schema_ids, key_ids, input_rows, input_bytes))
        finally:
            batch.unpersist()

    def _write(self, batch: DataFrame, batch_id: int, start: dict[int, int] | None,
               batch_next: dict[int, int], started: float, stats_seconds: float = 0.0,
               stats: tuple[Any, ...] | None = None) -> None:
        """Commits the batch to its tables (``stats``: what a first pass found, else the write
        finds it) and logs what it did."""
        if stats is None:
            outcomes = [self.tables[0].commit_batch(batch, batch_id, start, batch_next,
                                                    single_pass=True)]
            input_rows = sum(o.get("input_rows", 0) for o in outcomes)
            input_bytes = sum(o.get("bytes", 0) for o in outcomes)
        else:
            vtts, schema_ids, key_ids, input_rows, input_bytes = stats
            if self.config.routes:
                routed = routing.routed(batch, self.config, self.registry, schema_ids).persist()
                parts = routing.split(routed, self.config, len(self.tables))
            else:
                routed, parts = None, [(batch, schema_ids, key_ids)]
            try:
                outcomes = [table.commit_batch(rows, batch_id, start, batch_next, vtts, ids,
                                               keys)
                            for table, (rows, ids, keys) in zip(self.tables, parts)]
            finally:
                if routed is not None:
                    routed.unpersist()
        done = [o["offsets"] for o in outcomes if "offsets" in o]
        if done:
            self._commit_consumer_group({p: min(o.get(p, 0) for o in done)
                                         for p in set().union(*done)})
        seconds = time.monotonic() - started
        log.info(json.dumps({
            "event": "floe.batch", "writer": self.config.writer, "batch": batch_id,
            "input_rows": input_rows,
            "rows": sum(o["written"] for o in outcomes),
            "bytes": input_bytes, "bytes_per_second": round(input_bytes / seconds, 1),
            "decode_failures": sum(o["errors"] for o in outcomes),
            "dead_letters": sum(o["dead_letters"] for o in outcomes),
            "conflicts": sum(o["conflicts"] for o in outcomes),
            "passes": 2 if stats is not None else 1,
            "stats_seconds": round(stats_seconds, 3),
            "write_seconds": round(sum(o["write_seconds"] for o in outcomes), 3),
            "commit_seconds": round(sum(o["commit_seconds"] for o in outcomes), 3),
            "expired_snapshots": sum(o.get("expired", 0) for o in outcomes),
            "expire_seconds": round(sum(o.get("expire_seconds", 0.0) for o in outcomes), 3),
            **({"tables": {t.config.table.identifier: o["written"]
                           for t, o in zip(self.tables, outcomes)}}
               if self.config.routes else {}),
            "seconds": round(seconds, 3)}))
        metrics.report_start(self.spark, self.config.writer)


def ready_table(spark: SparkSession, config: JobConfig, registry: Registry | None) -> Any:
    """The table made ready for the job: created or evolved, upgraded for deletion vectors
    (upsert, cdc), claimed for the writer, its branches of interrupted batches dropped."""
    table = prepare_table(config, registry)
    if config.table.mode in ROW_LEVEL:
        table = with_deletion_vectors(
            spark, f"{config.table.catalog.name}.{config.table.identifier}", table)
    claim_table(table, config.writer)
    try:
        swept = sweep_branches(table, config.writer)
        if swept:
            log.info("dropped %d branch(es) of %s left by interrupted batches: %s", len(swept),
                     config.table.identifier, ", ".join(swept))
    except Exception as error:  # noqa: BLE001 - a left branch only pins its snapshot
        log.warning("could not drop the branches of interrupted batches: %s", error)
    return table


def table_commits(config: JobConfig, tables: list[Any]) -> list[Committed]:
    """What the topic's tables have committed (:func:`~.commit.last_commit` of each)."""
    return [last_commit(table, config.writer, config.kafka.topic) for table in tables]


def rejoining(config: JobConfig, found: list[Committed]) -> list[bool]:
    """Which of a routed topic's tables (what they committed, :func:`table_commits`) join it
    again: a table that has offsets, but that the newest commit of the topic's tables does not
    name among them.  Its route was removed, the topic's own table took its records meanwhile,
    and it was added back: it goes on from where the other tables are, not from its own older
    offsets, so no record lands in two tables."""
    dated = [c for c in found if c.timestamp_ms is not None]
    if len(found) == 1 or not dated:
        return [False] * len(found)
    newest = max(dated, key=lambda c: c.timestamp_ms or 0)
    if newest.tables is None:  # committed before floe recorded the tables
        return [False] * len(found)
    names = [d.table.identifier for d in config.destinations()]
    return [bool(c.offsets) and name not in newest.tables for c, name in zip(found, names)]


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
    return Committed(offsets={p: min(c.offsets[p] for c in committed if p in c.offsets)
                              for p in sorted(partitions)})


def start(config: JobConfig, spark: SparkSession | None = None, *,
          available_now: bool = False, query_name: str | None = None) -> Any:
    """Starts the streaming query; returns it (``available_now`` stops once caught up)."""
    if spark is None:
        spark = build_session(config)
        metrics.mark_start("session")
    for key, value in spark_catalog_conf(config).items():
        spark.conf.set(key, value)
    checkpoint_store(spark, config)
    metrics.register(spark)
    registry = _registry(config)
    tables = [ready_table(spark, destination, _registry(destination))
              for destination in config.destinations()]
    identity = topic_identity(config)
    found = table_commits(config, tables)
    for table_committed in found:
        check_topic_identity(config, table_committed, identity)
    committed, rejoin = start_position(config, found)
    for destination, again, table_committed in zip(config.destinations(), rejoin, found):
        if again:
            log.warning("table %s was not among topic %s's tables when they last committed "
                        "(its route was removed, then added back): it goes on from where the "
                        "other tables are, %s, not from its own offsets %s; the records in "
                        "between stay where they landed", destination.table.identifier,
                        config.kafka.topic, committed.offsets, table_committed.offsets)
    check_offsets_available(config, committed)
    partitions = topic_partitions(config)
    resumes, floor = rewind_checkpoint(spark, config, committed, partitions)
    # (unless a checkpoint resumes; earliest is Spark's own -2, which retention cannot overtake)
    start_at = starting_offsets(config, committed, partitions,
                                floor if config.kafka.starting_offsets == "latest" else None)
    if not resumes and committed.offsets:
        log.info("no checkpoint at %s: starting from the table's offsets %s",
                 config.checkpoint_location, committed.offsets)
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", config.kafka.bootstrap_servers)
              .option("subscribe", config.kafka.topic)
              .option("startingOffsets", start_at)
              .option("kafka.isolation.level", config.kafka.isolation_level)
              .option("includeHeaders", "true")
              .option("failOnDataLoss", "true")
              .option("maxOffsetsPerTrigger", str(config.commit.max_records_per_commit)))
    for key, value in kafka_client_settings(config).items():
        reader = reader.option(f"kafka.{key}", value)
    writer = (reader.load().writeStream
              .foreachBatch(BatchWriter(config, spark, registry,
                                        [str(t.metadata.table_uuid) for t in tables],
                                        identity, [committed.offsets if again else None
                                                   for again in rejoin]))
              .option("checkpointLocation", config.checkpoint_location)
              .queryName(query_name or f"floe_{config.writer.replace('/', '_').replace('-', '_')}"))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.commit.interval_seconds} seconds")
    query = writer.start()
    metrics.mark_start("query")
    return query


# Spark 4.1's Kafka source throws this from its progress metrics right after it replays a batch
# from the offset log (a restart after a crash between planning and committing a batch).  The
# batch itself has run and been committed by then, so starting the query again moves on.
_REPLAY_METRICS_BUG = "KafkaMicroBatchStream.metrics"


def run(config: JobConfig, spark: SparkSession | None = None, *, available_now: bool = False,
        timeout: float | None = None, restarts: int = 3) -> None:
    """Runs the query until it stops (``available_now``) or fails; raises what it failed with.

    A query stopped by :class:`CheckpointAhead` starts again, from the table's offsets.  SIGTERM
    stops the query and returns (a batch it interrupts is simply not committed)."""
    terminated = _StopOnSigterm()
    for attempt in range(restarts + 1):
        query = start(config, spark, available_now=available_now)
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
        if "CheckpointAhead: " in str(error) or "CheckpointAhead: " in trace:
            log.warning("restarting the query from the table's offsets (attempt %d of %d): %s",
                        attempt + 1, restarts, str(error).splitlines()[0][:300])
            continue
        if _REPLAY_METRICS_BUG in trace:
            log.warning("restarting the query after Spark's replay metrics failure "
                        "(attempt %d of %d)", attempt + 1, restarts)
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
            check_offsets_available(config,
                                    start_position(config, table_commits(config, tables))[0])
            return None
        except DataLossError as error:
            return error
        except Exception as error:  # noqa: BLE001 - cannot tell yet
            log.warning("could not check Kafka's offsets against the table's (%d of %d): %s",
                        attempt + 1, tries, str(error).splitlines()[0][:300])
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
    return str(jvm.org.apache.commons.lang3.exception.ExceptionUtils.getStackTrace(failure.get()))
