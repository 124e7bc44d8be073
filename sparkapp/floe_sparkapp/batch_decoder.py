"""A micro-batch's Kafka records decoded into one table's rows (:class:`BatchDecoder`).

Each writer schema id has a plan, made on first sight and kept while the table's schema stays:
the table evolved for it when additive (in a look that changes nothing, its records left
undecoded with :data:`WOULD_EVOLVE`), or why its records cannot be decoded.  An append is
decoded for the writer schema ids of the recent batches (at first, the subject's versions that
fit the table); those its pass finds that it was not decoded for are told apart
(:meth:`BatchDecoder.check`), and the batch is decoded again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from . import cdc, schemaless, schemas
from .avro_types import SchemaMappingError
from .commit import BranchCommitter
from .config import JobConfig
from .decode import KEY_FIELDS as DECODED_KEY
from .decode import (
    NO_COLUMNS_YET,
    WriterPlan,
    decode_framed,
    decode_framed_key,
    decode_json,
    decode_json_key,
    decode_raw,
    frame,
    framed_ids,
    table_rows,
)
from .evolution import (
    BreakingChange,
    WouldEvolve,
    evolve_for_writer,
    fit_without_evolution,
    look_for_writer,
    plan_evolution,
    value_struct,
)
from .layout import KEY_FIELDS
from .registry import Registry
from .schemas import FORMATS
from .steps import step
from .upsert import OP_COLUMN, operation_rows

log = logging.getLogger("floe.job")


# The error of a record a look that changes nothing (``evolve=False``) did not decode because
# the table would first have to evolve for its writer schema.
WOULD_EVOLVE = "the table would evolve for it: "
RECENT_BATCHES = 100  # an append is decoded for the schema ids of this many batches before it


class UnplannedSchemas(RuntimeError):
    """The batch has writer schema ids it was not decoded for: it is decoded again."""


@dataclass
class BatchDecoder:
    """Decodes Kafka records into one table's rows, with a plan per writer schema id."""

    config: JobConfig
    registry: Registry | None
    committer: BranchCommitter  # the table's: it loads the table as Spark writes it
    table_name: str  # (for the log)
    # False: decode without evolving the table (a repair's dry run); a writer schema that
    # would evolve it leaves its records undecoded, with WOULD_EVOLVE and the changes
    evolve: bool = True
    plans: dict[tuple[str, int], WriterPlan] = field(default_factory=dict)  # by column, id
    planned_for: int | None = None  # the table schema id the plans were made against
    # writer schema ids by column (value, key_fields): the batch they were last seen in
    recent: dict[str, dict[int, int]] = field(default_factory=lambda: {"value": {}, KEY_FIELDS: {}})
    # the table through Iceberg's Java API once the plans evolved it: the write goes there
    java_table: Any = None

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

    def writer_plans(
        self, table: Any, schema_ids: Sequence[int], column: str
    ) -> dict[int, WriterPlan]:
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
            self.writer_plans(table, ids, "value")
        if keys:
            self.writer_plans(table, keys, KEY_FIELDS)

    def decode(
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
            self.writer_plans(table, list(key_ids), KEY_FIELDS) if self.config.key.framed else None
        )
        plans = self.writer_plans(table, schema_ids, "value") if fmt != "raw" else {}
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

    def expected_ids(self, table: Any, column: str, batch_id: int) -> list[int]:
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

    def check(self, seen: dict[str, Any], batch_id: int) -> None:
        """Notes the writer schema ids an append's pass found (``seen``:
        :meth:`.batch_write.Pass.ids`); raises :class:`UnplannedSchemas` when the batch has
        ids it was not decoded for."""
        new = {
            column: self._found_ids(seen[name], column, batch_id)
            for column, name in (("value", "value_ids"), (KEY_FIELDS, "key_ids"))
        }
        if any(new.values()):
            raise UnplannedSchemas(
                f"batch {batch_id} has writer schema ids it was not decoded for: "
                + "; ".join(f"{c} {ids}" for c, ids in new.items() if ids)
            )
