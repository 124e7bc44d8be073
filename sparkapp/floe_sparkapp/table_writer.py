"""One micro-batch into one table, exactly once (:mod:`.commit`'s protocol).

The batch's records above the table's committed offsets are decoded with a plan per writer
schema id (the table evolved for it when additive), then appended, or for ``upsert`` and
``cdc`` merged, on a branch whose snapshot carries the table's own offsets; ``main`` moves
there in one compare-and-set.  A topic routed to several tables has one of these per table
(:class:`~floe_sparkapp.job.BatchWriter`), each with its own offsets.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from . import catalog as catalogs
from . import cdc, checkpoint, schemas
from .avro_types import SchemaMappingError
from .checkpoint import CheckpointAhead
from .commit import (DEAD_LETTER_ERROR, BranchCommitter, commit_with_retries, last_commit,
                     merge_offsets, summary_properties)
from .config import ROW_LEVEL, JobConfig, kafka_client_settings
from .decode import (WriterPlan, decode_avro_key, decode_framed, decode_json, decode_json_key,
                     decode_raw, frame, table_rows)
from .layout import KEY_FIELDS
from .evolution import BreakingChange, evolve_for_writer, fit_without_evolution
from .registry import Registry
from .schemas import FORMATS
from .upsert import Upsert

log = logging.getLogger("floe.job")


DEAD_LETTER_ATTEMPTS = 3


def _cause(error: Exception) -> str:
    """The innermost Java exception of a failed Spark action (``Caused by: ...``), or the first
    line of the error."""
    text = str(error)
    causes = re.findall(r"Caused by: ([\w.$]+(?:Exception|Error)[^\n]*)", text)
    if causes:
        return causes[-1][:500]
    found = re.search(r"([\w.$]+(?:Exception|Error): [^\n]*)", text)
    return (found.group(1) if found else text.splitlines()[0] if text else repr(error))[:500]


def undecodable(rows: DataFrame) -> Any:
    """Rows whose value could not be decoded (not those decoded but for recursive fields)."""
    failed = F.col("value_error").isNotNull()
    return failed & F.col("value").isNull() if "value" in rows.columns else failed


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

    def __post_init__(self) -> None:
        self.committer = BranchCommitter(self.spark, self.config.table.catalog.name,
                                         self.config.table.identifier, self.config.writer)
        self.catalog = catalogs.load_catalog(self.config.table.catalog)
        mode = self.config.table.mode
        self.upsert = (Upsert(self.config.table.key_columns,
                              has_value=self.config.value.format != "raw", cdc=mode == "cdc",
                              key_fields=self.config.key.decoded)
                       if mode in ROW_LEVEL else None)

    @property
    def table_name(self) -> str:
        return f"{self.config.table.catalog.name}.{self.config.table.identifier}"

    def _plan(self, schema_id: int, table: Any, column: str = "value") -> WriterPlan:
        """How to decode records of one writer schema id (evolving the table if additive);
        ``column`` is ``key_fields`` for a key's writer schema."""
        assert self.registry is not None
        found = self.registry.by_id(schema_id)
        if found is None:
            return WriterPlan(schema_id, error=f"unknown schema id {schema_id}: the schema "
                                               "registry has no schema with this id")
        fmt = self.config.key.format if column == KEY_FIELDS else self.config.value.format
        expected = FORMATS[fmt]
        if found.schema_type.upper() != expected:
            return WriterPlan(schema_id, error=f"schema id {schema_id} is "
                                               f"{found.schema_type}, not {expected}")
        try:
            mapped, writer = (schemas.mapped(found) if column == KEY_FIELDS else schemas.mapped(
                found, self.config.table.mode, self.config.value.message))
        except SchemaMappingError as error:
            return WriterPlan(schema_id, error=f"schema id {schema_id}: {error}")
        fit = evolve_for_writer if self.config.schema_evolution == "additive" else (
            fit_without_evolution)
        try:
            plan = fit(table, mapped.struct, column)
        except BreakingChange as change:
            return WriterPlan(schema_id, error=f"schema id {schema_id}: {change}")
        if plan.needs_update:
            log.info("schema id %d evolved table %s: %s", schema_id, self.table_name,
                     "; ".join(str(c) for c in plan.changes))
        return WriterPlan(schema_id, writer=writer, recursive_fields=mapped.recursive_fields,
                          routes=tuple(sorted(plan.routes.items())))

    def _plans(self, table: Any, schema_ids: list[int], column: str) -> dict[int, WriterPlan]:
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

    def _decode(self, fresh: DataFrame, table: Any, schema_ids: list[int],
                key_ids: list[int] = ()) -> DataFrame:
        """Table rows from Kafka rows; ``schema_ids`` are the writer schema ids of the batch's
        values, ``key_ids`` those of its keys (Avro keys)."""
        fmt = self.config.value.format
        keyed = self.config.key.decoded
        if fmt == "raw" and not keyed:
            return table_rows(decode_raw(fresh), has_value=False)
        # Plans first: a writer's new fields evolve the table, and the projection is onto the
        # table as it is then (plans made against an older schema still decode).
        key_plans = (self._plans(table, list(key_ids), KEY_FIELDS)
                     if self.config.key.format == "avro" else None)
        plans = self._plans(table, schema_ids, "value") if fmt != "raw" else {}
        columns = self.spark.table(self.table_name).schema
        if key_plans is not None:
            framed = fresh if "_key_schema_id" in fresh.columns else frame(fresh, "key")
            fresh = decode_avro_key(framed, key_plans, columns[KEY_FIELDS].dataType)
        elif keyed:
            fresh = decode_json_key(fresh, columns[KEY_FIELDS].dataType)
        if fmt == "raw":
            return table_rows(decode_raw(fresh), has_value=False, key_fields=True)
        value_type = columns["value"].dataType
        changes = self.config.table.mode == "cdc"
        if fmt == "json" and changes:
            parsed = decode_json(fresh, cdc.json_type(value_type))
            return self._changes(parsed.withColumn("_value", cdc.unwrap_json(F.col("_value"))))
        if fmt == "json":
            return table_rows(decode_json(fresh, value_type, plans), has_value=True,
                              key_fields=keyed)
        if "_schema_id" not in fresh.columns:
            fresh = frame(fresh)  # (a routed batch comes framed, its writers decoded)
        if changes:  # the envelope decoded, its images projected onto the table's rows
            plans = {i: replace(plan, routes=cdc.envelope_routes(plan.routes))
                     for i, plan in plans.items()}
            return self._changes(decode_framed(fresh, plans, cdc.envelope_type(value_type)))
        return table_rows(decode_framed(fresh, plans, value_type), has_value=True,
                          key_fields=keyed)

    def _changes(self, envelopes: DataFrame) -> DataFrame:
        return table_rows(cdc.change_rows(envelopes, self.config.table.key_columns),
                          has_value=True, cdc=True, key_fields=self.config.key.decoded)

    def _dead_letters(self, bad: DataFrame) -> None:
        """Sends undecodable rows to the dead-letter topic, with why and where from."""
        headers = F.concat(
            F.coalesce(F.col("kafka.headers"), F.array().cast("array<struct<key:string,value:binary>>")),
            F.array(
                F.struct(F.lit("floe.error").alias("key"),
                         F.encode(F.col("value_error"), "UTF-8").alias("value")),
                F.struct(F.lit("floe.topic").alias("key"),
                         F.encode(F.col("kafka.topic"), "UTF-8").alias("value")),
                F.struct(F.lit("floe.partition").alias("key"),
                         F.encode(F.col("kafka.partition").cast("string"), "UTF-8").alias("value")),
                F.struct(F.lit("floe.offset").alias("key"),
                         F.encode(F.col("kafka.offset").cast("string"), "UTF-8").alias("value")),
            ))
        writer = (bad.select(F.col("key"), F.col("value_raw").alias("value"),
                             headers.alias("headers"))
                  .write.format("kafka")
                  .option("kafka.bootstrap.servers", self.config.kafka.bootstrap_servers)
                  .option("topic", self.config.dead_letter.topic)
                  .option("includeHeaders", "true")
                  # a missing topic fails the send in seconds rather than a minute
                  .option("kafka.max.block.ms", "15000"))
        for key, value in kafka_client_settings(self.config).items():
            writer = writer.option(f"kafka.{key}", value)
        writer.save()

    def _send_dead_letters(self, bad: DataFrame, errors: int) -> str | None:
        """Sends the undecodable rows to the dead-letter topic, trying a few times.  When the
        topic keeps refusing them (too large, missing, not allowed), returns why: the rows are
        still committed, with their raw value and reason, and the commit records the failure
        for the status."""
        topic = self.config.dead_letter.topic
        for attempt in range(1, DEAD_LETTER_ATTEMPTS + 1):
            try:
                self._dead_letters(bad)
                return None
            except Exception as error:  # noqa: BLE001 - any refusal, reported below
                cause = _cause(error)
                log.warning("dead-letter topic %s refused %d record(s) (attempt %d of %d): %s",
                            topic, errors, attempt, DEAD_LETTER_ATTEMPTS, cause)
                if attempt < DEAD_LETTER_ATTEMPTS:
                    time.sleep(2 ** attempt)
        return (f"{errors} undecodable record(s) not sent to dead-letter topic {topic} after "
                f"{DEAD_LETTER_ATTEMPTS} attempts (they are in value_raw): {cause}")[:1000]

    def _write(self, rows: DataFrame, base: int, props: dict[str, str],
               outcome: dict[str, Any]) -> None:
        """Commits ``rows``; counts them and the undecodable ones in the same pass as the write
        (an observation), except when a dead-letter topic needs them first (once per batch,
        even when the commit is retried)."""
        dead_letter = self.config.dead_letter is not None and not outcome.get("dead_lettered")
        if dead_letter:
            rows = rows.persist()
        try:
            if dead_letter:
                bad = rows.filter(undecodable(rows))
                errors = bad.count()
                if errors:
                    failure = self._send_dead_letters(bad, errors)
                    if failure is None:
                        outcome["dead_letters"] = errors
                    else:
                        outcome["dead_letter_error"] = failure
                outcome["dead_lettered"] = True
            if outcome.get("dead_letter_error"):
                props = {**props, DEAD_LETTER_ERROR: outcome["dead_letter_error"]}
            if self.upsert is not None:
                rows = rows.persist()
                try:
                    errors = rows.filter(undecodable(rows)).count()
                    outcome.update(self.committer.commit(rows, base, props, self.upsert))
                    outcome["written"] = int(outcome.pop("applied"))
                    outcome["errors"] = errors
                finally:
                    rows.unpersist()
                return
            observation = Observation(f"floe_{uuid.uuid4().hex}")
            observed = rows.observe(
                observation, F.count(F.lit(1)).alias("rows"),
                F.coalesce(F.sum(F.when(undecodable(rows), 1).otherwise(0)),
                           F.lit(0)).alias("errors"))
            outcome.update(self.committer.commit(observed, base, props))
            counted = observation.get
            outcome["written"] = int(counted["rows"])
            outcome["errors"] = int(counted["errors"])
        finally:
            if dead_letter:
                rows.unpersist()

    def commit_batch(self, batch: DataFrame, batch_id: int, start: dict[int, int] | None,
                     batch_next: dict[int, int], vtts: int | None,
                     schema_ids: list[int], key_ids: list[int] = ()) -> dict[str, Any]:
        """Commits the batch's records (those at or above the table's offsets) with the batch's
        end offsets, retrying on conflicts; returns what it did."""
        outcome: dict[str, Any] = {"written": 0, "errors": 0, "dead_letters": 0,
                                   "write_seconds": 0.0, "commit_seconds": 0.0}
        identifier, writer, topic = (self.config.table.identifier, self.config.writer,
                                     self.config.kafka.topic)

        def attempt() -> None:
            table = self.catalog.load_table(identifier)
            base = table.current_snapshot().snapshot_id  # offsets below are read from here
            committed = last_commit(table, writer, topic)
            ahead = checkpoint.ahead_of(start or {}, committed.offsets)
            if ahead:
                raise CheckpointAhead(
                    f"CheckpointAhead: batch {batch_id} of {writer} would start above table "
                    f"{identifier}'s offsets ({'; '.join(ahead)}); main was rolled back or the "
                    "table replaced: the job starts again from the table")
            known = F.create_map(*[F.lit(x) for p, o in committed.offsets.items()
                                   for x in (p, o)]) if committed.offsets else None
            fresh = batch if known is None else batch.filter(
                F.col("offset") >= F.coalesce(known[F.col("partition")], F.lit(0)))
            offsets = merge_offsets(committed.offsets, batch_next)
            if offsets == committed.offsets:
                log.info("batch %d of %s: already committed in snapshot %s of %s", batch_id,
                         writer, committed.snapshot_id, identifier)
                return
            newest = [t for t in (vtts, committed.vtts) if t is not None]
            props = summary_properties(writer, topic, offsets, max(newest) if newest else None,
                                       self.config.generation, batch_id)
            self._write(self._decode(fresh, table, schema_ids, key_ids), base, props, outcome)
            outcome["offsets"] = offsets

        outcome["conflicts"] = commit_with_retries(attempt)
        if "offsets" in outcome and self.config.maintenance.expire_while_committing:
            self._expire(outcome)
        return outcome

    def _expire(self, outcome: dict[str, Any]) -> None:
        """Expires the snapshots past the retention (``expireSnapshots``) after a commit; a
        failure only delays it to a later batch (or the maintenance CronJob)."""
        started = time.monotonic()
        older_than_ms = int((time.time() - self.config.snapshot_max_age_seconds) * 1000)
        try:
            outcome["expired"] = self.committer.expire_snapshots(
                older_than_ms, self.config.maintenance.retain_last)
        except Exception as error:  # noqa: BLE001 - the commit stands; expiry comes again
            log.warning("could not expire the snapshots of %s: %s", self.table_name,
                        str(error).splitlines()[0][:500])
        outcome["expire_seconds"] = time.monotonic() - started
