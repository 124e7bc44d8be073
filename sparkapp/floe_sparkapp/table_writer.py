"""One micro-batch into one table, exactly once (:mod:`.commit`'s protocol).

The batch's records above the table's committed offsets are decoded with a plan per writer
schema id (the table evolved for it when additive), then appended, or for ``upsert`` and
``cdc`` merged on a branch, in a snapshot that carries the table's own offsets; ``main`` moves
there in one compare-and-set.  A topic routed to several tables has one of these per table
(:class:`~floe_sparkapp.batch_writer.BatchWriter`), each with its own offsets.

An append reads the batch once: it is decoded for the writer schema ids of the recent batches
(at first, the subject's versions that fit the table), and what the snapshot's summary needs
is counted while its files are written (the writer schema ids found) or read off the files
written (the newest timestamp per partition, when each file holds one partition).  A batch
with a schema id it was not decoded for is decoded again before anything is committed.  A
small batch spread over many Kafka partitions is written by one task a core
(:func:`write_tasks`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from . import catalog as catalogs
from . import cdc, checkpoint, dead_letters, metrics, schemaless, schemas
from .avro_types import SchemaMappingError
from .checkpoint import CheckpointAhead
from .commit import BranchCommitter, Staged, commit_with_retries, expiry_due
from .config import JobConfig
from .contract import RAW_REASONS, ROW_LEVEL
from .decode import (
    INGESTED,
    NO_COLUMNS_YET,
    WriterPlan,
    decode_framed,
    decode_framed_key,
    decode_json,
    decode_json_key,
    decode_raw,
    frame,
    framed_ids,
    raw_reason,
    table_rows,
)
from .decode import KEY_FIELDS as DECODED_KEY
from .evolution import (
    BreakingChange,
    WouldEvolve,
    evolve_for_writer,
    fit_without_evolution,
    look_for_writer,
    plan_evolution,
    value_struct,
)
from .jvm_udf import ingest_time, newest_by_partition, parse_newest
from .kafka_offsets import check_topic_identity
from .layout import KEY_FIELDS, files_bound_one_partition
from .ledger import (
    DEAD_LETTER_ERROR,
    MAIN,
    Committed,
    head,
    last_commit,
    merge_offsets,
    summary_properties,
    tagged_commit,
)
from .registry import Registry
from .schemas import FORMATS
from .steps import step
from .upsert import OP_COLUMN, Upsert, operation_rows

log = logging.getLogger("floe.job")


# The error of a record a look that changes nothing (``evolve=False``) did not decode because
# the table would first have to evolve for its writer schema.
WOULD_EVOLVE = "the table would evolve for it: "
RECENT_BATCHES = 100  # an append is decoded for the schema ids of this many batches before it
REDECODES = 3  # times a batch is decoded again for schema ids it was not decoded for
# Below this many records a Kafka partition on average, a batch spread over more partitions
# than the executors have cores is written by one task a core (:func:`write_tasks`).
SMALL_BATCH_RECORDS = 20_000


class UnplannedSchemas(RuntimeError):
    """The batch has writer schema ids it was not decoded for: it is decoded again."""


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


def _newest_by_partition(batch: DataFrame, partitions: list[int]) -> dict[int, int]:
    """Per Kafka partition among ``partitions``, the newest record timestamp (ms) in the
    batch (a pass over it)."""
    return {
        int(r[0]): int(r[1])
        for r in batch.filter(F.col("partition").isin(*partitions))
        .groupBy("partition")
        .agg(F.max(F.unix_millis(F.col("timestamp"))))
        .collect()
    }


def record_bytes() -> Any:
    """The aggregate of a batch's bytes: its records' keys and values, as Kafka holds them."""
    return F.sum(F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0)))


def write_tasks(
    partitions: list[int], batch_next: dict[int, int], above: dict[int, int], cores: int
) -> int | None:
    """How many tasks write an append of the records below ``batch_next`` and at or above
    ``above`` in ``partitions``: None (one a Kafka partition, as Spark's Kafka source reads
    them) unless more partitions than the executors' ``cores`` have records and they have
    fewer than :data:`SMALL_BATCH_RECORDS` each on average; then ``cores``.  A task has a fixed
    cost before its first record (its Kafka fetch, its Parquet writer opened and closed), paid
    then once a core instead of once a partition, and the commit adds fewer, larger files."""
    if len(partitions) <= cores:
        return None
    records = sum(batch_next[p] - above.get(p, 0) for p in partitions)
    return cores if records < SMALL_BATCH_RECORDS * len(partitions) else None


def _raw_by_reason(bad: DataFrame) -> dict[str, int]:
    """Rows kept raw, counted by reason (:func:`.decode.raw_reason`)."""
    return {
        r["reason"]: int(r["count"])
        for r in bad.groupBy(raw_reason(F.col("value_error")).alias("reason")).count().collect()
    }


clock = time.time_ns  # the driver's clock (nanoseconds since the epoch)


def ingest_micros(committed: Committed) -> int:
    """The landing time of a batch going on top of ``committed`` (the lineage's
    ingest_timestamp, in microseconds): now, but never at or before that commit's own time,
    so each partition's landing times only grow, even when the job moves to a node whose
    clock is behind."""
    now = clock() // 1000
    if committed.timestamp_ms is None:
        return now
    return max(now, (committed.timestamp_ms + 1) * 1000)


def undecodable(rows: DataFrame) -> Any:
    """Rows whose value could not be decoded (not those decoded but for recursive fields)."""
    failed = F.col("value_error").isNotNull()
    return failed & F.col("value").isNull() if "value" in rows.columns else failed


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
class _DeadLetters:
    """A batch's undecodable records are sent to the dead-letter topic once, however often
    its commit is tried: what the first try did."""

    sent: bool = False
    count: int = 0
    error: str | None = None  # why the topic refused them (recorded on the commit)
    failed: int = 0  # how many it refused


@dataclass
class _Pass:
    """What an append counts over its batch as it writes it, read from the JVM once: rows,
    bytes, and of each framed column (``value_ids``, ``key_ids``: its framing column and the
    ids it was decoded for) the writer schema ids found.  Each id decoded for is a flag; any
    other is caught by the least and greatest of the others, and when more may lie between
    those two (``between``) the batch is read again for them.  Each is an aggregate Spark
    updates per row without objects (a set of ids or a maximum per Kafka partition costs about
    a third of the batch's work); the newest timestamp per partition is read off the written
    files' bounds instead (:meth:`.commit.Staged.newest_by_partition`), except with ``newest``:
    a batch whose files may each hold several partitions or keep no bounds
    (:func:`write_tasks`, :func:`.layout.files_bound_one_partition`) counts it as it is read:
    reading the batch again would count its records twice in the query's progress."""

    observation: Any
    expected: dict[str, tuple[str, list[int]]]
    newest: bool = False
    found: dict[str, Any] | None = None
    between: list[str] = field(default_factory=list)

    def metrics(self) -> list[Any]:
        found = [F.count(F.lit(1)).alias("rows"), record_bytes().alias("bytes")]
        for name, (column, planned) in self.expected.items():
            ids = F.col(column)
            found += [F.bool_or(ids == F.lit(i)).alias(f"{name}_{i}") for i in planned]
            other = F.when(~ids.isin(*planned), ids) if planned else ids
            found += [F.min(other).alias(f"{name}_low"), F.max(other).alias(f"{name}_high")]
        if self.newest:
            found.append(
                newest_by_partition(F.col("partition"), F.unix_millis(F.col("timestamp"))).alias(
                    "newest"
                )
            )
        return found

    def read(self) -> dict[str, Any]:
        if self.found is None:
            seen = self.observation.get
            self.found = {
                "input_rows": int(seen["rows"]),
                "bytes": int(seen["bytes"] or 0),
                "value_ids": (),
                "key_ids": (),
            }
            for name, (_, planned) in self.expected.items():
                low, high = seen.get(f"{name}_low"), seen.get(f"{name}_high")
                others = {int(i) for i in (low, high) if i is not None}
                self.found[name] = tuple(
                    sorted({i for i in planned if seen.get(f"{name}_{i}")} | others)
                )
                if len(others) == 2 and int(high) - int(low) > 1:
                    self.between.append(name)
            if self.newest:
                self.found["newest"] = parse_newest(seen["newest"])
        return self.found


@dataclass
class TableWriter:
    """Decodes a micro-batch's records for one table and commits them there exactly once."""

    config: JobConfig
    spark: SparkSession
    registry: Registry | None
    committer: BranchCommitter = field(init=False)
    upsert: Upsert | None = field(init=False, default=None)  # mode upsert: how rows change
    plans: dict[tuple[str, int], WriterPlan] = field(default_factory=dict)  # by column, id
    planned_for: int | None = None  # the table schema id the plans were made against
    # writer schema ids by column (value, key_fields): the batch they were last seen in
    recent: dict[str, dict[int, int]] = field(default_factory=lambda: {"value": {}, KEY_FIELDS: {}})
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
    # and through Iceberg's Java API, once its rows' decoding evolved it: the write goes there
    java_table: Any = None

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

    @property
    def table_name(self) -> str:
        return f"{self.config.table.catalog.name}.{self.config.table.identifier}"

    @property
    def branch_name(self) -> str:
        """The table's branch the job lands in, as Spark reads and merges into it: the table
        itself for ``main``."""
        ref = self.config.table.ref
        return self.table_name if ref == MAIN else f"{self.table_name}.`branch_{ref}`"

    def _plan(self, schema_id: int, table: Any, column: str = "value") -> WriterPlan:
        """How to decode records of one writer schema id (evolving the table if additive);
        ``column`` is ``key_fields`` for a key's writer schema."""
        if self.registry is None:  # plain JSON without a registry
            return WriterPlan(
                schema_id,
                error=(
                    f"value is framed with writer schema id {schema_id}, and value.schemaRegistry "
                    "is not set: floe reads this topic's values as plain JSON"
                ),
            )
        found = self.registry.by_id(schema_id)
        if found is None:
            return WriterPlan(
                schema_id,
                error=f"unknown schema id {schema_id}: the schema "
                "registry has no schema with this id",
            )
        fmt = self.config.key.format if column == KEY_FIELDS else self.config.value.format
        expected = FORMATS[fmt]
        if found.schema_type.upper() != expected:
            return WriterPlan(
                schema_id, error=f"schema id {schema_id} is {found.schema_type}, not {expected}"
            )
        try:
            mapped, writer = (
                schemas.mapped(found, message=self.config.key.message)
                if column == KEY_FIELDS
                else schemas.mapped(
                    found,
                    self.config.table.mode,
                    self.config.value.message,
                    self.config.value.conversions,
                )
            )
        except SchemaMappingError as error:
            return WriterPlan(schema_id, error=f"schema id {schema_id}: {error}")
        fit = (
            (evolve_for_writer if self.evolve else look_for_writer)
            if (self.config.schema_evolution.mode == "additive")
            else fit_without_evolution
        )
        try:
            plan = fit(table, mapped.struct, column)
        except BreakingChange as change:
            return WriterPlan(schema_id, error=f"schema id {schema_id}: {change}")
        except WouldEvolve as change:
            return WriterPlan(schema_id, error=f"{WOULD_EVOLVE}schema id {schema_id}: {change}")
        if plan.needs_update:
            log.info(
                "schema id %d evolved table %s: %s",
                schema_id,
                self.table_name,
                "; ".join(str(c) for c in plan.changes),
            )
        return WriterPlan(
            schema_id,
            writer=writer,
            recursive_fields=mapped.recursive_fields,
            routes=tuple(sorted(plan.routes.items())),
        )

    def _plans(self, table: Any, schema_ids: Sequence[int], column: str) -> dict[int, WriterPlan]:
        """The plans of ``schema_ids`` (made, and kept, on first sight)."""
        if table.schema().schema_id != self.planned_for:  # e.g. an approval renamed columns
            self.plans.clear()
            self.planned_for = table.schema().schema_id
        plans = {}
        for schema_id in schema_ids:
            plan = self.plans.get((column, schema_id))
            if plan is None:
                plan = self._plan(schema_id, table, column)
                if plan.error is None:  # refused ones are looked at again: an approval may come
                    self.plans[(column, schema_id)] = plan
                table.refresh()
            plans[schema_id] = plan
        return plans

    def plan_for(self, records: DataFrame, table: Any) -> tuple[list[int], list[int]]:
        """The writer schema ids of Kafka ``records``' values and keys (a pass over them), each
        planned, the table evolved for them where additive: a batch read of the table made
        after this sees the table as the decoding projects onto it.  (An operation's records;
        the job's batches find them as they are written.)"""
        framed = self.config.value.format in ("avro", "protobuf")
        ids = framed_ids(records, "value") if framed else []
        keys = framed_ids(records, "key") if self.config.key.framed else []
        self.plan_ids(table, ids, keys)
        return ids, keys

    def plan_ids(self, table: Any, ids: list[int], keys: list[int]) -> None:
        """Plans writer schema ids of values and keys (:meth:`plan_for`)."""
        if ids:
            self._plans(table, ids, "value")
        if keys:
            self._plans(table, keys, KEY_FIELDS)

    def _decode(
        self, fresh: DataFrame, table: Any, schema_ids: Sequence[int], key_ids: Sequence[int] = ()
    ) -> DataFrame:
        """Table rows from Kafka rows; ``schema_ids`` are the writer schema ids of the batch's
        values, ``key_ids`` those of its keys (Avro keys)."""
        fmt = self.config.value.format
        keyed = self.config.key.decoded
        if fmt == "raw" and not keyed:
            return self._rows(decode_raw(fresh), None, has_value=False)
        # Plans first: a writer's new fields evolve the table, and the projection is onto the
        # table as it is then (plans made against an older schema still decode).
        key_plans = (
            self._plans(table, list(key_ids), KEY_FIELDS) if self.config.key.framed else None
        )
        plans = self._plans(table, schema_ids, "value") if fmt != "raw" else {}
        unfit = self._infer(fresh, table) if self.config.value.infer_schema else None
        with step("load_spark_table"):
            self.java_table = self.committer.load()
            columns = self.committer.spark_schema(self.java_table)
        if key_plans is not None:
            framed = fresh if "_key_schema_id" in fresh.columns else frame(fresh, "key")
            fresh = decode_framed_key(framed, key_plans, columns[KEY_FIELDS].dataType)
        elif keyed:
            fresh = decode_json_key(fresh, columns[KEY_FIELDS].dataType)
        if fmt == "raw":
            return self._rows(decode_raw(fresh), None, has_value=False, key_fields=True)
        if "value" not in columns.fieldNames():  # inferSchema: no field seen yet
            return self._rows(decode_raw(fresh, NO_COLUMNS_YET), None, has_value=False)
        value_type = columns["value"].dataType
        changes = self.config.table.mode == "cdc"
        if fmt == "json" and changes:
            parsed = decode_json(fresh, cdc.json_type(value_type))
            return self._changes(parsed.withColumn("_value", cdc.unwrap_json(F.col("_value"))))
        if fmt == "json":
            return self._rows(
                decode_json(fresh, value_type, plans, self.config.value.conversions, unfit),
                value_type,
            )
        if "_schema_id" not in fresh.columns:
            fresh = frame(fresh)  # (a routed batch comes framed, its writers decoded)
        if changes:  # the envelope decoded, its images projected onto the table's rows
            plans = {
                i: replace(plan, routes=cdc.envelope_routes(plan.routes))
                for i, plan in plans.items()
            }
            return self._changes(decode_framed(fresh, plans, cdc.envelope_type(value_type)))
        return self._rows(
            decode_framed(fresh, plans, value_type, self.config.value.conversions), value_type
        )

    def _rows(
        self,
        decoded: DataFrame,
        value_type: Any,
        *,
        has_value: bool = True,
        key_fields: bool | None = None,
    ) -> DataFrame:
        """The table's rows of decoded records; with ``table.op``, each with its operation."""
        keyed = self.config.key.decoded if key_fields is None else key_fields
        op = self.config.table.op
        if op is None:
            return table_rows(decoded, has_value=has_value, key_fields=keyed)
        decoded = operation_rows(
            decoded, op, self.config.table.key_columns, DECODED_KEY if keyed else "key", value_type
        )
        return table_rows(decoded, has_value=has_value, key_fields=keyed, op=OP_COLUMN)

    def _infer(self, fresh: DataFrame, table: Any) -> str | None:
        """``inferSchema``: the table's value evolved for the fields of the batch's plain JSON
        values (:mod:`.schemaless`; not in a look that changes nothing); returns the fields
        whose type their column does not take."""
        values = fresh.filter(
            F.col("value").isNotNull() & (F.substring("value", 1, 1) != F.lit(bytearray(b"\x00")))
        )
        inferred = schemaless.infer(values.select(F.col("value").cast("string")))
        plan = schemaless.evolve_inferred(
            table, inferred, self.config.value.conversions, apply=self.evolve
        )
        if self.evolve and plan.needs_update:
            log.info(
                "inferred fields evolved table %s: %s",
                self.table_name,
                "; ".join(str(c) for c in plan.changes if c.kind in ("add", "widen")),
            )
        return schemaless.conflicts(plan)

    def _changes(self, envelopes: DataFrame) -> DataFrame:
        return table_rows(
            cdc.change_rows(envelopes, self.config.table.key_columns),
            has_value=True,
            cdc=True,
            key_fields=self.config.key.decoded,
        )

    def _write(
        self,
        rows: DataFrame,
        base: int,
        summary: Callable[[Staged | None], dict[str, str]],
        dead: _DeadLetters,
        since_ms: int,
        tasks: int | None = None,
    ) -> tuple[int, dict[str, int], dict[str, Any]]:
        """Commits ``rows`` with the snapshot summary ``summary`` makes (for an append, once
        the files are written, by ``tasks``: it may then raise :class:`UnplannedSchemas`);
        returns the rows written, the undecodable ones among them by reason and the committer's
        timings. The rows are counted in the same pass as the write (an observation), except
        when a dead-letter topic needs the undecodable ones first (once per batch, even when
        the commit is retried: ``dead``; but not those an earlier run of the batch sent since
        ``since_ms``, the writer's last commit: :mod:`.dead_letters`)."""

        def properties(staged: Staged | None = None) -> dict[str, str]:
            found = summary(staged)
            return {**found, DEAD_LETTER_ERROR: dead.error} if dead.error else found

        send = self.config.dead_letter is not None and not dead.sent
        if send:
            rows = rows.persist()
        try:
            if send:
                bad = rows.filter(undecodable(rows))
                errors = bad.count()  # (by reason: the write's own count below)
                if errors:
                    metrics.doing("sending_dead_letters")
                    with step("dead_letters"):
                        failure = dead_letters.send(bad, errors, self.config, since_ms)
                    if failure is None:
                        dead.count = errors
                    else:
                        dead.error, dead.failed = failure, errors
                dead.sent = True
            metrics.doing("writing")
            if self.upsert is not None:
                rows = rows.persist()
                try:
                    raw = _raw_by_reason(rows.filter(undecodable(rows)))
                    timing = self.committer.commit(rows, base, properties(), self.upsert)
                    return int(timing.pop("applied")), raw, timing
                finally:
                    rows.unpersist()
            with step("count_plan"):
                observation = Observation(f"floe_{uuid.uuid4().hex}")
                reason = raw_reason(F.col("value_error"))
                observed = rows.observe(
                    observation,
                    F.count(F.lit(1)).alias("rows"),
                    *[
                        F.coalesce(
                            F.sum(
                                F.when(undecodable(rows) & (reason == F.lit(name)), 1).otherwise(0)
                            ),
                            F.lit(0),
                        ).alias(f"raw_{name}")
                        for name in RAW_REASONS
                    ],
                )
            timing = self.committer.append(
                observed, base, properties, tasks=tasks, rebase=True, table=self.java_table
            )
            with step("count_read"):
                counted = observation.get
            return (
                int(counted["rows"]),
                {
                    name: int(counted[f"raw_{name}"])
                    for name in RAW_REASONS
                    if int(counted[f"raw_{name}"])
                },
                timing,
            )
        finally:
            if send:
                rows.unpersist()

    def _expected_ids(self, table: Any, column: str, batch_id: int) -> list[int]:
        """The writer schema ids an append is decoded for: those of the recent batches; for
        the value, at first, those of the subject's versions (:meth:`_fitting_ids`)."""
        recent = self.recent[column]
        for schema_id, seen in list(recent.items()):
            if seen < batch_id - RECENT_BATCHES:
                del recent[schema_id]
        if (
            not recent
            and column == "value"
            and self.registry is not None
            and self.config.value.format != "raw"
        ):
            try:
                recent.update(dict.fromkeys(self._fitting_ids(table), batch_id))
            except Exception as error:  # noqa: BLE001 - the batch then finds its ids
                log.warning(
                    "could not read the versions of %s: %s",
                    self.registry.config.subject,
                    str(error).splitlines()[0][:300],
                )
        return sorted(recent)

    def _fitting_ids(self, table: Any) -> list[int]:
        """The subject's latest schema id, and those of its versions whose records decode
        into the table as it is: a backlog written with older versions is then read once.
        (A version that would change the table is only planned once its records show up.)"""
        assert self.registry is not None
        current = value_struct(table)
        ids = [self.registry.latest().schema_id]
        for schema_id in self.registry.version_ids():
            found = self.registry.by_id(schema_id)
            if schema_id in ids or found is None or current is None:
                continue
            try:
                mapped, _ = schemas.mapped(
                    found,
                    self.config.table.mode,
                    self.config.value.message,
                    self.config.value.conversions,
                )
            except SchemaMappingError:
                continue
            plan = plan_evolution(current, mapped.struct, route=True)
            if plan.decodable and not plan.needs_update:
                ids.append(schema_id)
        return ids

    def _found_ids(self, found: tuple[int, ...], column: str, batch_id: int) -> list[int]:
        """Notes the writer schema ids a batch has; returns those it was not decoded for."""
        recent = self.recent[column]
        new = sorted(schema_id for schema_id in found if schema_id not in recent)
        recent.update(dict.fromkeys(found, batch_id))
        return new

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
            self.recent[column].update(dict.fromkeys(ids, batch_id))
        dead = _DeadLetters()
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
        dead: _DeadLetters,
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
        self.java_table = None
        with step("load_table"):
            table = self.loaded = self.catalog.load_table(identifier)
        self._check_identity(table, batch_id)
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
                start or {}, committed.offsets, self._floor(table, start or {}, committed)
            )
        if ahead:
            raise CheckpointAhead(
                f"CheckpointAhead: batch {batch_id} of {writer} would start above table "
                f"{identifier}'s offsets ({'; '.join(ahead)}); "
                + (
                    "main was rolled back"
                    if ref == MAIN
                    else f"its branch {ref} was rolled back or dropped"
                )
                + " or the table replaced: the job starts again from the table"
            )
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
                    self._expected_ids(table, "value", batch_id) if value_framed else [],
                    self._expected_ids(table, KEY_FIELDS, batch_id) if key_framed else [],
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
                if value_framed and "_schema_id" not in rows.columns:
                    rows = frame(rows)
                if key_framed and "_key_schema_id" not in rows.columns:
                    rows = frame(rows, "key")
                expected = {
                    name: (column, ids)
                    for name, column, ids, framed in (
                        ("value_ids", "_schema_id", value_ids, value_framed),
                        ("key_ids", "_key_schema_id", keys, key_framed),
                    )
                    if framed
                }
                counted = _Pass(
                    Observation(f"floe_batch_{uuid.uuid4().hex}"),
                    expected,
                    newest=tasks is not None or not files_bound_one_partition(table),
                )
                rows = rows.observe(counted.observation, *counted.metrics())
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
                seen = counted.read()
                for name in counted.between:  # (a pass over the batch)
                    seen[name] = tuple(framed_ids(batch, "value" if name == "value_ids" else "key"))
                new = {
                    column: self._found_ids(seen[name], column, batch_id)
                    for column, name in (("value", "value_ids"), (KEY_FIELDS, "key_ids"))
                }
                if any(new.values()):
                    raise UnplannedSchemas(
                        f"batch {batch_id} has writer schema ids it was not decoded for: "
                        + "; ".join(f"{c} {ids}" for c, ids in new.items() if ids)
                    )
                latest: dict[int, int] | None
                if "newest" in seen:
                    latest = {p: t for p, t in seen["newest"].items() if p in partitions}
                else:
                    latest = staged.newest_by_partition() if staged is not None else None
                if latest is None:  # (a file without bounds, which the table said it keeps)
                    latest = _newest_by_partition(batch, partitions)
                seen["vtts"] = found_vtts = min(latest.values()) if latest else None
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
        written, raw, timing = self._write(
            decoded, base, summary, dead, _committed_at(table, committed), tasks
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

    def _check_identity(self, table: Any, batch_id: int) -> None:
        """Stops the batch when the table is not the one the job started on (dropped and
        created again, or another table registered under its name): the job starts again from
        the new table's offsets."""
        found = str(table.metadata.table_uuid)
        if self.table_uuid is None:
            self.table_uuid = found
        elif found != self.table_uuid:
            raise CheckpointAhead(
                f"CheckpointAhead: table {self.config.table.identifier} was replaced while the "
                f"job ran (table UUID {self.table_uuid}, now {found}); batch {batch_id} is not "
                "committed and the job starts again from the new table's offsets"
            )

    def _floor(
        self, table: Any, start: dict[int, int], committed: Committed
    ) -> dict[int, int] | None:
        """Where the batch's partitions that the table has no offsets for must start, when
        that matters: the table is the topic's only one.  One of a routed topic's tables with
        no offsets (a route just added, its table dropped and created again, or ``main``
        rolled back to its root) goes on from where the topic's other tables are: going back
        would route to it records another table took while it was not there."""
        missing = sorted(set(start) - set(committed.offsets))
        if not missing or self.floor is None:
            return None
        if not self.alone:
            if (
                not committed.offsets
                and tagged_commit(table, self.config.writer, self.config.kafka.topic).offsets
            ):
                log.warning(
                    "table %s has none of topic %s's offsets in main but floe's tag "
                    "(main rolled back to its root): as one of the topic's routed "
                    "tables it goes on from where the batch starts, %s; the records "
                    "before are not ingested into it again",
                    self.config.table.identifier,
                    self.config.kafka.topic,
                    start,
                )
            return None
        return self.floor(missing)

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
