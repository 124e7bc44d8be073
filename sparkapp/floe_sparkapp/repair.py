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
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import Window
from pyspark.sql import functions as F

from .config import JobConfig
from .contract import OperationRequest, RepairSpec
from .decode import frame, raw_reason
from .layout import KEY_FIELDS
from .commit import CommitConflict, commit_with_retries, is_conflict
from .ledger import (OPERATION, OPERATION_ROWS, head, operation_snapshots, record_operation,
                     summed)
from .table_writer import WOULD_EVOLVE, TableWriter, undecodable

log = logging.getLogger("floe.operation")

ATTEMPTS = 8  # a chunk whose commit conflicts (the job committed, a compaction) is tried this often
EXAMPLES = 5  # still-raw rows' errors kept in the outcome, per reason
DEAD_LETTERS = "floe.operation.dead-letters"  # a commit's rows re-driven from dead letters


def _timestamp(text: str) -> Any:
    return F.to_timestamp(F.lit(text.replace("Z", "+00:00")))


def selection(rows: DataFrame, spec: RepairSpec) -> DataFrame:
    """The rows the request selects: kept raw (their value undecoded), and within its
    filters."""
    chosen = rows.filter(undecodable(rows) & F.col("value_raw").isNotNull())
    return _within(chosen, spec, F.col("value_error"), F.col("kafka.schema_id"), "kafka.")


def _within(rows: DataFrame, spec: RepairSpec, error: Any = None, schema_id: Any = None,
            lineage: str = "") -> DataFrame:
    """``rows`` within the request's filters: table rows (``lineage`` ``kafka.``) or Kafka
    records (dead letters: their error and schema id found here when not given)."""
    error = F.col("_dead_letter_error") if error is None else error
    if spec.reasons:
        rows = rows.filter(raw_reason(error).isin(*spec.reasons))
    if spec.schema_ids:
        if schema_id is None:
            rows = frame(rows)
            schema_id = F.col("_schema_id")
        rows = rows.filter(schema_id.isin(*spec.schema_ids))
        if "_schema_id" in rows.columns and not lineage:
            rows = rows.drop("_schema_id", "_frame_error")
    if spec.partitions:
        rows = rows.filter(F.col(f"{lineage}partition").isin(*spec.partitions))
    if spec.from_offset is not None:
        rows = rows.filter(F.col(f"{lineage}offset") >= spec.from_offset)
    if spec.to_offset is not None:
        rows = rows.filter(F.col(f"{lineage}offset") < spec.to_offset)
    if spec.from_time is not None:
        rows = rows.filter(F.col(f"{lineage}timestamp") >= _timestamp(spec.from_time))
    if spec.to_time is not None:
        rows = rows.filter(F.col(f"{lineage}timestamp") < _timestamp(spec.to_time))
    return rows


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
                 writer: TableWriter, top_table: str | None = None) -> None:
        assert request.repair is not None
        self.spark, self.config, self.request, self.spec = spark, config, request, request.repair
        self.writer = writer
        self.table_ref = writer.branch_name  # main, or the branch the job lands in
        self.keyed = config.key.decoded
        self.has_value = config.value.format != "raw"
        # Dead letters are of the topic's own table (undecodable records are never routed)
        self.own_table = top_table is None or top_table == config.table.identifier

    def _plan(self, records: DataFrame) -> tuple[list[int], list[int]]:
        """Plans the records' writer schemas, evolving the table for them (unless a dry run):
        what reads the table is made after this."""
        table = self.writer.catalog.load_table(self.config.table.identifier)
        return self.writer.plan_for(records, table)

    def _decode_records(self, records: DataFrame, ids: tuple[list[int], list[int]]
                        ) -> DataFrame:
        """Kafka records decoded into the table's rows (as it is after :meth:`_plan`)."""
        table = self.writer.catalog.load_table(self.config.table.identifier)
        return self.writer._decode(records, table, *ids)

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
        def rows() -> DataFrame:
            return selection(self.spark.table(self.table_ref), self.spec).filter(
                (F.col("kafka.partition") == partition) & (F.col("kafka.offset") >= lo)
                & (F.col("kafka.offset") <= hi))

        ids = self._plan(as_records(rows()))  # the table may evolve: read it again after
        decoded = self._decode_records(as_records(rows()), ids).persist()
        try:
            failed = undecodable(decoded)
            waits = F.col("value_error").startswith(WOULD_EVOLVE)
            fixed = decoded.filter(~failed)
            count = fixed.count()
            stayed = _stayed(decoded.filter(failed & ~waits))  # before the merge changes them
            evolving = {r[0][len(WOULD_EVOLVE):]: int(r[1]) for r in decoded.filter(
                failed & waits).groupBy("value_error").count().collect()}
            if count and not self.spec.dry_run:
                try:
                    self._merge(fixed, partition, lo, hi, count)
                except Exception as error:  # Spark's error carries Iceberg's (a compaction)
                    if is_conflict(error) or "conflict" in str(error):
                        raise CommitConflict(str(error).splitlines()[0][:500]) from None
                    raise
            return count, stayed, evolving
        finally:
            decoded.unpersist()

    def _redrive(self) -> dict[str, int]:
        """The dead-letter topic's records of this table that the table has no row for (its
        raw rows deleted, or lost to a roll back while Kafka no longer has them) and that now
        decode, appended in one commit that holds only if ``main`` is still where they were
        checked against it (else read and checked again)."""
        from .dead_letters import records
        from .kafka_offsets import topic_partitions

        assert self.config.dead_letter is not None
        dead = self.config.model_copy(update={"kafka": self.config.kafka.model_copy(
            update={"topic": self.config.dead_letter.topic})})
        if not topic_partitions(dead):  # none was ever sent, or it was deleted
            return {"read": 0, "missing": 0, "landed": 0, "stayUndecodable": 0}
        letters = _within(records(self.spark, self.config), self.spec)
        ids = self._plan(letters.drop("_dead_letter_error"))
        read = letters.count()
        outcome, _ = commit_with_retries(lambda: self._redrive_once(letters, ids),
                                         attempts=ATTEMPTS)
        return {"read": read, **outcome}

    def _redrive_once(self, letters: DataFrame, ids: tuple[list[int], list[int]]
                      ) -> dict[str, int]:
        """One try of :meth:`_redrive`, against ``main`` as it is now (CommitConflict when it
        moves before the commit)."""
        table = self.writer.catalog.load_table(self.config.table.identifier)
        base = head(table, self.config.table.ref).snapshot_id
        held = (self.spark.read.option("versionAsOf", str(base)).table(self.table_ref)
                .select(F.col("kafka.partition").alias("_p"), F.col("kafka.offset").alias("_o")))
        missing = letters.join(held, (letters["partition"] == held["_p"])
                               & (letters["offset"] == held["_o"]), "left_anti")
        decoded = self._decode_records(missing.drop("_dead_letter_error"), ids).persist()
        try:
            failed = undecodable(decoded)
            fixed = decoded.filter(~failed)
            landing = fixed.count()
            # (a dry run does not evolve the table: those that wait for it would land)
            waits = F.col("value_error").startswith(WOULD_EVOLVE)
            outcome = {"missing": decoded.count(), "landed": 0,
                       "stayUndecodable": decoded.filter(failed & ~waits).count()}
            if self.spec.dry_run:
                return {**outcome, "wouldLand": landing + decoded.filter(failed & waits).count()}
            if landing:
                self.writer.committer.append(fixed, base, lambda _: {
                    OPERATION: self.request.uid, OPERATION_ROWS: str(landing),
                    DEAD_LETTERS: str(landing)}, tag=False)
            return {**outcome, "landed": landing}
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
            (count, still, evolves), _ = commit_with_retries(
                lambda: self._chunk(partition, lo, hi), attempts=ATTEMPTS)
            decoded += count + sum(evolves.values())
            _add(stayed, still)
            for change, rows in evolves.items():
                evolving[change] = evolving.get(change, 0) + rows
            log.info("repair %s: partition %d offsets %d..%d: %d of %d row(s) decoded%s",
                     self.request.name, partition, lo, hi, count, n,
                     " (dry run)" if spec.dry_run else "")
        stayed_count = sum(s["count"] for s in stayed.values())
        redriven = ({"deadLetters": self._redrive()} if self.config.dead_letter is not None
                    and spec.dead_letters and self.own_table else {})
        if spec.dry_run:
            return {"selected": total, "wouldRepair": decoded, "stayRaw": stayed_count,
                    "stayRawByReason": stayed, **redriven,
                    **({"wouldEvolve": sorted(evolving)[:EXAMPLES]} if evolving else {})}
        made = operation_snapshots(self.writer.catalog.load_table(
            self.config.table.identifier), self.request.uid, self.config.table.ref)
        commits, rows = len(made), summed(made, OPERATION_ROWS)
        landed = summed(made, DEAD_LETTERS)
        if redriven:
            redriven["deadLetters"]["landed"] = landed  # in every attempt
        return {"selected": total, "repaired": rows - landed, "commits": commits,
                "stayRaw": stayed_count, "stayRawByReason": stayed, **redriven}


def run(spark: SparkSession, config: JobConfig, request: OperationRequest,
        writer: TableWriter, top_table: str | None = None) -> dict[str, Any]:
    """Runs the repair on ``config``'s table (the destination the request names, which
    :meth:`~.contract.RepairSpec.refused` lets through) and records its outcome on the table;
    returns the outcome."""
    assert request.repair is not None
    outcome = {"type": "Repair", "dryRun": request.repair.dry_run,
               **Repair(spark, config, request, writer, top_table).run()}
    table = writer.catalog.load_table(config.table.identifier)
    record_operation(table, request.uid, outcome)
    return outcome
