"""Repair: a table's raw rows decoded again once their cause is fixed (a schema registered, a
breaking change approved, ``schemaEvolution`` relaxed), beside the streaming job.

The rows kept raw (``value_raw`` + ``value_error``, no ``value``) that the request selects (by
reason, writer schema id, partition, offset or time) are read back as the Kafka records they
were (key, value bytes, lineage) and decoded by the job's own decoder for the table as it is
now (:class:`~.table_writer.TableWriter`: a writer schema the table lacks evolves it, as in
the job).  The rows that now decode replace their raw rows in place, one MERGE per chunk of at
most ``rowsPerCommit`` rows of one Kafka partition: each ``(partition, offset)`` stays one row.
Each chunk's commit carries ``floe.operation`` (the operation's uid) and
``floe.operation.rows`` in its snapshot summary; the MERGE matches only rows still raw, in
the chunk's offset range, so a run killed midway and started again goes on with the rows
still raw, and the streaming job's appends (offsets above every raw row's) never conflict
with it.  Rows that still do not decode stay as they are, counted by their reason now.

The outcome is recorded on the table (:func:`~.ledger.record_operation`), which is how the
operator learns it.  A dry run decodes and counts, and changes no row and no schema: the rows
of a writer schema the table would first evolve for count as decodable, and the outcome names
those changes (``wouldEvolve``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import Window
from pyspark.sql import functions as F

from .config import JobConfig
from .contract import OperationRequest, RepairSpec
from .decode import framed_ids, raw_reason
from .layout import KEY_FIELDS
from .ledger import OPERATION, OPERATION_ROWS, operation_commits, record_operation
from .table_writer import WOULD_EVOLVE, TableWriter, undecodable

log = logging.getLogger("floe.operation")

ATTEMPTS = 8  # a chunk whose commit conflicts (compaction rewrote its files) is tried this often
EXAMPLES = 5  # still-raw rows' errors kept in the outcome, per reason


def _timestamp(text: str) -> Any:
    return F.to_timestamp(F.lit(text.replace("Z", "+00:00")))


def selection(rows: DataFrame, spec: RepairSpec) -> DataFrame:
    """The rows the request selects: kept raw (their value undecoded), and within its
    filters."""
    chosen = rows.filter(undecodable(rows) & F.col("value_raw").isNotNull())
    if spec.reasons:
        chosen = chosen.filter(raw_reason(F.col("value_error")).isin(*spec.reasons))
    if spec.schema_ids:
        chosen = chosen.filter(F.col("kafka.schema_id").isin(*spec.schema_ids))
    if spec.partitions:
        chosen = chosen.filter(F.col("kafka.partition").isin(*spec.partitions))
    if spec.from_offset is not None:
        chosen = chosen.filter(F.col("kafka.offset") >= spec.from_offset)
    if spec.to_offset is not None:
        chosen = chosen.filter(F.col("kafka.offset") < spec.to_offset)
    if spec.from_time is not None:
        chosen = chosen.filter(F.col("kafka.timestamp") >= _timestamp(spec.from_time))
    if spec.to_time is not None:
        chosen = chosen.filter(F.col("kafka.timestamp") < _timestamp(spec.to_time))
    return chosen


def chunks(selected: DataFrame, size: int) -> list[tuple[int, int, int, int]]:
    """The selected rows in chunks of at most ``size`` rows of one partition, in offset order:
    ``(partition, first offset, last offset, rows)``."""
    order = Window.partitionBy("p").orderBy("o")
    numbered = (selected.select(F.col("kafka.partition").alias("p"),
                                F.col("kafka.offset").alias("o"))
                .withColumn("chunk", F.floor((F.row_number().over(order) - 1) / size)))
    found = (numbered.groupBy("p", "chunk")
             .agg(F.min("o").alias("lo"), F.max("o").alias("hi"), F.count(F.lit(1)).alias("n"))
             .orderBy("p", "chunk").collect())
    return [(int(r["p"]), int(r["lo"]), int(r["hi"]), int(r["n"])) for r in found]


def as_records(rows: DataFrame) -> DataFrame:
    """Table rows read back as the Kafka source rows they were decoded from."""
    return rows.select(
        F.col("key"), F.col("value_raw").alias("value"), F.col("kafka.topic").alias("topic"),
        F.col("kafka.partition").alias("partition"), F.col("kafka.offset").alias("offset"),
        F.col("kafka.timestamp").alias("timestamp"),
        F.col("kafka.timestamp_type").alias("timestampType"),
        F.col("kafka.headers").alias("headers"))


def _stayed(still: DataFrame) -> dict[str, dict[str, Any]]:
    """The rows that still do not decode, by reason: how many, and a few of their errors."""
    reasons = (still
               .groupBy(raw_reason(F.col("value_error")).alias("reason"))
               .agg(F.count(F.lit(1)).alias("count"),
                    F.slice(F.collect_set("value_error"), 1, EXAMPLES).alias("errors"))
               .collect())
    return {r["reason"]: {"count": int(r["count"]), "errors": [e[:300] for e in r["errors"]]}
            for r in reasons}


def _add(total: dict[str, dict[str, Any]], more: dict[str, dict[str, Any]]) -> None:
    for reason, found in more.items():
        entry = total.setdefault(reason, {"count": 0, "errors": []})
        entry["count"] += found["count"]
        entry["errors"] = (entry["errors"] + [e for e in found["errors"]
                                              if e not in entry["errors"]])[:EXAMPLES]


class Repair:
    """One repair run (:func:`run`)."""

    def __init__(self, spark: SparkSession, config: JobConfig, request: OperationRequest,
                 writer: TableWriter) -> None:
        assert request.repair is not None
        self.spark, self.config, self.request, self.spec = spark, config, request, request.repair
        self.writer = writer
        self.table_ref = writer.table_name
        self.keyed = config.key.decoded
        self.has_value = config.value.format != "raw"

    def _decode(self, rows: DataFrame) -> DataFrame:
        records = as_records(rows)
        table = self.writer.catalog.load_table(self.config.table.identifier)
        framed = self.config.value.format in ("avro", "protobuf")
        value_ids = framed_ids(records, "value") if framed else []
        key_ids = framed_ids(records, "key") if self.config.key.format == "avro" else []
        return self.writer._decode(records, table, value_ids, key_ids)

    def _merge(self, fixed: DataFrame, partition: int, lo: int, hi: int, count: int) -> None:
        """Replaces the chunk's raw rows by ``fixed`` in one commit."""
        from .upsert import with_commit_properties

        view = f"floe_repair_{self.request.uid.replace('-', '')[:12]}_{partition}_{lo}"
        fixed.createOrReplaceTempView(view)
        columns = (["value"] if self.has_value else []) + ["value_raw", "value_error"] + (
            [KEY_FIELDS] if self.keyed else [])
        still_raw = "t.value_raw IS NOT NULL" + (" AND t.value IS NULL" if self.has_value else "")
        statement = (
            f"MERGE INTO {self.table_ref} t USING {view} s "
            "ON t.kafka.partition = s.kafka.partition AND t.kafka.offset = s.kafka.offset "
            "AND t.kafka.topic = s.kafka.topic "
            # Only rows still raw, in the chunk's range: Iceberg checks the commit against the
            # files added meanwhile by these (the job's appends are above every raw row).
            f"AND t.kafka.partition = {partition} AND t.kafka.offset >= {lo} "
            f"AND t.kafka.offset <= {hi} AND {still_raw} "
            "WHEN MATCHED THEN UPDATE SET "
            + ", ".join(f"t.{c} = s.{c}" for c in columns))
        with_commit_properties(self.spark, {OPERATION: self.request.uid,
                                             OPERATION_ROWS: str(count)},
                               lambda: self.spark.sql(statement))
        self.spark.catalog.dropTempView(view)

    def _chunk(self, partition: int, lo: int, hi: int) -> tuple[int, dict[str, Any],
                                                                 dict[str, int]]:
        """Decodes one chunk again and (unless a dry run) replaces the rows that now decode;
        returns how many did, why the others did not, and (a dry run, which does not evolve
        the table) the table's changes that would let more decode, with their rows."""
        rows = selection(self.spark.table(self.table_ref), self.spec).filter(
            (F.col("kafka.partition") == partition) & (F.col("kafka.offset") >= lo)
            & (F.col("kafka.offset") <= hi))
        decoded = self._decode(rows).persist()
        try:
            failed = undecodable(decoded)
            waits = F.col("value_error").startswith(WOULD_EVOLVE)
            fixed = decoded.filter(~failed)
            count = fixed.count()
            stayed = _stayed(decoded.filter(failed & ~waits))  # before the merge changes them
            evolving = {r[0][len(WOULD_EVOLVE):]: int(r[1]) for r in decoded.filter(
                failed & waits).groupBy("value_error").count().collect()}
            if count and not self.spec.dry_run:
                self._merge(fixed, partition, lo, hi, count)
            return count, stayed, evolving
        finally:
            decoded.unpersist()

    def run(self) -> dict[str, Any]:
        spec = self.spec
        selected = selection(self.spark.table(self.table_ref), spec)
        planned = chunks(selected, spec.rows_per_commit)
        total = sum(n for *_, n in planned)
        log.info("repair %s of %s: %d raw row(s) selected, in %d chunk(s)%s", self.request.name,
                 self.table_ref, total, len(planned), " (dry run)" if spec.dry_run else "")
        decoded, stayed, evolving = 0, {}, {}
        for partition, lo, hi, n in planned:
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    count, still, evolves = self._chunk(partition, lo, hi)
                    break
                except Exception as error:  # noqa: BLE001 - a conflicting commit is retried
                    text = str(error)
                    if attempt == ATTEMPTS or not any(m in text for m in (
                            "ValidationException", "CommitFailedException", "conflict")):
                        raise
                    log.warning("repair %s: chunk %d:%d-%d conflicted (attempt %d): %s",
                                self.request.name, partition, lo, hi, attempt,
                                text.splitlines()[0][:300])
                    time.sleep(min(2.0 * attempt, 10.0))
            decoded += count + sum(evolves.values())
            _add(stayed, still)
            for change, rows in evolves.items():
                evolving[change] = evolving.get(change, 0) + rows
            log.info("repair %s: partition %d offsets %d..%d: %d of %d row(s) decoded%s",
                     self.request.name, partition, lo, hi, count, n,
                     " (dry run)" if spec.dry_run else "")
        stayed_count = sum(s["count"] for s in stayed.values())
        if spec.dry_run:
            return {"selected": total, "wouldRepair": decoded, "stayRaw": stayed_count,
                    "stayRawByReason": stayed,
                    **({"wouldEvolve": sorted(evolving)[:EXAMPLES]} if evolving else {})}
        table = self.writer.catalog.load_table(self.config.table.identifier)
        commits, repaired = operation_commits(table, self.request.uid)
        return {"selected": total, "repaired": repaired, "commits": commits,
                "stayRaw": stayed_count, "stayRawByReason": stayed}


def run(spark: SparkSession, config: JobConfig, request: OperationRequest,
        writer: TableWriter) -> dict[str, Any]:
    """Runs the repair on ``config``'s table (the destination the request names, which
    :meth:`~.contract.RepairSpec.refused` lets through) and records its outcome on the table;
    returns the outcome."""
    assert request.repair is not None
    outcome = {"type": "Repair", "dryRun": request.repair.dry_run,
               **Repair(spark, config, request, writer).run()}
    table = writer.catalog.load_table(config.table.identifier)
    record_operation(table, request.uid, outcome)
    return outcome
