"""One attempt of a replay (:func:`run`): the snapshot held by the replay's tag, its rows
read, the target topic checked, each Kafka partition's rows produced in transactions that
commit its progress, the outcome recorded on the table.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..config import JobConfig, kafka_client_settings, kafka_consumer
from ..contract import OperationRequest
from ..ledger import head, record_operation, retried
from ..librdkafka import librdkafka_settings
from ..registry import Registry
from .refusals import ORIGINAL_TIMESTAMP, ReplayRefused, retention_horizon, retention_refusal
from .values import Encoder

log = logging.getLogger("floe.operation")

HOLD_PREFIX = "floe_replay_"
HOLD_MAX_AGE_MS = 7 * 86_400_000

# The replay's producer, beside its transactional id and the topic's own Kafka settings. A
# transaction's first send right after the last commit meets the broker still writing that
# commit's markers (CONCURRENT_TRANSACTIONS) and is retried: after librdkafka's default 100 ms,
# which made a small transaction cost ~100 ms; after 10 ms (doubling up to 1 s for real
# faults), ~15 ms (bench/replay_transactions.py).
PRODUCER_SETTINGS = {
    "enable.idempotence": True,
    "linger.ms": 20,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 1000,
}


def _group(request: OperationRequest) -> str:
    return f"floe-replay-{request.uid}"


class Replay:
    """One replay run (:func:`run`)."""

    def __init__(
        self,
        spark: SparkSession,
        config: JobConfig,
        request: OperationRequest,
        table: Any,
        table_ref: str,
        registry: Registry | None,
    ) -> None:
        assert request.replay is not None
        self.spark, self.config, self.request, self.spec = spark, config, request, request.replay
        self.table, self.table_ref = table, table_ref
        self.encoder = Encoder(registry, config.value.format)

    @property
    def _tag(self) -> str:
        """The tag that holds the snapshot replayed, for every attempt."""
        return f"{HOLD_PREFIX}{self.request.uid.replace('-', '')[:16]}"

    def _snapshot(self) -> int:
        """The snapshot replayed: the request's, or the one this replay's tag holds (made by
        its first attempt)."""
        tag = self._tag
        held = self.table.refs().get(tag)
        if held is not None:
            held_id: int = held.snapshot_id
            return held_id
        if self.spec.snapshot_id is not None:
            snapshot_id = int(self.spec.snapshot_id)
            if self.table.snapshot_by_id(snapshot_id) is None:
                raise ReplayRefused(
                    f"snapshot {snapshot_id} is not in table "
                    f"{self.config.table.identifier} (expired, or mistyped)"
                )
        else:
            snapshot_id = head(self.table, self.config.table.ref).snapshot_id
        retried(
            self.table,
            lambda: (
                self.table.manage_snapshots()
                .create_tag(snapshot_id, tag, max_ref_age_ms=HOLD_MAX_AGE_MS)
                .commit()
            ),
        )
        return snapshot_id

    def _release(self) -> None:
        tag = self._tag
        try:
            self.table.refresh()
            if tag in self.table.refs():
                retried(self.table, lambda: self.table.manage_snapshots().remove_tag(tag).commit())
        except Exception as error:  # noqa: BLE001 - the tag lapses by itself
            log.warning("could not remove the tag %s: %s", tag, error)

    def _rows(self, snapshot_id: int) -> DataFrame:
        rows = self.spark.read.option("versionAsOf", str(snapshot_id)).table(self.table_ref)
        spec = self.spec
        if spec.partitions:
            rows = rows.filter(F.col("kafka.partition").isin(*spec.partitions))
        if spec.from_offset is not None:
            rows = rows.filter(F.col("kafka.offset") >= spec.from_offset)
        if spec.to_offset is not None:
            rows = rows.filter(F.col("kafka.offset") < spec.to_offset)
        return rows

    def _target(self) -> tuple[int, dict[str, str]] | None:
        """The target topic's partition count and (for rows that keep their timestamps) its
        configs; None where it does not exist."""
        from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

        admin = AdminClient(
            {
                "bootstrap.servers": self.config.kafka.bootstrap_servers,
                **librdkafka_settings(kafka_client_settings(self.config)),
            }
        )
        # (all topics: asking for one by name may create it where the brokers auto-create)
        found = admin.list_topics(timeout=30).topics.get(self.spec.topic)
        if found is None or found.error is not None or not found.partitions:
            return None
        if self.spec.timestamps != "original":
            return len(found.partitions), {}
        resource = ConfigResource(ResourceType.TOPIC, self.spec.topic)
        entries = admin.describe_configs([resource])[resource].result(timeout=30)
        return len(found.partitions), {name: entry.value for name, entry in entries.items()}

    @staticmethod
    def _extent(rows: DataFrame, horizon: int | None) -> list[Any]:
        """Per Kafka partition of ``rows``: its first and last source offset, its rows, its
        oldest Kafka timestamp (epoch ms) and how many are older than ``horizon``."""
        stamp = F.unix_millis("kafka.timestamp")
        return (
            rows.groupBy(F.col("kafka.partition").alias("partition"))
            .agg(
                F.min("kafka.offset").alias("first"),
                F.max("kafka.offset").alias("last"),
                F.count(F.lit(1)).alias("rows"),
                F.min(stamp).alias("oldest"),
                F.count_if(F.lit(False) if horizon is None else stamp < horizon).alias("older"),
            )
            .collect()
        )

    def _check_target(self, target: tuple[int, dict[str, str]] | None, extent: list[Any]) -> None:
        partitions = [r["partition"] for r in extent]
        if target is None:
            raise ReplayRefused(
                f"topic {self.spec.topic} does not exist: create it (with at "
                f"least {max(partitions, default=0) + 1} partitions) first"
            )
        if partitions and max(partitions) >= target[0]:
            raise ReplayRefused(
                f"topic {self.spec.topic} has {target[0]} partitions and the rows come from "
                f"partitions up to {max(partitions)}: each row goes to the partition it came "
                "from; add partitions to it"
            )
        why = retention_refusal(
            self.spec.topic,
            target[1],
            sum(r["older"] for r in extent),
            min((r["oldest"] for r in extent), default=0),
        )
        if why is not None:
            raise ReplayRefused(why)

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.config.kafka.bootstrap_servers,
                "transactional.id": _group(self.request),
                **PRODUCER_SETTINGS,
                **librdkafka_settings(kafka_client_settings(self.config)),
            }
        )
        producer.init_transactions(60)  # fences the producer of an earlier attempt
        return producer

    def _progress(self, consumer: Any, partitions: list[int]) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        found = consumer.committed(
            [TopicPartition(self.spec.topic, p) for p in partitions], timeout=30
        )
        return {tp.partition: tp.offset for tp in found if tp.offset >= 0}

    def _send(
        self, producer: Any, consumer: Any, partition: int, rows: Iterator[Any]
    ) -> tuple[int, int]:
        """Produces one partition's rows in transactions; returns the records and
        transactions."""
        size = self.spec.records_per_transaction
        count = transactions = pending = after = 0
        producer.begin_transaction()
        for row in rows:
            record = self._record(row, partition)
            while True:
                try:
                    producer.produce(self.spec.topic, **record)
                    break
                except BufferError:  # the producer's queue is full: let it send
                    producer.poll(1.0)
            after = row["kafka"]["offset"] + 1
            count += 1
            pending += 1
            if pending >= size:
                self._commit(producer, consumer, partition, after)
                transactions += 1
                pending = 0
                producer.begin_transaction()
            producer.poll(0)
        if pending:
            self._commit(producer, consumer, partition, after)
            transactions += 1
        else:
            producer.abort_transaction(30)
        return count, transactions

    def _record(self, row: Any, partition: int) -> dict[str, Any]:
        """What ``row`` is produced as: with its timestamp, or (``timestamps: now``) stamped
        by the producer, its timestamp in header floe.original-timestamp."""
        kafka, key = row["kafka"], row["key"]
        headers = [
            (h["key"], None if h["value"] is None else bytes(h["value"]))
            for h in (kafka["headers"] or [])
        ]
        stamp = int(kafka["timestamp"].timestamp() * 1000)
        record = {
            "key": None if key is None else bytes(key),
            "value": self.encoder.value(row),
            "partition": partition,
        }
        if self.spec.timestamps == "now":
            headers.append((ORIGINAL_TIMESTAMP, str(stamp).encode()))
        else:
            record["timestamp"] = stamp
        return {**record, "headers": headers or None}

    def _commit(self, producer: Any, consumer: Any, partition: int, after: int) -> None:
        from confluent_kafka import TopicPartition

        producer.send_offsets_to_transaction(
            [TopicPartition(self.spec.topic, partition, after)],
            consumer.consumer_group_metadata(),
            60,
        )
        producer.commit_transaction(120)

    def run(self) -> dict[str, Any]:
        snapshot_id = self._snapshot()
        rows = self._rows(snapshot_id)
        target = self._target()
        horizon = None if target is None else retention_horizon(target[1], int(time.time() * 1000))
        extent = self._extent(rows, horizon)
        self._check_target(target, extent)
        # Per partition, the first and last source offset and the rows: what is replayed
        total = {
            int(r["partition"]): (int(r["first"]), int(r["last"]), int(r["rows"])) for r in extent
        }
        partitions = sorted(total)
        consumer = kafka_consumer(self.config, _group(self.request))
        producer = self._producer()
        produced = transactions = 0
        try:
            done = self._progress(consumer, partitions)
            for partition in partitions:
                todo = rows.filter(F.col("kafka.partition") == partition)
                if partition in done:
                    todo = todo.filter(F.col("kafka.offset") >= done[partition])
                count, made = self._send(
                    producer, consumer, partition, todo.orderBy("kafka.offset").toLocalIterator()
                )
                produced += count
                transactions += made
                log.info(
                    "replay %s: partition %d: %d record(s) produced to %s in %d transaction(s)",
                    self.request.name,
                    partition,
                    count,
                    self.spec.topic,
                    made,
                )
        finally:
            producer.flush(60)
            consumer.close()
        return {
            "topic": self.spec.topic,
            "snapshotId": str(snapshot_id),
            "records": sum(n for *_, n in total.values()),
            "partitions": {str(p): {"from": lo, "to": hi + 1} for p, (lo, hi, _) in total.items()},
            "producedThisAttempt": produced,
            "transactionsThisAttempt": transactions,
        }


def run(
    spark: SparkSession,
    config: JobConfig,
    request: OperationRequest,
    table: Any,
    table_ref: str,
    registry: Registry | None,
) -> dict[str, Any]:
    """Runs the replay of ``config``'s table and records its outcome on the table; returns the
    outcome."""
    replay = Replay(spark, config, request, table, table_ref, registry)
    outcome = {"type": "Replay", **replay.run()}
    record_operation(table, request.uid, outcome)
    replay._release()
    return outcome
