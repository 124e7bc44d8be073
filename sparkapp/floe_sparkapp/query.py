"""The streaming query built and started (:func:`start`): the tables made ready
(:mod:`.prepare`), Kafka checked against them (:mod:`.kafka_offsets`), the starting offsets
picked (:mod:`.start_position`: the tables', unless a checkpoint resumes at or below them), and
a Structured Streaming query on the session (:mod:`.session`) whose ``foreachBatch`` is a
:class:`~.batch_writer.BatchWriter`.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import SparkSession

from . import metrics, partial_batch
from .batch_writer import BatchWriter
from .commit_size import CommitSize
from .config import JobConfig, kafka_client_settings
from .kafka_offsets import (
    check_offsets_available,
    check_topic_identity,
    starting_offsets,
    topic_identity,
    topic_partitions,
)
from .prepare import ready_table, registry_of
from .session import build_session, checkpoint_store, spark_catalog_conf
from .start_position import record_first_start, rewind_checkpoint, start_position, table_commits

log = logging.getLogger("floe.job")
# How often a job committing by volume (commit.minRecords) asks whether enough has arrived.
VOLUME_CHECK_SECONDS = 1
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
