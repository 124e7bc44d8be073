"""The query's ``foreachBatch``: one micro-batch into the topic's tables, each through its
:class:`~.table_writer.TableWriter`, with the batch's offsets from Spark's offset log."""

from __future__ import annotations

import json
import logging
import time
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import checkpoint, metrics, routing, steps
from .batch_write import record_bytes
from .commit_size import CommitSize, Replan
from .config import JobConfig
from .contract import ROW_LEVEL
from .decode import frame
from .kafka_offsets import floor_offsets, group_consumer, topic_identity
from .ledger import merge_offsets
from .registry import Registry
from .steps import step
from .table_writer import TableWriter

log = logging.getLogger("floe.job")


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
    # Where a batch read outside the query starts and ends (:meth:`land`), not the offset log's
    given: tuple[dict[int, int], dict[int, int]] | None = None
    identity_asked: bool = False  # topic_id asked again at the first batch (:meth:`_identify`)
    group: Any = None  # the consumer group's client, kept from batch to batch
    size: CommitSize | None = None  # the records a commit takes (the query's cap)

    def __post_init__(self) -> None:
        destinations = self.config.destinations()
        uuids = self.table_uuids or [None] * len(destinations)
        rejoins = self.rejoins_at or [None] * len(destinations)
        names, routing = self.config.recorded_routing()
        self.tables = [
            TableWriter(
                destination,
                self.spark,
                self.registry,
                table_uuid=uuid,
                floor=self._floor,
                alone=len(destinations) == 1,
                topic_id=self.topic_id,
                tables=names,
                routing=routing,
                rejoins_at=rejoin,
            )
            for destination, uuid, rejoin in zip(destinations, uuids, rejoins)
        ]

    def _floor(self, partitions: list[int]) -> dict[int, int]:
        return floor_offsets(self.spark, self.config, partitions)

    def _commit_consumer_group(self, offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        try:
            if self.group is None:
                self.group = group_consumer(self.config)
            self.group.commit(
                offsets=[
                    TopicPartition(self.config.kafka.topic, p, o)
                    for p, o in sorted(offsets.items())
                ],
                asynchronous=False,
            )
        except Exception as error:  # noqa: BLE001 - lag tooling only; the table holds the truth
            log.warning(
                "could not commit offsets to consumer group %s: %s",
                self.config.consumer_group,
                error,
            )
            group, self.group = self.group, None  # made anew at the next batch
            if group is not None:
                with suppress(Exception):  # it is dropped either way
                    group.close()

    def _stats(self, batch: DataFrame) -> list[Any]:
        """Per Kafka partition: last offset, newest timestamp, rows, bytes and (Avro) the writer
        schema ids, in one pass over the batch."""
        aggregates = [
            F.max("offset").alias("last"),
            F.max("timestamp").alias("latest"),
            F.count(F.lit(1)).alias("rows"),
            record_bytes().alias("bytes"),
        ]
        if self.config.value.format != "raw":  # JSON: only values framed for JSON Schema
            batch = frame(batch)
            aggregates.append(F.collect_set("_schema_id").alias("schema_ids"))
        if self.config.key.framed:
            batch = frame(batch, "key")
            aggregates.append(F.collect_set("_key_schema_id").alias("key_ids"))
        return batch.groupBy("partition").agg(*aggregates).collect()

    def _logged_offsets(self, batch_id: int) -> tuple[dict[int, int] | None, dict[int, int] | None]:
        """Where the batch starts and ends, from Spark's offset log.  The ends cover records
        the batch does not see (transaction markers, aborted or compacted records), so the
        next batch starts exactly where the table says this one ended."""
        if self.given is not None:
            return self.given
        location, topic = self.config.checkpoint_location, self.config.kafka.topic
        previous_id, previous_end = self.previous_end
        start = (
            previous_end
            if previous_id == batch_id - 1 and previous_end is not None
            else checkpoint.start_offsets(self.spark, location, topic, batch_id)
        )
        end = checkpoint.end_offsets(self.spark, location, topic, batch_id)
        self.previous_end = (batch_id, end)
        return start, end

    def _batch_offsets(
        self, batch_id: int, stats: list[Any]
    ) -> tuple[dict[int, int] | None, dict[int, int]]:
        """Where the batch starts and ends: the offset log's, or past the records seen."""
        start, end = self._logged_offsets(batch_id)
        seen = {int(r["partition"]): int(r["last"]) + 1 for r in stats}
        return start, merge_offsets(seen, end or {})

    @property
    def single_pass(self) -> bool:
        """Whether a batch is read once, by the write: an append to one table with no
        dead-letter topic.  Routes pick each record's table from a first pass, a merge reads
        its rows twice, dead letters are sent before the commit, and inferSchema reads the
        values' fields first."""
        return (
            not self.config.routes
            and self.config.table.mode not in ROW_LEVEL
            and self.config.dead_letter is None
            and not self.config.value.infer_schema
        )

    def land(
        self, batch: DataFrame, batch_id: int, start: dict[int, int], end: dict[int, int]
    ) -> None:
        """Lands a batch read outside the query, ``[start, end)`` of the topic (a batch that
        stopped between two tables' commits, finished: :mod:`.partial_batch`)."""
        self.given = (start, end)
        try:
            self(batch, batch_id)
        finally:
            self.given = None

    def _identify(self) -> None:
        """The topic's identity, when the job started before the topic existed: asked again
        once, at the first batch (the topic has records by then), so that the offsets are
        recorded with it and a topic created again later is told apart."""
        if self.topic_id is not None or self.identity_asked:
            return
        self.identity_asked = True
        self.topic_id = topic_identity(self.config)
        for table in self.tables:
            table.topic_id = self.topic_id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        steps.taken()  # (what ran between batches is not the batch's)
        if self.given is None and self.size is not None and self.size.replan is not None:
            raise Replan(
                f"Replan: batch {batch_id} was planned with at most "
                f"{self.size.limit} records; the last batch asks for "
                f"{self.size.replan}"
            )
        started = time.monotonic()
        with step("identify"):
            self._identify()
        metrics.doing("writing" if self.single_pass else "reading", batch_id)
        if self.single_pass:
            with step("offset_log"):
                start, end = self._logged_offsets(batch_id)
            if end is not None:
                self._write(batch, batch_id, start, end, started)
                return
        batch = batch.persist()
        try:
            with step("stats"):
                stats = self._stats(batch)
            stats_seconds = time.monotonic() - started
            with step("offset_log"):
                start, batch_next = self._batch_offsets(batch_id, stats)
            if not batch_next:
                return
            latest = [int(r["latest"].timestamp() * 1000) for r in stats]
            vtts = min(latest) if latest else None
            schema_ids, key_ids = (
                sorted({i for r in stats for i in (r[name] or [])})
                if stats and name in stats[0]
                else []
                for name in ("schema_ids", "key_ids")
            )
            input_rows = sum(int(r["rows"]) for r in stats)
            input_bytes = sum(int(r["bytes"] or 0) for r in stats)
            self._write(
                batch,
                batch_id,
                start,
                batch_next,
                started,
                stats_seconds,
                (vtts, schema_ids, key_ids, input_rows, input_bytes),
            )
        finally:
            batch.unpersist()

    def _write(
        self,
        batch: DataFrame,
        batch_id: int,
        start: dict[int, int] | None,
        batch_next: dict[int, int],
        started: float,
        stats_seconds: float = 0.0,
        stats: tuple[Any, ...] | None = None,
    ) -> None:
        """Commits the batch to its tables (``stats``: what a first pass found, else the write
        finds it) and logs what it did."""
        if stats is None:
            outcomes = [
                self.tables[0].commit_batch(batch, batch_id, start, batch_next, single_pass=True)
            ]
            input_rows = sum(o.input_rows for o in outcomes)
            input_bytes = sum(o.bytes for o in outcomes)
        else:
            vtts, schema_ids, key_ids, input_rows, input_bytes = stats
            if self.config.routes:
                routed = routing.routed(batch, self.config, self.registry, schema_ids).persist()
                parts = routing.split(routed, self.config, len(self.tables))
            else:
                routed, parts = None, [(batch, schema_ids, key_ids)]
            try:
                outcomes = [
                    table.commit_batch(rows, batch_id, start, batch_next, vtts, ids, keys)
                    for table, (rows, ids, keys) in zip(self.tables, parts)
                ]
            finally:
                if routed is not None:
                    routed.unpersist()
        done = [o.offsets for o in outcomes if o.offsets is not None]
        if done:
            with step("consumer_group"):
                self._commit_consumer_group(
                    {p: min(o.get(p, 0) for o in done) for p in set().union(*done)}
                )
        seconds = time.monotonic() - started
        metrics.record_batch(
            [t.config.table.identifier for t in self.tables],
            outcomes,
            input_rows,
            input_bytes,
            seconds,
            self.config.kafka.topic,
        )
        log.info(
            json.dumps(
                {
                    "event": "floe.batch",
                    "writer": self.config.writer,
                    "batch": batch_id,
                    "input_rows": input_rows,
                    "rows": sum(o.written for o in outcomes),
                    "bytes": input_bytes,
                    "bytes_per_second": round(input_bytes / seconds, 1),
                    "decode_failures": sum(o.errors for o in outcomes),
                    "dead_letters": sum(o.dead_letters for o in outcomes),
                    "dead_letter_failures": sum(o.dead_letter_failures for o in outcomes),
                    "conflicts": sum(o.conflicts for o in outcomes),
                    "passes": 2 if stats is not None else 1,
                    "stats_seconds": round(stats_seconds, 3),
                    "write_seconds": round(sum(o.write_seconds for o in outcomes), 3),
                    "commit_seconds": round(sum(o.commit_seconds for o in outcomes), 3),
                    "expired_snapshots": sum(o.expired for o in outcomes),
                    "expire_seconds": round(sum(o.expire_seconds for o in outcomes), 3),
                    "steps": steps.taken(),
                    **(
                        {
                            "tables": {
                                t.config.table.identifier: o.written
                                for t, o in zip(self.tables, outcomes)
                            }
                        }
                        if self.config.routes
                        else {}
                    ),
                    "seconds": round(seconds, 3),
                }
            )
        )
        if self.given is None and self.size is not None:
            self.size.observe(input_rows, input_bytes)
        if self.given is None:
            metrics.report_start(self.spark, self.config.writer)
        metrics.doing("waiting")
