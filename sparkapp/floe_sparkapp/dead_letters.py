"""The dead-letter topic: each undecodable record sent there once, as it came, with why and
where from.

A batch's dead letters are sent before its commit (the rows are committed either way, with
their raw value and reason).  A batch that is not committed (the driver killed after the send,
a commit that failed) runs again from the table's offsets and has the same undecodable records:
before sending, the job reads what the dead-letter topic got since the table's last commit by
this writer, and leaves out each record already there, known by its ``floe.writer``,
``floe.topic``, ``floe.partition`` and ``floe.offset`` headers (and ``floe.table``: each of a
routed topic's tables sends its own).  When that read fails (the topic unreachable),
everything is sent and a record may arrive twice, with the same headers.

So the dead-letter topic may hold records of a batch that was never committed: the job lands
them again itself, and a repair that re-drives dead letters (:mod:`.repair`) leaves out those
at or above the table's offsets, and those another table sent.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .config import JobConfig, kafka_client_settings, kafka_consumer

log = logging.getLogger("floe.job")

ATTEMPTS = 3
# Dead letters carry their producer's clock, the table's commits the driver's: read back from
# this long before the last commit.
CLOCK_MARGIN_MS = 10 * 60 * 1000
READ_SECONDS = 120  # at most this long reading back what was sent
HEADERS = ("floe.writer", "floe.topic", "floe.partition", "floe.offset")
# The table the record was kept raw in (a routed topic has several); dead letters sent before
# floe named it do not have it.
TABLE_HEADER = "floe.table"
TABLE = "_dead_letter_table"  # :func:`records`' column of it
# Also on each dead letter: ``floe.error`` (why), and the record's own ``floe.timestamp`` (ms)
# and ``floe.timestamp-type``, so that a repair re-drives it as it came.
HEADER_PREFIX = "floe."

Coordinates = tuple[str, int, int]  # a source record's topic, partition, offset


def send(bad: DataFrame, errors: int, config: JobConfig, since_ms: int) -> str | None:
    """Sends ``bad`` (``errors`` undecodable rows) to the dead-letter topic, but those an
    earlier run of the batch sent after ``since_ms`` (the writer's last commit); tries a few
    times.  When the topic keeps refusing them (too large, missing, not allowed), returns why:
    the rows are still committed, with their raw value and reason, and the commit records the
    failure for the status."""
    assert config.dead_letter is not None
    topic = config.dead_letter.topic
    cause = ""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _produce(_not_yet_sent(bad, config, since_ms), config)
            return None
        except Exception as error:  # noqa: BLE001 - any refusal, reported below
            cause = _cause(error)
            log.warning(
                "dead-letter topic %s refused %d record(s) (attempt %d of %d): %s",
                topic,
                errors,
                attempt,
                ATTEMPTS,
                cause,
            )
            if attempt < ATTEMPTS:
                time.sleep(2**attempt)
    return (
        f"{errors} undecodable record(s) not sent to dead-letter topic {topic} after "
        f"{ATTEMPTS} attempts (they are in value_raw): {cause}"
    )[:1000]


def _cause(error: Exception) -> str:
    """The innermost Java exception of a failed Spark action (``Caused by: ...``), or the first
    line of the error."""
    text = str(error)
    causes: list[str] = re.findall(r"Caused by: ([\w.$]+(?:Exception|Error)[^\n]*)", text)
    if causes:
        return causes[-1][:500]
    found = re.search(r"([\w.$]+(?:Exception|Error): [^\n]*)", text)
    return (found.group(1) if found else text.splitlines()[0] if text else repr(error))[:500]


def _not_yet_sent(bad: DataFrame, config: JobConfig, since_ms: int) -> DataFrame:
    """``bad`` but the records already in the dead-letter topic."""
    assert config.dead_letter is not None
    try:
        sent = already_sent(config, since_ms)
    except Exception as error:  # noqa: BLE001 - then all are sent; a consumer keeps one
        log.warning(
            "could not read back dead-letter topic %s, sending all of the batch's "
            "undecodable records: %s",
            config.dead_letter.topic,
            error,
        )
        return bad
    if not sent:
        return bad
    log.info(
        "%d undecodable record(s) of the batch are already in dead-letter topic %s",
        len(sent),
        config.dead_letter.topic,
    )
    spark = bad.sparkSession
    known = spark.createDataFrame(sorted(sent), "_t string, _p int, _o long")
    on = (
        (F.col("kafka.topic") == F.col("_t"))
        & (F.col("kafka.partition") == F.col("_p"))
        & (F.col("kafka.offset") == F.col("_o"))
    )
    return bad.join(F.broadcast(known), on, "left_anti")


def already_sent(config: JobConfig, since_ms: int) -> set[Coordinates]:
    """The source records of this writer the dead-letter topic got at or after
    ``since_ms - CLOCK_MARGIN_MS``, as far as its end when asked."""
    from confluent_kafka import KafkaError, TopicPartition

    assert config.dead_letter is not None
    topic = config.dead_letter.topic
    consumer = kafka_consumer(
        config, f"floe-dead-letters-{config.writer}", **{"enable.partition.eof": True}
    )
    try:
        found = consumer.list_topics(topic, timeout=30).topics[topic]
        if found.error is not None:
            raise RuntimeError(str(found.error))
        starts = consumer.offsets_for_times(
            [
                TopicPartition(topic, p, max(0, since_ms - CLOCK_MARGIN_MS))
                for p in found.partitions
            ],
            timeout=30,
        )
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in found.partitions
        }
        todo = {
            tp.partition: ends[tp.partition] for tp in starts if 0 <= tp.offset < ends[tp.partition]
        }
        if not todo:
            return set()
        consumer.assign([tp for tp in starts if tp.partition in todo])
        sent: set[Coordinates] = set()
        deadline = time.monotonic() + READ_SECONDS
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {topic} for {READ_SECONDS} s without reaching its end")
            for message in consumer.consume(1000, timeout=1):
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(str(error))
                if error is None:
                    coordinates = _coordinates(
                        message.headers() or [], config.writer, config.table.identifier
                    )
                    if coordinates is not None:
                        sent.add(coordinates)
                if message.offset() is not None and message.offset() + (
                    0 if error is not None else 1
                ) >= todo.get(message.partition(), 0):
                    todo.pop(message.partition(), None)
        return sent
    finally:
        consumer.close()


def _coordinates(headers: list[tuple[str, bytes]], writer: str, table: str) -> Coordinates | None:
    """The source record a dead letter of ``writer`` for ``table`` came from; None for another
    writer's, or one another of the topic's tables sent."""
    found = {key: value for key, value in headers if key in (*HEADERS, TABLE_HEADER)}
    if not set(HEADERS) <= set(found) or found["floe.writer"] != writer.encode():
        return None
    if found.get(TABLE_HEADER, table.encode()) != table.encode():
        return None
    return (found["floe.topic"].decode(), int(found["floe.partition"]), int(found["floe.offset"]))


def records(spark: Any, config: JobConfig) -> DataFrame:
    """The dead-letter topic's records of this writer and topic, as the Kafka records they
    were (key, value, partition, offset, timestamp, their own headers), each once per table
    that sent it, with that table (:data:`TABLE`: null when the letter does not say) and why
    it was kept raw (``_dead_letter_error``)."""
    assert config.dead_letter is not None

    def header(name: str) -> Any:  # null when the letter has no such header
        return F.expr(
            f"try_element_at(transform(filter(headers, h -> h.key = '{name}'), "
            "h -> cast(h.value as string)), 1)"
        )

    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", config.kafka.bootstrap_servers)
        .option("subscribe", config.dead_letter.topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "false")
    )
    for key, value in kafka_client_settings(config).items():
        reader = reader.option(f"kafka.{key}", value)
    found: DataFrame = reader.load()
    own = F.expr(f"filter(headers, h -> NOT startswith(h.key, '{HEADER_PREFIX}'))")
    stamp = header("floe.timestamp").cast("long")
    return (
        found.filter(
            (header("floe.writer") == F.lit(config.writer))
            & (header("floe.topic") == F.lit(config.kafka.topic))
        )
        .select(
            F.col("key"),
            F.col("value"),
            header("floe.topic").alias("topic"),
            header("floe.partition").cast("int").alias("partition"),
            header("floe.offset").cast("long").alias("offset"),
            F.coalesce(F.timestamp_millis(stamp), F.col("timestamp")).alias("timestamp"),
            F.coalesce(header("floe.timestamp-type").cast("int"), F.col("timestampType")).alias(
                "timestampType"
            ),
            F.when(F.size(own) > 0, own).alias("headers"),
            header("floe.error").alias("_dead_letter_error"),
            header(TABLE_HEADER).alias(TABLE),
        )
        .dropDuplicates(["partition", "offset", TABLE])
    )


def _produce(bad: DataFrame, config: JobConfig) -> None:
    """Sends undecodable rows to the dead-letter topic, with why and where from."""
    assert config.dead_letter is not None

    def header(name: str, value: Any) -> Any:
        return F.struct(F.lit(name).alias("key"), F.encode(value, "UTF-8").alias("value"))

    headers = F.concat(
        F.coalesce(
            F.col("kafka.headers"), F.array().cast("array<struct<key:string,value:binary>>")
        ),
        F.array(
            header("floe.error", F.col("value_error")),
            header("floe.writer", F.lit(config.writer)),
            header("floe.topic", F.col("kafka.topic")),
            header("floe.partition", F.col("kafka.partition").cast("string")),
            header("floe.offset", F.col("kafka.offset").cast("string")),
            header(TABLE_HEADER, F.lit(config.table.identifier)),
            header("floe.timestamp", F.unix_millis(F.col("kafka.timestamp")).cast("string")),
            header("floe.timestamp-type", F.col("kafka.timestamp_type").cast("string")),
        ),
    )
    writer: Any = (
        bad.select(F.col("key"), F.col("value_raw").alias("value"), headers.alias("headers"))
        .write.format("kafka")
        .option("kafka.bootstrap.servers", config.kafka.bootstrap_servers)
        .option("topic", config.dead_letter.topic)
        .option("includeHeaders", "true")
        # a missing topic fails the send in seconds rather than a minute
        .option("kafka.max.block.ms", "15000")
    )
    for key, value in kafka_client_settings(config).items():
        writer = writer.option(f"kafka.{key}", value)
    writer.save()
