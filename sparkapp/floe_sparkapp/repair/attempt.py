"""One repair run (:class:`Repair`): the selected rows decoded again chunk by chunk, each
chunk's rows that now decode merged in place of their raw rows, the dead letters re-driven,
and the outcome recorded on the table (:func:`run`)."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..batch_decoder import WOULD_EVOLVE
from ..batch_write import undecodable
from ..commit import CommitConflict, commit_with_retries, is_conflict
from ..config import JobConfig
from ..contract import OperationRequest
from ..decode import raw_reason
from ..layout import KEY_FIELDS
from ..ledger import (
    OPERATION,
    OPERATION_ROWS,
    head,
    last_commit,
    operation_snapshots,
    record_operation,
    summed,
)
from ..table_writer import TableWriter
from .redrive import DEAD_LETTERS, REASON, landable_records, left_out, why_left_out
from .selection import as_records, chunks, selection, within

log = logging.getLogger("floe.operation")

ATTEMPTS = 8  # a chunk whose commit conflicts (the job committed, a compaction) is tried this often
EXAMPLES = 5  # still-raw rows' errors kept in the outcome, per reason


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
        from ..upsert import with_commit_properties

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
        from ..dead_letters import records
        from ..kafka_offsets import topic_partitions

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
        letters = within(records(self.spark, self.config), self.spec)
        table = self.writer.catalog.load_table(self.config.table.identifier)
        ids = self._plan(landable_records(self._sorted(letters, table)))
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
        left = left_out(sorted_letters)
        landable = landable_records(sorted_letters)
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
