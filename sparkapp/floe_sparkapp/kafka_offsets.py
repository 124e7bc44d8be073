"""What Kafka says about the job's topic: its partitions, its identity (a topic created
again, or on another cluster, is told apart), its earliest and latest offsets, and whether it
still holds what follows the table's committed offsets; where a query starts from."""

from __future__ import annotations

import json
import logging
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from . import checkpoint
from .config import JobConfig, kafka_client_settings, kafka_consumer
from .ledger import Committed
from .librdkafka import librdkafka_settings

log = logging.getLogger("floe.job")


class DataLossError(RuntimeError):
    """Kafka no longer has records the table has not got: never skipped silently."""


def group_consumer(config: JobConfig) -> Any:
    """A confluent-kafka consumer of the job's consumer group (no subscription)."""
    return kafka_consumer(config, config.consumer_group)


def starting_offsets(
    config: JobConfig,
    committed: Committed,
    partitions: list[int],
    floor: dict[int, int] | None = None,
) -> str:
    """Spark's startingOffsets: the table's offsets where it has some, else ``floor`` (where a
    ``latest`` job first started, when its checkpoint was removed), else the configured
    start.  A partition the table has no offsets for, once it has some for others, was added
    after the job first started: from its start (``startingOffsets`` applies to the job's
    very first start only)."""
    known = {**(floor or {}), **committed.offsets}
    if not known:
        return config.kafka.starting_offsets
    fallback = -2 if config.kafka.starting_offsets == "earliest" or committed.offsets else -1
    offsets = {str(p): known.get(p, fallback) for p in sorted(set(partitions) | set(known))}
    return json.dumps({config.kafka.topic: offsets})


def topic_partitions(config: JobConfig) -> list[int]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            "bootstrap.servers": config.kafka.bootstrap_servers,
            **librdkafka_settings(kafka_client_settings(config)),
        }
    )
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

    admin = AdminClient(
        {
            "bootstrap.servers": config.kafka.bootstrap_servers,
            **librdkafka_settings(kafka_client_settings(config)),
        }
    )
    try:
        topic = admin.describe_topics(TopicCollection([config.kafka.topic]), request_timeout=30)[
            config.kafka.topic
        ].result()
        cluster = admin.describe_cluster(request_timeout=30).result()
    except Exception as error:  # noqa: BLE001 - an unknown topic is created on first write
        if "UNKNOWN_TOPIC" not in str(error):
            log.warning(
                "Kafka at %s did not say which cluster and topic %s are (%s): brokers "
                "before Kafka 3.1 have no topic IDs, and without them a topic deleted "
                "and created again, or another cluster behind the same address, is "
                "not told apart from the one the table's offsets are of; the job goes "
                "on without that check",
                config.kafka.bootstrap_servers,
                config.kafka.topic,
                str(error).splitlines()[0][:300],
            )
        return None
    return f"{cluster.cluster_id}/{topic.topic_id}"


def check_topic_identity(config: JobConfig, committed: Committed, identity: str | None) -> None:
    """Fails when a table's offsets (``committed``) were committed from another topic of the
    same name: one deleted and created again (and perhaps refilled past the table's offsets,
    where the offsets alone cannot tell), or one on another cluster (``bootstrapServers``
    changed)."""
    if identity is None or committed.topic_id is None or committed.topic_id == identity:
        return
    recorded_cluster, recorded_topic = committed.topic_id.split("/", 1)
    cluster, topic = identity.split("/", 1)
    what = (
        "kafka.bootstrapServers names another Kafka cluster (cluster ID "
        f"{recorded_cluster} then, {cluster} now)"
        if recorded_cluster != cluster
        else f"the topic was deleted and created again (topic ID {recorded_topic} then, "
        f"{topic} now)"
    )
    raise DataLossError(
        f"DataLoss: topic {config.kafka.topic} is not the topic table "
        f"{config.table.identifier}'s offsets were committed from: {what}. Its offsets say "
        "nothing about where this topic's records are: floe writes none of them over the "
        "table's offsets. To ingest this topic from its start, create the resource again with "
        "another table.identifier."
    )


def read_range(
    spark: SparkSession, config: JobConfig, start: dict[int, int], end: dict[int, int]
) -> DataFrame:
    """The topic's records ``[start, end)`` per partition, as a Spark batch (a DataFrame with
    the columns the query's batches have)."""
    topic = config.kafka.topic
    partitions = sorted(p for p in end if end[p] > start.get(p, 0))
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", config.kafka.bootstrap_servers)
        .option("assign", json.dumps({topic: partitions}))
        .option(
            "startingOffsets", json.dumps({topic: {str(p): start.get(p, 0) for p in partitions}})
        )
        .option("endingOffsets", json.dumps({topic: {str(p): end[p] for p in partitions}}))
        .option("kafka.isolation.level", config.kafka.isolation_level)
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "true")
    )
    for key, value in kafka_client_settings(config).items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load()


def watermarks(config: JobConfig, partitions: list[int]) -> dict[int, tuple[int, int]]:
    """Kafka's earliest and next offset of each partition."""
    from confluent_kafka import TopicPartition

    consumer = group_consumer(config)
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(config.kafka.topic, p), timeout=30)
            for p in partitions
        }
    finally:
        consumer.close()


def offsets_for_time(config: JobConfig, partitions: list[int], at_ms: int) -> dict[int, int]:
    """Per partition, the offset of the first record with a timestamp at or after ``at_ms``
    (Kafka's next offset when there is none)."""
    from confluent_kafka import TopicPartition

    consumer = group_consumer(config)
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(config.kafka.topic, p, at_ms) for p in partitions], timeout=30
        )
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(config.kafka.topic, p), timeout=30)[1]
            for p in partitions
        }
    finally:
        consumer.close()
    return {tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition] for tp in found}


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
            reset.append(
                f"partition {partition}: the table has offsets below {offset}, "
                f"Kafka's latest is {high}"
            )
        elif low > offset:
            lost.append(
                f"partition {partition}: the table has offsets below {offset}, "
                f"Kafka's earliest is {low} ({low - offset} records lost)"
            )
    if reset:
        raise DataLossError(
            f"DataLoss: topic {config.kafka.topic}: Kafka's offsets are below the table's, so "
            f"the topic was deleted and created again (or truncated); {'; '.join(reset)}. "
            "floe does not write records whose offsets the table already holds: to ingest "
            "the new topic from its start, create the resource again with another "
            "table.identifier."
        )
    if lost:
        raise DataLossError(
            f"DataLoss: topic {config.kafka.topic}: Kafka retention deleted records the "
            f"table has not got; {'; '.join(lost)}. floe never skips records silently: "
            "restore them or reset the table's offsets."
        )


def floor_offsets(spark: SparkSession, config: JobConfig, partitions: list[int]) -> dict[int, int]:
    """Where ``partitions`` start when the table has no offsets for them: Kafka's earliest
    offsets (``startingOffsets: earliest``), or where the job first started (``latest``: the
    checkpoint's initial offsets), as ``startingOffsets`` applies to the very first start
    only; a partition added since, from Kafka's earliest."""
    if not partitions:
        return {}
    initial = (
        {}
        if config.kafka.starting_offsets == "earliest"
        else (
            checkpoint.start_offsets(spark, config.checkpoint_location, config.kafka.topic, 0) or {}
        )
    )
    later = [p for p in partitions if p not in initial]  # (added after the first start)
    earliest = {p: low for p, (low, _) in watermarks(config, later).items()} if later else {}
    return {p: initial.get(p, earliest.get(p, 0)) for p in partitions}
