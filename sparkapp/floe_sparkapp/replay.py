"""Replay: a table's rows produced back to Kafka, each once (rebuilding a lost topic, seeding
another topic, re-feeding a consumer).

The rows are those of one snapshot (the request's, else the table's when the first attempt
starts, held by the tag ``floe_replay_<uid>`` until the replay is recorded, so an attempt
after a crash replays the same rows and expiry keeps them).  Each Kafka partition's rows go,
in offset order, to the same partition of the target topic, with their key, headers and
timestamp (or, with ``timestamps: now``, stamped when produced, the row's timestamp in header
``floe.original-timestamp``); a value is encoded again in the registry's wire format with the
row's writer schema id (Avro with the writer schema itself, JSON as JSON), and a row kept raw
(or with a part kept raw) is produced as the bytes it came as.

Exactly once: a transactional producer (``transactional.id`` ``floe-replay-<uid>``: a new
attempt fences a zombie of the last one) commits, with each transaction of
``recordsPerTransaction`` records, the partition's progress as the consumer group
``floe-replay-<uid>``'s offset on the target partition (the next source offset to replay).  An
attempt goes on from those offsets; a transaction that did not commit is aborted and its
records never reach a ``read_committed`` consumer (floe's jobs read that way).

Rows that keep their timestamps are refused where the target's time-based retention would
delete them soon after they are produced (while the replay succeeds).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import struct
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .config import JobConfig, kafka_client_settings, kafka_consumer
from .contract import OperationRequest
from .ledger import head, record_operation, retried
from .librdkafka import librdkafka_settings
from .registry import Registry

log = logging.getLogger("floe.operation")

HOLD_PREFIX = "floe_replay_"
HOLD_MAX_AGE_MS = 7 * 86_400_000
ORIGINAL_TIMESTAMP = "floe.original-timestamp"  # timestamps now: the row's, epoch ms as text


class ReplayRefused(ValueError):
    """The target cannot take the replay: the message says what to change."""


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


# --- values encoded again ----------------------------------------------------------------------


def _named(schema: Any, named: dict[str, Any], namespace: str | None = None) -> None:
    """Records the named types ``schema`` defines, by full and short name."""
    if isinstance(schema, list):
        for branch in schema:
            _named(branch, named, namespace)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in ("record", "enum", "fixed") and schema.get("name"):
        space = schema.get("namespace", namespace)
        named.setdefault(schema["name"].rsplit(".", 1)[-1], schema)
        named.setdefault(
            schema["name"] if "." in schema["name"] or not space else f"{space}.{schema['name']}",
            schema,
        )
        namespace = space
    for field in schema.get("fields", ()):
        _named(field["type"], named, namespace)
    for key in ("items", "values"):
        if key in schema:
            _named(schema[key], named, namespace)
    if isinstance(kind, (dict, list)):
        _named(kind, named, namespace)


def _datum(value: Any, schema: Any, named: dict[str, Any]) -> Any:
    """A decoded column's value as fastavro writes it for the writer ``schema`` (the mapping
    of :mod:`.avro_types`, read backwards)."""
    if isinstance(schema, str) and schema in named:
        schema = named[schema]
    if isinstance(schema, list):
        others = [b for b in schema if b != "null"]
        if value is None:
            return None
        if len(others) == 1:
            return _datum(value, others[0], named)
        members = value if isinstance(value, dict) else value.asDict(recursive=True)
        for index, branch in enumerate(others):  # struct<member0, member1, ...>
            if members.get(f"member{index}") is not None:
                return _datum(members[f"member{index}"], branch, named)
        return None
    if value is None:
        return None
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if kind == "record":
        fields = value if isinstance(value, dict) else value.asDict(recursive=True)
        return {
            f["name"]: _datum(fields.get(f["name"]), f["type"], named) for f in schema["fields"]
        }
    if kind == "array":
        return [_datum(item, schema["items"], named) for item in value]
    if kind == "map":
        pairs = value.items() if isinstance(value, dict) else value
        return {k: _datum(v, schema["values"], named) for k, v in pairs}
    if isinstance(kind, (dict, list)):
        return _datum(value, kind, named)
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if (
        logical in ("timestamp-millis", "timestamp-micros")
        and isinstance(value, dt.datetime)
        and value.tzinfo is None
    ):
        return value.astimezone(dt.timezone.utc)  # Spark's naive local time
    if logical == "uuid":
        return str(value)
    if kind in ("bytes", "fixed") and not isinstance(value, Decimal):
        return bytes(value)
    return value


class Encoder:
    """A row's value in the registry's wire format, by its writer schema id."""

    def __init__(self, registry: Registry | None, fmt: str) -> None:
        self.registry, self.fmt = registry, fmt
        self.parsed: dict[int, tuple[Any, dict[str, Any], Any]] = {}

    def _writer(self, schema_id: int) -> tuple[Any, dict[str, Any], Any]:
        import fastavro

        if schema_id not in self.parsed:
            assert self.registry is not None
            found = self.registry.by_id(schema_id)
            if found is None:
                raise ReplayRefused(
                    f"schema id {schema_id} is not in the registry any more: "
                    "its rows cannot be encoded again"
                )
            parsed_names: dict[str, Any] = {}
            raw_names: dict[str, Any] = {}
            for _, text in found.references:
                reference = json.loads(text)
                fastavro.parse_schema(reference, named_schemas=parsed_names)
                _named(reference, raw_names)
            raw = json.loads(found.schema)
            _named(raw, raw_names)
            self.parsed[schema_id] = (
                fastavro.parse_schema(raw, named_schemas=parsed_names),
                raw_names,
                raw,
            )
        return self.parsed[schema_id]

    def value(self, row: Any) -> bytes | None:
        raw = row["value_raw"]
        if raw is not None:  # kept raw (or a part of it): the bytes as they came
            return bytes(raw)
        value = row["value"] if "value" in row.__fields__ else None
        if value is None:
            return None  # a tombstone
        schema_id = row["kafka"]["schema_id"]
        header = b"" if schema_id is None else b"\x00" + struct.pack(">I", schema_id)
        if self.fmt == "json":
            plain = value.asDict(recursive=True) if hasattr(value, "asDict") else value
            return header + json.dumps(plain, default=_json_default, separators=(",", ":")).encode()
        import fastavro

        parsed, named, raw = self._writer(schema_id)
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, _datum(value, raw, named))
        return header + buffer.getvalue()


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    return str(value)


# --- the target's retention -------------------------------------------------------------------


def retention_horizon(configs: dict[str, str], now_ms: int) -> int | None:
    """The Kafka timestamp (epoch ms) below which a topic with ``configs`` deletes a record
    produced with it now, or None where it keeps it: the topic is only compacted, keeps
    records for ever (``retention.ms`` -1), or stamps them itself (LogAppendTime)."""
    retention = int(configs.get("retention.ms") or -1)
    if (
        "delete" not in configs.get("cleanup.policy", "delete")
        or retention < 0
        or configs.get("message.timestamp.type", "CreateTime") != "CreateTime"
    ):
        return None
    return now_ms - retention


def retention_refusal(
    topic: str, configs: dict[str, str], older: int, oldest_ms: int
) -> str | None:
    """Why rows cannot be replayed with their timestamps to ``topic``, whose retention deletes
    ``older`` of them (the oldest stamped ``oldest_ms``), or None where it deletes none."""
    if not older:
        return None
    retention = int(configs["retention.ms"])
    oldest = dt.datetime.fromtimestamp(oldest_ms / 1000, dt.timezone.utc)
    return (
        f"topic {topic} deletes records older than {_span(retention)} (retention.ms "
        f"{retention}), and {older} of the rows to replay are older (the oldest from "
        f"{oldest:%Y-%m-%dT%H:%M:%SZ}): with their timestamps they would be deleted soon "
        "after they are produced. Set replay.timestamps: now (each record stamped when "
        f"produced, its original timestamp kept in header {ORIGINAL_TIMESTAMP}), or raise "
        "the topic's retention.ms (-1 keeps records for ever)"
    )


def _span(ms: int) -> str:
    for unit, size in (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size} {unit}" + "s" * (ms != size)
    return f"{ms} ms"


# --- the run -----------------------------------------------------------------------------------


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
