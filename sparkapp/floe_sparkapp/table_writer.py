"""One micro-batch into one table, exactly once (:mod:`.commit`'s protocol): its commit path.

The batch's records above the table's committed offsets (where it starts, checked against the
table: :mod:`.batch_start`) are decoded with a plan per writer schema id (the table evolved for
it when additive: :mod:`.batch_decoder`), then appended, or for ``upsert`` and ``cdc`` merged
on a branch (:mod:`.batch_write`), in a snapshot that carries the table's own offsets; ``main``
moves there in one compare-and-set.  A topic routed to several tables has one of these per
table (:class:`~floe_sparkapp.batch_writer.BatchWriter`), each with its own offsets.

An append reads the batch once: it is decoded for the writer schema ids of the recent batches
(at first, the subject's versions that fit the table), and what the snapshot's summary needs
is counted while its files are written (the writer schema ids found) or read off the files
written (the newest timestamp per partition, when each file holds one partition).  A batch
with a schema id it was not decoded for is decoded again before anything is committed.  A
small batch spread over many Kafka partitions is written by one task a core
(:func:`.batch_write.write_tasks`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import catalog as catalogs
from . import checkpoint, metrics
from .batch_decoder import BatchDecoder, UnplannedSchemas
from .batch_start import check_identity, checkpoint_ahead, start_floor
from .batch_write import DeadLetters, ingest_micros, single_pass_counts, write, write_tasks
from .commit import BranchCommitter, Staged, commit_with_retries, expiry_due
from .config import JobConfig
from .contract import ROW_LEVEL
from .decode import INGESTED, WriterPlan
from .jvm_udf import ingest_time
from .kafka_offsets import check_topic_identity
from .layout import KEY_FIELDS, files_bound_one_partition
from .ledger import (
    MAIN,
    Committed,
    head,
    last_commit,
    merge_offsets,
    summary_properties,
)
from .registry import Registry
from .steps import step
from .upsert import Upsert

log = logging.getLogger("floe.job")


REDECODES = 3  # times a batch is decoded again for schema ids it was not decoded for


def _committed_at(table: Any, committed: Committed) -> int:
    """When the writer last committed to ``table`` (ms); before any commit, when the table
    was made (its oldest metadata that is known)."""
    found = table.snapshot_by_id(committed.snapshot_id) if committed.snapshot_id else None
    if found is not None:
        committed_ms: int = found.timestamp_ms
        return committed_ms
    history = table.metadata.metadata_log
    made_ms: int = min([entry.timestamp_ms for entry in history] + [table.metadata.last_updated_ms])
    return made_ms


@dataclass(frozen=True)
class Outcome:
    """What committing one micro-batch to one table did."""

    offsets: dict[int, int] | None = None  # the table's offsets after it; None: it had them
    written: int = 0  # rows written (a merge: records applied)
    raw: dict[str, int] = field(default_factory=dict)  # of them, kept raw, by reason
    dead_letters: int = 0  # records sent to the dead-letter topic
    dead_letter_failures: int = 0  # undecodable records the dead-letter topic refused
    schema_ids: tuple[int, ...] = ()  # the values' writer schema ids the batch had
    input_rows: int = 0  # an append read in one pass: the records it read
    bytes: int = 0  # and their keys' and values' bytes
    vtts: int | None = None  # the batch's valid-through timestamp (ms)
    write_seconds: float = 0.0
    commit_seconds: float = 0.0
    conflicts: int = 0  # commits tried again
    expired: int = 0  # snapshots expired after it
    expire_seconds: float = 0.0

    @property
    def errors(self) -> int:
        """Records kept raw, undecodable."""
        return sum(self.raw.values())


@dataclass
class TableWriter:
    """Decodes a micro-batch's records for one table and commits them there exactly once."""

    config: JobConfig
    spark: SparkSession
    registry: Registry | None
    committer: BranchCommitter = field(init=False)
    upsert: Upsert | None = field(init=False, default=None)  # mode upsert: how rows change
    table_uuid: str | None = None  # the table the job started on: another one is a replacement
    # Where a partition must start when the table has no offsets for it (Kafka's earliest, or
    # where the job first started): given the partitions, by the job
    floor: Callable[[list[int]], dict[int, int]] | None = None
    alone: bool = True  # the topic's only table (not one of several routes)
    topic_id: str | None = None  # the Kafka cluster and topic ids, recorded with the offsets
    tables: tuple[str, ...] = ()  # a routed topic's tables, recorded with the offsets
    routing: str | None = None  # and the digest of its routing (:mod:`.partial_batch`)
    # A route's table that joins the topic again (its route removed, then added back): where
    # the other tables are, which it goes on from instead of its own older offsets, until it
    # has committed once
    rejoins_at: dict[int, int] | None = None
    # False: decode without evolving the table (a repair's dry run); a writer schema that
    # would evolve it leaves its records undecoded, with WOULD_EVOLVE and the changes
    evolve: bool = True
    loaded: Any = None  # the table as the last attempt loaded it (PyIceberg)
    decoder: BatchDecoder = field(init=False)  # its plans, and the writer schema ids seen

    def __post_init__(self) -> None:
        self.committer = BranchCommitter(
            self.spark,
            self.config.table.catalog.name,
            self.config.table.identifier,
            self.config.writer,
            self.config.table.ref,
        )
        self.catalog = catalogs.load_catalog(self.config.catalog())
        mode = self.config.table.mode
        self.upsert = (
            Upsert(
                self.config.table.key_columns,
                has_value=self.config.value.format != "raw",
                cdc=mode == "cdc",
                key_fields=self.config.key.decoded,
                ops=self.config.table.op is not None,
            )
            if mode in ROW_LEVEL
            else None
        )
        self.decoder = BatchDecoder(
            self.config, self.registry, self.committer, self.table_name, self.evolve
        )

    @property
    def table_name(self) -> str:
        return f"{self.config.table.catalog.name}.{self.config.table.identifier}"

    @property
    def branch_name(self) -> str:
        """The table's branch the job lands in, as Spark reads and merges into it: the table
        itself for ``main``."""
        ref = self.config.table.ref
        return self.table_name if ref == MAIN else f"{self.table_name}.`branch_{ref}`"

    def plan_for(self, records: DataFrame, table: Any) -> tuple[list[int], list[int]]:
        """An operation's records planned (:meth:`.batch_decoder.BatchDecoder.plan_for`)."""
        return self.decoder.plan_for(records, table)

    def plan_ids(self, table: Any, ids: list[int], keys: list[int]) -> None:
        """Writer schema ids planned (:meth:`.batch_decoder.BatchDecoder.plan_ids`)."""
        self.decoder.plan_ids(table, ids, keys)

    def _plans(self, table: Any, schema_ids: Sequence[int], column: str) -> dict[int, WriterPlan]:
        return self.decoder.writer_plans(table, schema_ids, column)

    def _decode(
        self, fresh: DataFrame, table: Any, schema_ids: Sequence[int], key_ids: Sequence[int] = ()
    ) -> DataFrame:
        """Table rows from Kafka rows (:meth:`.batch_decoder.BatchDecoder.decode`)."""
        return self.decoder.decode(fresh, table, schema_ids, key_ids)

    def commit_batch(
        self,
        batch: DataFrame,
        batch_id: int,
        start: dict[int, int] | None,
        batch_next: dict[int, int],
        vtts: int | None = None,
        schema_ids: Sequence[int] = (),
        key_ids: Sequence[int] = (),
        *,
        single_pass: bool = False,
    ) -> Outcome:
        """Commits the batch's records (those at or above the table's offsets) with the batch's
        end offsets, retrying on conflicts; returns what it did.  ``vtts`` (the valid-through
        timestamp), ``schema_ids`` and ``key_ids`` are what a pass over the batch found;
        with ``single_pass`` (an append) there was none, and they are found as it writes."""
        assert not single_pass or self.upsert is None
        for column, ids in (("value", schema_ids), (KEY_FIELDS, key_ids)):
            self.decoder.recent[column].update(dict.fromkeys(ids, batch_id))
        dead = DeadLetters()
        for redecode in range(REDECODES + 1):
            try:
                outcome, conflicts = commit_with_retries(
                    lambda: self._attempt(
                        batch,
                        batch_id,
                        start,
                        batch_next,
                        vtts,
                        schema_ids,
                        key_ids,
                        single_pass,
                        dead,
                    )
                )
                break
            except UnplannedSchemas as unplanned:
                if redecode == REDECODES:
                    raise
                log.info("%s: decoding it again", unplanned)
        outcome = replace(
            outcome, conflicts=conflicts, dead_letters=dead.count, dead_letter_failures=dead.failed
        )
        if outcome.offsets is not None:
            self.rejoins_at = None
            if self.config.maintenance.expire_snapshots.enabled:
                metrics.doing("expiring")
                with step("expire"):
                    outcome = replace(outcome, **self._expire())
        return outcome

    def _attempt(
        self,
        batch: DataFrame,
        batch_id: int,
        start: dict[int, int] | None,
        batch_next: dict[int, int],
        vtts: int | None,
        schema_ids: Sequence[int],
        key_ids: Sequence[int],
        single_pass: bool,
        dead: DeadLetters,
    ) -> Outcome:
        """One try at committing the batch, from what the table holds now (a conflict raises
        and the batch is tried again)."""
        identifier, writer, topic = (
            self.config.table.identifier,
            self.config.writer,
            self.config.kafka.topic,
        )
        value_framed = self.config.value.format != "raw"
        key_framed = self.config.key.framed
        metrics.doing("loading_table")
        self.decoder.java_table = None
        with step("load_table"):
            table = self.loaded = self.catalog.load_table(identifier)
        self.table_uuid = check_identity(table, self.table_uuid, identifier, batch_id)
        ref = self.config.table.ref
        base = head(table, ref).snapshot_id  # offsets below are read from here
        with step("ledger"):
            committed = last_commit(table, writer, topic, ref=ref)
            check_topic_identity(self.config, committed, self.topic_id)
            if self.rejoins_at:
                committed = replace(
                    committed, offsets=merge_offsets(committed.offsets, self.rejoins_at)
                )
            ahead = checkpoint.ahead_of(
                start or {},
                committed.offsets,
                start_floor(table, start or {}, committed, self.config, self.floor, self.alone),
            )
        if ahead:
            raise checkpoint_ahead(batch_id, writer, identifier, ref, ahead)
        offsets = merge_offsets(committed.offsets, batch_next)
        if offsets == committed.offsets:
            log.info(
                "batch %d of %s: already committed in snapshot %s of %s",
                batch_id,
                writer,
                committed.snapshot_id,
                identifier,
            )
            return Outcome()
        rows, counted = batch, None
        with step("expected_ids"):
            value_ids, keys = (
                (
                    self.decoder.expected_ids(table, "value", batch_id) if value_framed else [],
                    self.decoder.expected_ids(table, KEY_FIELDS, batch_id) if key_framed else [],
                )
                if single_pass
                else (list(schema_ids), list(key_ids))
            )
        with step("pass_plan"):
            above = {
                p: max((start or {}).get(p, 0), committed.offsets.get(p, 0)) for p in batch_next
            }
            partitions = sorted(p for p, o in batch_next.items() if o > above[p])
            tasks = (
                write_tasks(
                    partitions, batch_next, above, self.spark.sparkContext.defaultParallelism
                )
                if single_pass
                else None
            )
            if single_pass:  # what the summary needs, counted as the files are written
                rows, counted = single_pass_counts(
                    rows,
                    value_ids,
                    keys,
                    value_framed,
                    key_framed,
                    newest=tasks is not None or not files_bound_one_partition(table),
                )
            known = (
                F.create_map(*[F.lit(x) for p, o in committed.offsets.items() for x in (p, o)])
                if committed.offsets
                else None
            )
            fresh = (
                rows
                if known is None
                else rows.filter(F.col("offset") >= F.coalesce(known[F.col("partition")], F.lit(0)))
            )
            fresh = fresh.withColumn(INGESTED, ingest_time(ingest_micros(committed)))

        def summary(staged: Staged | None = None) -> dict[str, str]:
            with step("summary"):
                return _summary(staged)

        def _summary(staged: Staged | None) -> dict[str, str]:
            found_vtts = vtts
            if counted is not None:
                self.decoder.check(counted.ids(batch), batch_id)
                found_vtts = counted.vtts(batch, partitions, staged)
            newest = [t for t in (found_vtts, committed.vtts) if t is not None]
            return summary_properties(
                writer,
                topic,
                offsets,
                max(newest) if newest else None,
                self.config.generation,
                batch_id,
                self.topic_id,
                self.tables,
                self.routing,
                {p: above[p] for p in batch_next} if self.tables else None,
            )

        with step("decode_plan"):
            decoded = self._decode(fresh, table, value_ids, keys)
        written, raw, timing = write(
            decoded,
            base,
            summary,
            dead,
            _committed_at(table, committed),
            tasks,
            config=self.config,
            committer=self.committer,
            upsert=self.upsert,
            java_table=self.decoder.java_table,
        )
        seen: dict[str, Any] = counted.read() if counted is not None else {"vtts": vtts}
        return Outcome(
            offsets=offsets,
            written=written,
            raw=raw,
            input_rows=seen.get("input_rows", 0),
            bytes=seen.get("bytes", 0),
            vtts=seen["vtts"],
            schema_ids=seen.get("value_ids", tuple(schema_ids)),
            **timing,
        )

    def _expire(self) -> dict[str, Any]:
        """Expires the snapshots past the retention (``expireSnapshots``) after a commit; a
        failure only delays it to a later batch (or the maintenance CronJob). Looked at first
        in the table as the batch loaded it: while none can be due, nothing more is loaded.
        Returns the snapshots expired and the seconds it took (:class:`Outcome`'s fields)."""
        started = time.monotonic()
        older_than_ms = int((time.time() - self.config.snapshot_max_age_seconds) * 1000)
        retain_last = self.config.maintenance.expire_snapshots.retain_last
        expired = 0
        if self.loaded is not None:  # as the batch found it, with its commit (an upsert's two)
            found = self.loaded.metadata.snapshots
            if not expiry_due(
                len(found) + 2,
                min((s.timestamp_ms for s in found), default=None),
                older_than_ms,
                retain_last,
            ):
                return {"expired": 0, "expire_seconds": time.monotonic() - started}
        try:
            expired = self.committer.expire_snapshots(older_than_ms, retain_last)
        except Exception as error:  # noqa: BLE001 - the commit stands; expiry comes again
            log.warning(
                "could not expire the snapshots of %s: %s",
                self.table_name,
                str(error).splitlines()[0][:500],
            )
        return {"expired": expired, "expire_seconds": time.monotonic() - started}
