"""Backfill: a range of the topic landed in the table beside the streaming job, each record
once (a table made for a topic that already had history, rows lost to a roll back or a
rebuild, a job that started at ``latest``).

The range is per partition: from ``fromOffset`` (or the first record at ``fromTime``, or
Kafka's earliest) to below ``toOffset`` (or the first record at ``toTime``), and never at or
above the table's offsets: the job lands from there, the ledger stays the one truth of where
it is, and the backfill never touches it.  A partition the table has no offsets for yet is
left to the job.

Each chunk of at most ``recordsPerCommit`` offsets of one partition is read from Kafka (a Spark
batch), its records whose offsets the table already holds left out (read at the snapshot the
commit goes on top of), decoded as the job decodes them (a routed topic's table takes only its
routed records), and appended in one commit on ``main`` that holds only if ``main`` is still at
that snapshot (:meth:`~.commit.BranchCommitter.publish`, leaving the writer's tag where it is):
the job's commits in between send the chunk back to be read again, so a record is never
appended twice, whoever commits meanwhile, and a run killed midway and started again lands
only what is not there.  Each commit's summary carries ``floe.operation`` (the operation's uid),
``floe.operation.rows`` and ``floe.operation.range`` (``partition:from-to``).

Into a new table (``into``), made with the layout of the topic's table, the backfill is that
table's writer: its commits carry the offsets as the job's do (the topic's writer, its tag),
from where they are to Kafka's end when it starts, an empty commit for a chunk that had no
record, so a KafkaIcebergTopic made for that table afterwards goes on from there.

Records that do not decode land raw (``value_raw``, ``value_error``), as the job keeps them,
and go to the topic's dead-letter topic before their chunk commits, as the job's batch sends
them: once, but those the backfill's earlier runs sent (:mod:`.dead_letters`, read back from
when this run started, less its clock margin).  Each commit's summary counts them
(``floe.operation.undecodable``).
"""

from __future__ import annotations

import logging
import time
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import dead_letters, routing
from .batch_write import undecodable
from .commit import commit_with_retries
from .config import JobConfig
from .contract import BackfillSpec, OperationRequest, rfc3339_seconds
from .decode import framed_ids
from .kafka_offsets import offsets_for_time, read_range, topic_partitions, watermarks
from .ledger import (
    OPERATION,
    OPERATION_ROWS,
    head,
    last_commit,
    merge_offsets,
    operation_commits,
    operation_snapshots,
    record_operation,
    summary_properties,
    summed,
)
from .table_writer import TableWriter

log = logging.getLogger("floe.operation")

RANGE = "floe.operation.range"
UNDECODABLE = "floe.operation.undecodable"  # a commit's rows landed raw
ATTEMPTS = 20  # a chunk whose commit finds main moved (the job committed) is read this often


def _ms(text: str) -> int:
    return int(rfc3339_seconds(text) * 1000)


def ranges(
    config: JobConfig, spec: BackfillSpec, committed: dict[int, int], into: bool = False
) -> tuple[dict[int, tuple[int, int]], dict[int, str]]:
    """Per partition, the offsets ``[from, to)`` to land, and why the others are left out;
    ``into`` a new table, whose offsets are the backfill's: from where they are, to Kafka's
    end."""
    partitions = sorted(spec.partitions or topic_partitions(config))
    marks = watermarks(config, partitions)
    starts = offsets_for_time(config, partitions, _ms(spec.from_time)) if spec.from_time else {}
    ends = offsets_for_time(config, partitions, _ms(spec.to_time)) if spec.to_time else {}
    found, skipped = {}, {}
    for p in partitions:
        low, high = marks[p]
        if into:
            lo = max(low, spec.from_offset or 0, starts.get(p, 0), committed.get(p, 0))
            hi = min([high, *(x for x in (spec.to_offset, ends.get(p)) if x is not None)])
            if lo < hi:
                found[p] = (lo, hi)
            else:
                skipped[p] = f"nothing to land: offsets {lo} to {hi} (Kafka has {low} to {high})"
            continue
        if p not in committed:
            skipped[p] = (
                "the table has no offsets for it yet: the job lands it from where it starts"
            )
            continue
        lo = max(low, spec.from_offset or 0, starts.get(p, 0))
        hi = min(high, committed[p], *(x for x in (spec.to_offset, ends.get(p)) if x is not None))
        if lo >= hi:
            skipped[p] = (
                f"nothing to land: offsets {lo} to {hi} (Kafka has {low} to {high}, "
                f"the table's offsets are at {committed[p]})"
            )
            continue
        found[p] = (lo, hi)
    return found, skipped


class Backfill:
    """One backfill run (:func:`run`)."""

    def __init__(
        self,
        spark: SparkSession,
        top: JobConfig,
        config: JobConfig,
        request: OperationRequest,
        writer: TableWriter,
        source: str,
    ) -> None:
        """``source``: the topic's table whose records (a route's) land, in ``config``'s
        table: that one, or a new one (``into``)."""
        assert request.backfill is not None
        self.spark, self.top, self.config, self.request = spark, top, config, request
        self.spec = request.backfill
        self.writer = writer
        self.table_ref = writer.branch_name  # main, or the branch the job lands in
        self.into = self.spec.into is not None
        self.route = next(
            i for i, d in enumerate(top.destinations()) if d.table.identifier == source
        )
        self.started_ms = int(time.time() * 1000)
        self.dead_letter_error: str | None = None  # the dead-letter topic's last refusal

    def _records(self, partition: int, lo: int, hi: int) -> DataFrame:
        """Kafka's records ``[lo, hi)`` of one partition."""
        return read_range(self.spark, self.config, {partition: lo}, {partition: hi})

    def _mine(self, records: DataFrame) -> tuple[DataFrame, list[int], list[int]]:
        """The table's records among ``records`` (for a routed topic, those routed to it) and
        their writer schema ids of values and keys."""
        framed = self.config.value.format in ("avro", "protobuf")
        ids = framed_ids(records, "value") if framed else []
        keys = framed_ids(records, "key") if self.config.key.framed else []
        if not self.top.routes:
            return records, ids, keys
        routed = routing.routed(records, self.top, self.writer.registry, ids)
        return routing.split(routed, self.top, len(self.top.destinations()))[self.route]

    def _elsewhere(self, partition: int, lo: int, hi: int) -> DataFrame | None:
        """The offsets ``[lo, hi)`` of one partition that the topic's other tables hold (as
        ``_held``): a record lands in one table, so a route's table does not take again what
        the topic's own table (or another route) took before its route existed.  With fanOut
        a record lands in every route that matched, so only the own table and the routes
        exclude each other.  None for a topic of one table, or into a new table."""
        if self.into or not self.top.routes:
            return None
        names = [d.table.identifier for d in self.top.destinations()]
        others = [
            name
            for number, name in enumerate(names)
            if number != self.route and not (self.top.fan_out and number and self.route)
        ]
        catalog = self.config.table.catalog.name
        held = [
            self.spark.table(f"{catalog}.{name}")
            .filter(
                (F.col("kafka.partition") == partition)
                & (F.col("kafka.offset") >= lo)
                & (F.col("kafka.offset") < hi)
            )
            .select(F.col("kafka.offset").alias("_held"))
            for name in others
        ]
        return reduce(DataFrame.unionByName, held)

    def _chunk(self, partition: int, lo: int, hi: int) -> tuple[int, int]:
        """Lands the chunk's records the table has not got, in one commit; returns how many,
        and how many the topic's other tables hold (left there).  A commit of anyone else in
        between sends it back to be read and checked again."""
        counts, _ = commit_with_retries(
            lambda: self._chunk_once(partition, lo, hi), attempts=ATTEMPTS
        )
        return counts

    def _chunk_once(self, partition: int, lo: int, hi: int) -> tuple[int, int]:
        """One try of :meth:`_chunk`, against ``main`` as it is now (CommitConflict when it
        moves before the commit)."""
        committer = self.writer.committer
        catalog = self.writer.catalog
        mine, ids, keys = self._mine(self._records(partition, lo, hi))
        # Their writer schemas planned first (the table may evolve for them): the table is
        # read after
        self.writer.plan_ids(catalog.load_table(self.config.table.identifier), ids, keys)
        table = catalog.load_table(self.config.table.identifier)
        ref = self.config.table.ref
        base = head(table, ref).snapshot_id
        ledger = last_commit(table, self.config.writer, self.config.kafka.topic, ref=ref)
        if self.into:  # the new table's offsets are the backfill's own
            upto = hi
            lo = max(lo, ledger.offsets.get(partition, 0))
        else:  # main rolled back meanwhile: the job lands from its offsets
            upto = min(hi, ledger.offsets.get(partition, lo))
        if upto <= lo:
            return 0, 0
        held = (
            self.spark.read.option("versionAsOf", str(base))
            .table(self.table_ref)
            .filter(
                (F.col("kafka.partition") == partition)
                & (F.col("kafka.offset") >= lo)
                & (F.col("kafka.offset") < upto)
            )
            .select(F.col("kafka.offset").alias("_held"))
        )
        if upto < hi:
            mine = mine.filter(F.col("offset") < upto)
        elsewhere = self._elsewhere(partition, lo, upto)
        taken = 0
        if elsewhere is not None:
            elsewhere = elsewhere.persist()  # the other tables read once: counted, left out
            taken = mine.join(elsewhere, mine["offset"] == elsewhere["_held"], "left_semi").count()
            held = held.unionByName(elsewhere)
        fresh = mine.join(held, mine["offset"] == held["_held"], "left_anti")
        rows = self.writer._decode(fresh, table, ids, keys).persist()
        try:
            count = rows.count()
            if count == 0 and not self.into:
                return 0, taken
            raw = self._undecodable(rows) if count else 0
            properties = {
                OPERATION: self.request.uid,
                OPERATION_ROWS: str(count),
                RANGE: f"{partition}:{lo}-{upto}",
                **({UNDECODABLE: str(raw)} if raw else {}),
            }
            if self.into:  # the offsets, as the job commits them (empty: they move on)
                properties.update(
                    summary_properties(
                        self.config.writer,
                        self.config.kafka.topic,
                        merge_offsets(ledger.offsets, {partition: upto}),
                        ledger.vtts,
                        self.config.generation,
                        0,
                    )
                )
            if count:
                committer.append(rows, base, lambda _: properties, tag=self.into)
            else:  # no file: the commit moves the offsets alone
                committer.publish_summary(base, properties, tag=self.into)
            return count, taken
        finally:
            rows.unpersist()
            if elsewhere is not None:
                elsewhere.unpersist()

    def _undecodable(self, rows: DataFrame) -> int:
        """How many of the chunk's ``rows`` (persisted) did not decode; sent to the dead-letter
        topic, where the topic has one, before the chunk commits (a refusal is reported on the
        outcome: the rows are committed raw either way)."""
        bad = rows.filter(undecodable(rows))
        raw = bad.count()
        if raw and self.config.dead_letter is not None:
            refused = dead_letters.send(bad, raw, self.config, self.started_ms)
            if refused is not None:
                self.dead_letter_error = refused
        return raw

    def run(self) -> dict[str, Any]:
        table = self.writer.catalog.load_table(self.config.table.identifier)
        committed = last_commit(
            table, self.config.writer, self.config.kafka.topic, ref=self.config.table.ref
        ).offsets
        found, skipped = ranges(self.config, self.spec, committed, self.into)
        log.info(
            "backfill %s of %s: %s; left out: %s", self.request.name, self.table_ref, found, skipped
        )
        size = self.spec.records_per_commit
        landed = elsewhere = 0
        for partition, (lo, hi) in sorted(found.items()):
            for start in range(lo, hi, size):
                end = min(start + size, hi)
                count, taken = self._chunk(partition, start, end)
                landed += count
                elsewhere += taken
                log.info(
                    "backfill %s: partition %d offsets %d..%d: %d record(s) landed, %d "
                    "held by the topic's other tables",
                    self.request.name,
                    partition,
                    start,
                    end,
                    count,
                    taken,
                )
        table = self.writer.catalog.load_table(self.config.table.identifier)
        commits, rows = operation_commits(table, self.request.uid, self.config.table.ref)
        raw = summed(
            operation_snapshots(table, self.request.uid, self.config.table.ref), UNDECODABLE
        )
        return {
            **({"into": self.config.table.identifier} if self.into else {}),
            "ranges": {str(p): {"from": lo, "to": hi} for p, (lo, hi) in found.items()},
            "leftOut": {str(p): why for p, why in skipped.items()},
            "landed": rows,
            "commits": commits,
            **({"undecodable": raw} if raw else {}),
            **({"deadLetterError": self.dead_letter_error} if self.dead_letter_error else {}),
            **({"heldElsewhere": elsewhere} if self.top.routes and not self.into else {}),
        }


def run(
    spark: SparkSession,
    top: JobConfig,
    config: JobConfig,
    request: OperationRequest,
    writer: TableWriter,
    source: str,
) -> dict[str, Any]:
    """Runs the backfill of ``source`` (one of ``top``'s tables) on ``config``'s table (that
    one, or a new one) and records its outcome on the table; returns the outcome."""
    outcome = {"type": "Backfill", **Backfill(spark, top, config, request, writer, source).run()}
    record_operation(writer.catalog.load_table(config.table.identifier), request.uid, outcome)
    return outcome
