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

With a dead-letter topic, the repair also re-drives it (:meth:`Repair._redrive`): its records of
this table that the table has no row for and that now decode are appended, with their own
lineage.  It leaves out those it must not land (:func:`why_left_out`; counted on the outcome
under ``deadLetters.leftOut``, each reason with what to do instead): a record at or above the
table's offsets, whose batch was not committed when its dead letter was sent (the driver
killed, a lost commit) and which the job lands again itself; and a dead letter another of the
topic's tables sent, or one that does not say which table sent it when the topic has several.
The table is not evolved for the dead letters left out.

The outcome is recorded on the table (:func:`~.ledger.record_operation`), which is how the
operator learns it.  A dry run decodes and counts, and changes no row and no schema: the rows
of a writer schema the table would first evolve for count as decodable, and the outcome names
those changes (``wouldEvolve``).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from .batch_decoder import WOULD_EVOLVE
from .batch_write import undecodable
from .commit import CommitConflict, commit_with_retries, is_conflict
from .config import JobConfig
from .contract import OperationRequest, RepairSpec
from .dead_letters import TABLE
from .decode import frame, raw_reason
from .layout import KEY_FIELDS
from .ledger import (
    OPERATION,
    OPERATION_ROWS,
    head,
    last_commit,
    operation_snapshots,
    record_operation,
    summed,
)
from .table_writer import TableWriter

log = logging.getLogger("floe.operation")

ATTEMPTS = 8  # a chunk whose commit conflicts (the job committed, a compaction) is tried this often
EXAMPLES = 5  # still-raw rows' errors kept in the outcome, per reason
DEAD_LETTERS = "floe.operation.dead-letters"  # a commit's rows re-driven from dead letters
REASON = "_left_out"  # a dead letter's column: why it is not re-driven (null: it may be)
# Why dead letters are not re-driven into the table, and what to do instead (the outcome's
# ``deadLetters.leftOut``, which the operation's status shows)
LEFT_OUT = {
    "uncommitted": (
        "at or above the table's offsets: their batch was not committed when they were sent "
        "(the driver killed, a lost commit), and the job lands these records itself; nothing "
        "to do (a record Kafka no longer has is re-driven by a repair once the table's "
        "offsets are past it)"
    ),
    "otherTable": (
        "sent by another of the topic's tables (a route's): a repair of that table "
        "(repair.table) re-drives them"
    ),
    "unknownTable": (
        "sent before floe named the table on each dead letter, and the topic has several "
        "tables: no repair re-drives them; a Backfill of their partitions and offsets lands "
        "those the table lacks, while Kafka has them"
    ),
}


def _timestamp(text: str) -> Any:
    return F.to_timestamp(F.lit(text.replace("Z", "+00:00")))


def selection(rows: DataFrame, spec: RepairSpec) -> DataFrame:
    """The rows the request selects: kept raw (their value undecoded), and within its
    filters."""
    chosen = rows.filter(undecodable(rows) & F.col("value_raw").isNotNull())
    return _within(chosen, spec, F.col("value_error"), F.col("kafka.schema_id"), "kafka.")


def _within(
    rows: DataFrame, spec: RepairSpec, error: Any = None, schema_id: Any = None, lineage: str = ""
) -> DataFrame:
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


def why_left_out(table: str, routed: bool, offsets: dict[int, int]) -> Column:
    """Why a dead letter (:func:`.dead_letters.records`) is not re-driven into ``table`` (a
    key of :data:`LEFT_OUT`), or null: another table sent it, or it does not say which table
    did and the topic has several (``routed``); or its record is at or above the table's
    ``offsets`` (any offset of a partition they lack), which the job lands itself."""
    named = F.col(TABLE)
    start = F.lit(0)
    if offsets:
        known = F.create_map(*[F.lit(x) for p, o in sorted(offsets.items()) for x in (p, o)])
        start = F.coalesce(known[F.col("partition")], F.lit(0))
    return (
        F.when(named.isNotNull() & (named != F.lit(table)), F.lit("otherTable"))
        .when(named.isNull() & F.lit(routed), F.lit("unknownTable"))
        .when(F.col("offset") >= start, F.lit("uncommitted"))
    )


def _landable(letters: DataFrame) -> DataFrame:
    """The dead letters not left out (:data:`REASON`), each record once, as the Kafka records
    they were."""
    return (
        letters.filter(F.col(REASON).isNull())
        .dropDuplicates(["partition", "offset"])
        .drop(REASON, TABLE, "_dead_letter_error")
    )


def _left_out(letters: DataFrame) -> dict[str, Any]:
    """The outcome's ``leftOut`` of the dead letters: how many of each reason, and what to do
    instead; nothing when none is left out."""
    counts = {
        r[0]: int(r[1])
        for r in letters.filter(F.col(REASON).isNotNull()).groupBy(REASON).count().collect()
    }
    if not counts:
        return {}
    return {
        "leftOut": {
            reason: {"count": count, "why": LEFT_OUT[reason]}
            for reason, count in sorted(counts.items())
        }
    }


def chunks(selected: DataFrame, size: int) -> list[tuple[int, int, int, int]]:
    """The selected rows in chunks of at most ``size`` rows of one partition, in offset order:
    ``(partition, first offset, last offset, rows)``."""
    order = Window.partitionBy("p").orderBy("o")
    numbered = selected.select(
        F.col("kafka.partition").alias("p"), F.col("kafka.offset").alias("o")
    ).withColumn("chunk", F.floor((F.row_number().over(order) - 1) / size))
    found = (
        numbered.groupBy("p", "chunk")
        .agg(F.min("o").alias("lo"), F.max("o").alias("hi"), F.count(F.lit(1)).alias("n"))
        .orderBy("p", "chunk")
        .collect()
    )
    return [(int(r["p"]), int(r["lo"]), int(r["hi"]), int(r["n"])) for r in found]


def as_records(rows: DataFrame) -> DataFrame:
    """Table rows read back as the Kafka source rows they were decoded from."""
    return rows.select(
        F.col("key"),
        F.col("value_raw").alias("value"),
        F.col("kafka.topic").alias("topic"),
        F.col("kafka.partition").alias("partition"),
        F.col("kafka.offset").alias("offset"),
        F.col("kafka.timestamp").alias("timestamp"),
        F.col("kafka.timestamp_type").alias("timestampType"),
        F.col("kafka.headers").alias("headers"),
    )


def _stayed(still: DataFrame) -> dict[str, dict[str, Any]]:
    """The rows that still do not decode, by reason: how many, and a few of their errors."""
    reasons = (
        still.groupBy(raw_reason(F.col("value_error")).alias("reason"))
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.slice(F.collect_set("value_error"), 1, EXAMPLES).alias("errors"),
        )
        .collect()
    )
    return {
        r["reason"]: {"count": int(r["count"]), "errors": [e[:300] for e in r["errors"]]}
        for r in reasons
    }


def _add(total: dict[str, dict[str, Any]], more: dict[str, dict[str, Any]]) -> None:
    for reason, found in more.items():
        entry = total.setdefault(reason, {"count": 0, "errors": []})
        entry["count"] += found["count"]
        entry["errors"] = (
            entry["errors"] + [e for e in found["errors"] if e not in entry["errors"]]
        )[:EXAMPLES]


class Repair:
    """One repair run (:func:`run`)."""

    def __init__(
        self,
        spark: SparkSession,
        config: JobConfig,
        request: OperationRequest,
        writer: TableWriter,
        top_table: str | None = None,
    ) -> None:
        assert request.repair is not None
        self.spark, self.config, self.request, self.spec = spark, config, request, request.repair
        self.writer = writer
        self.table_ref = writer.branch_name  # main, or the branch the job lands in
        self.keyed = config.key.decoded
        self.has_value = config.value.format != "raw"
        # Each of a routed topic's tables sends its own dead letters
        self.routed = bool(config.routes) or (
            top_table is not None and top_table != config.table.identifier
        )

    def _plan(self, records: DataFrame) -> tuple[list[int], list[int]]:
        """Plans the records' writer schemas, evolving the table for them (unless a dry run):
        what reads the table is made after this."""
        table = self.writer.catalog.load_table(self.config.table.identifier)
        return self.writer.plan_for(records, table)

    def _decode_records(self, records: DataFrame, ids: tuple[list[int], list[int]]) -> DataFrame:
        """Kafka records decoded into the table's rows (as it is after :meth:`_plan`)."""
        table = self.writer.catalog.load_table(self.config.table.identifier)
        return self.writer._decode(records, table, *ids)

    def _merge(self, fixed: DataFrame, partition: int, lo: int, hi: int, count: int) -> None:
        """Replaces the chunk's raw rows by ``fixed`` in one commit."""
        from .upsert import with_commit_properties

        view = f"floe_repair_{self.request.uid.replace('-', '')[:12]}_{partition}_{lo}"
        fixed.createOrReplaceTempView(view)
        columns = (
            (["value"] if self.has_value else [])
            + ["value_raw", "value_error"]
            + ([KEY_FIELDS] if self.keyed else [])
        )
        still_raw = "t.value_raw IS NOT NULL" + (" AND t.value IS NULL" if self.has_value else "")
        statement = (
            f"MERGE INTO {self.table_ref} t USING {view} s "
            "ON t.kafka.partition = s.kafka.partition AND t.kafka.offset = s.kafka.offset "
            "AND t.kafka.topic = s.kafka.topic "
            # Only rows still raw, in the chunk's range: Iceberg checks the commit against the
            # files added meanwhile by these (the job's appends are above every raw row).
            f"AND t.kafka.partition = {partition} AND t.kafka.offset >= {lo} "
            f"AND t.kafka.offset <= {hi} AND {still_raw} "
            "WHEN MATCHED THEN UPDATE SET " + ", ".join(f"t.{c} = s.{c}" for c in columns)
        )
        with_commit_properties(
            self.spark,
            {OPERATION: self.request.uid, OPERATION_ROWS: str(count)},
            lambda: self.spark.sql(statement),
        )
        self.spark.catalog.dropTempView(view)

    def _chunk(
        self, partition: int, lo: int, hi: int
    ) -> tuple[int, dict[str, Any], dict[str, int]]:
        """Decodes one chunk again and (unless a dry run) replaces the rows that now decode;
        returns how many did, why the others did not, and (a dry run, which does not evolve
        the table) the table's changes that would let more decode, with their rows."""

        def rows() -> DataFrame:
            return selection(self.spark.table(self.table_ref), self.spec).filter(
                (F.col("kafka.partition") == partition)
                & (F.col("kafka.offset") >= lo)
                & (F.col("kafka.offset") <= hi)
            )

        ids = self._plan(as_records(rows()))  # the table may evolve: read it again after
        decoded = self._decode_records(as_records(rows()), ids).persist()
        try:
            failed = undecodable(decoded)
            waits = F.col("value_error").startswith(WOULD_EVOLVE)
            fixed = decoded.filter(~failed)
            count = fixed.count()
            stayed = _stayed(decoded.filter(failed & ~waits))  # before the merge changes them
            evolving = {
                r[0][len(WOULD_EVOLVE) :]: int(r[1])
                for r in decoded.filter(failed & waits).groupBy("value_error").count().collect()
            }
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

    def _sorted(self, letters: DataFrame, table: Any) -> DataFrame:
        """``letters`` with why each is left out (:data:`REASON`), against the table's
        offsets as ``table`` was loaded."""
        committed = last_commit(
            table, self.config.writer, self.config.kafka.topic, ref=self.config.table.ref
        )
        return letters.withColumn(
            REASON, why_left_out(self.config.table.identifier, self.routed, committed.offsets)
        )

    def _redrive(self) -> dict[str, Any]:
        """The dead-letter topic's records of this table that the table has no row for (its
        raw rows deleted, or lost to a roll back) and that now decode, appended in one commit
        that holds only if ``main`` is still where they were checked against it (else read and
        checked again).  Those it must not land are left out (:func:`why_left_out`): the
        table is evolved only for the others."""
        from .dead_letters import records
        from .kafka_offsets import topic_partitions

        assert self.config.dead_letter is not None
        dead = self.config.model_copy(
            update={
                "kafka": self.config.kafka.model_copy(
                    update={"topic": self.config.dead_letter.topic}
                )
            }
        )
        if not topic_partitions(dead):  # none was ever sent, or it was deleted
            return {"read": 0, "missing": 0, "landed": 0, "stayUndecodable": 0}
        letters = _within(records(self.spark, self.config), self.spec)
        table = self.writer.catalog.load_table(self.config.table.identifier)
        ids = self._plan(_landable(self._sorted(letters, table)))
        read = letters.count()
        outcome, _ = commit_with_retries(
            lambda: self._redrive_once(letters, ids), attempts=ATTEMPTS
        )
        return {"read": read, **outcome}

    def _redrive_once(self, letters: DataFrame, ids: tuple[list[int], list[int]]) -> dict[str, Any]:
        """One try of :meth:`_redrive`, against ``main`` as it is now (CommitConflict when it
        moves before the commit): its offsets say which dead letters are left out."""
        table = self.writer.catalog.load_table(self.config.table.identifier)
        base = head(table, self.config.table.ref).snapshot_id
        sorted_letters = self._sorted(letters, table)
        left = _left_out(sorted_letters)
        landable = _landable(sorted_letters)
        held = (
            self.spark.read.option("versionAsOf", str(base))
            .table(self.table_ref)
            .select(F.col("kafka.partition").alias("_p"), F.col("kafka.offset").alias("_o"))
        )
        missing = landable.join(
            held,
            (landable["partition"] == held["_p"]) & (landable["offset"] == held["_o"]),
            "left_anti",
        )
        decoded = self._decode_records(missing, ids).persist()
        try:
            failed = undecodable(decoded)
            fixed = decoded.filter(~failed)
            landing = fixed.count()
            # (a dry run does not evolve the table: those that wait for it would land)
            waits = F.col("value_error").startswith(WOULD_EVOLVE)
            outcome = {
                "missing": decoded.count(),
                "landed": 0,
                "stayUndecodable": decoded.filter(failed & ~waits).count(),
                **left,
            }
            if self.spec.dry_run:
                return {**outcome, "wouldLand": landing + decoded.filter(failed & waits).count()}
            if landing:
                self.writer.committer.append(
                    fixed,
                    base,
                    lambda _: {
                        OPERATION: self.request.uid,
                        OPERATION_ROWS: str(landing),
                        DEAD_LETTERS: str(landing),
                    },
                    tag=False,
                )
            return {**outcome, "landed": landing}
        finally:
            decoded.unpersist()

    def run(self) -> dict[str, Any]:
        spec = self.spec
        selected = selection(self.spark.table(self.table_ref), spec)
        planned = chunks(selected, spec.rows_per_commit)
        total = sum(n for *_, n in planned)
        log.info(
            "repair %s of %s: %d raw row(s) selected, in %d chunk(s)%s",
            self.request.name,
            self.table_ref,
            total,
            len(planned),
            " (dry run)" if spec.dry_run else "",
        )
        decoded = 0
        stayed: dict[str, dict[str, Any]] = {}
        evolving: dict[str, int] = {}
        for partition, lo, hi, n in planned:
            (count, still, evolves), _ = commit_with_retries(
                partial(self._chunk, partition, lo, hi), attempts=ATTEMPTS
            )
            decoded += count + sum(evolves.values())
            _add(stayed, still)
            for change, rows in evolves.items():
                evolving[change] = evolving.get(change, 0) + rows
            log.info(
                "repair %s: partition %d offsets %d..%d: %d of %d row(s) decoded%s",
                self.request.name,
                partition,
                lo,
                hi,
                count,
                n,
                " (dry run)" if spec.dry_run else "",
            )
        stayed_count = sum(s["count"] for s in stayed.values())
        redriven = (
            {"deadLetters": self._redrive()}
            if self.config.dead_letter is not None and spec.dead_letters
            else {}
        )
        if spec.dry_run:
            return {
                "selected": total,
                "wouldRepair": decoded,
                "stayRaw": stayed_count,
                "stayRawByReason": stayed,
                **redriven,
                **({"wouldEvolve": sorted(evolving)[:EXAMPLES]} if evolving else {}),
            }
        made = operation_snapshots(
            self.writer.catalog.load_table(self.config.table.identifier),
            self.request.uid,
            self.config.table.ref,
        )
        commits, rows = len(made), summed(made, OPERATION_ROWS)
        landed = summed(made, DEAD_LETTERS)
        if redriven:
            redriven["deadLetters"]["landed"] = landed  # in every attempt
        return {
            "selected": total,
            "repaired": rows - landed,
            "commits": commits,
            "stayRaw": stayed_count,
            "stayRawByReason": stayed,
            **redriven,
        }


def run(
    spark: SparkSession,
    config: JobConfig,
    request: OperationRequest,
    writer: TableWriter,
    top_table: str | None = None,
) -> dict[str, Any]:
    """Runs the repair on ``config``'s table (the destination the request names, which
    :meth:`~.contract.RepairSpec.refused` lets through) and records its outcome on the table;
    returns the outcome."""
    assert request.repair is not None
    outcome = {
        "type": "Repair",
        "dryRun": request.repair.dry_run,
        **Repair(spark, config, request, writer, top_table).run(),
    }
    table = writer.catalog.load_table(config.table.identifier)
    record_operation(table, request.uid, outcome)
    return outcome
