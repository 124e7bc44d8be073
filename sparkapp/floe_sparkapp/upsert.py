"""Row-level changes (``table.mode: upsert``, and ``cdc`` through :mod:`.cdc`): which records
of a batch change which rows, and the statements that change them on the batch's branch.

A row is identified by its key: the ``table.keyColumns`` value fields, or, when there are none,
the record's Kafka key (its bytes, or the ``key_fields`` it decodes to with ``key.format`` avro
or json, which stay the same across key schema versions).  A record replaces the row with its
key (the row deleted, the record appended: :meth:`Upsert.apply`); a tombstone (a record whose
value is null) deletes the row last written with its Kafka key.  Within a batch only the last
record per key applies, by (partition, offset); across batches, Kafka's
order per partition does, so a key's records must all go to one partition (producers that
partition by key do).  A record whose key is null, or whose value could not be decoded, has no
identity: it is added as a row of its own, replacing nothing, and nothing replaces or deletes
it later.

With ``table.op`` (:func:`operation_rows`), a value field or header says what a record does:
an insert or an update replaces its key's row, a delete deletes it (keyed by the record's
``keyColumns`` fields, or its Kafka key); a record with any other operation, or none, is kept
raw with the reason, as one that could not be decoded.

The table is format version 3 and merge-on-read: replaced and deleted rows are marked by
deletion vectors (a bitmap of deleted positions per data file, in Puffin files), never equality
deletes, which several engines cannot read.  The batch's snapshot properties (its offsets) go on
the branch's last snapshot, its append's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .decode import scalar_at
from .ledger import BATCH_PART

# With table.op: what a decoded record does to its key's row (UPSERT or DELETE)
OP_COLUMN, UPSERT, DELETE = "_floe_op", "upsert", "delete"


def operation_rows(
    df: DataFrame, op: Any, key_columns: tuple[str, ...], key: str, value_type: Any
) -> DataFrame:
    """Decoded records (``_value``, before :func:`.decode.table_rows`) with OP_COLUMN: what
    ``op`` (the table's :class:`~.contract.OpSpec`) says each does; a decoded record whose
    operation is none of op's values, or a delete without its key, is kept raw with the reason
    (worded ``op ...``: reason ``not_a_change``).  ``key`` is the column of the Kafka key rows
    are identified by when there are no ``key_columns``."""
    where = op.action()
    if op.field:
        found = scalar_at(F.col("_value"), value_type, op.field) if "_value" in df.columns else None
        text = found.cast("string") if found is not None else None
        missing = (
            f"op {where} is null: the record's operation is unknown"
            if text is not None
            else f"op {where} is not a field of the table's value: the record's "
            "operation is unknown"
        )
    else:
        named = F.filter("headers", lambda h: h.getField("key") == F.lit(op.header))
        text = F.try_element_at(named, F.lit(-1)).getField("value").cast("string")
        missing = f"op {where} is missing: the record has no such header"
    if text is None:
        text = F.lit(None).cast("string")
    values = {UPSERT: (*op.insert, *op.update), DELETE: op.delete}
    action = F.lower(F.trim(text))
    kind_of = F.when(action.isin(*values[UPSERT]), F.lit(UPSERT)).when(
        action.isin(*values[DELETE]), F.lit(DELETE)
    )
    if key_columns:
        keyless = F.lit(False)
        for name in key_columns:
            keyless = keyless | _nested(name).isNull()
        why = f"op delete without its keyColumns ({', '.join(key_columns)}): no row to find"
    else:
        keyless = F.col(key).isNull()
        why = "op delete without a Kafka key: no row to find"
    body = "_value" if "_value" in df.columns else "value"  # a raw table: its bytes
    decoded = F.col(body).isNotNull() & F.col("value_error").isNull()
    problem = (
        F.when(~decoded, F.lit(None))
        .when(text.isNull(), F.lit(missing))
        .when(
            kind_of.isNull(),
            F.format_string(
                f"op %s ({where}) is not an insert ({', '.join(op.insert)}), update "
                f"({', '.join(op.update)}) or delete ({', '.join(op.delete)})",
                text,
            ),
        )
        .when((kind_of == DELETE) & keyless, F.lit(why))
    )
    checked = df.withColumn("_op_problem", problem)
    bad = F.col("_op_problem").isNotNull()
    checked = (
        checked.withColumn("value_error", F.coalesce(F.col("value_error"), F.col("_op_problem")))
        .withColumn("value_raw", F.when(bad, F.col("value")).otherwise(F.col("value_raw")))
        .withColumn(OP_COLUMN, F.when(decoded & ~bad, kind_of))
    )
    if body == "_value":  # kept raw: no value
        checked = checked.withColumn(body, F.when(~bad, F.col(body)))
    return checked.drop("_op_problem")


def _nested(path: str) -> Any:
    column = F.col("_value")
    for part in path.split("."):
        column = column.getField(part)
    return column


@dataclass(frozen=True)
class Upsert:
    key_columns: tuple[str, ...] = ()  # value fields; none: the Kafka key
    has_value: bool = True  # false for a raw table (no value column)
    cdc: bool = False  # mode cdc: rows of change events (cdc.change_rows), op d deletes
    key_fields: bool = False  # the Kafka key is decoded: its fields, not its bytes, identify
    ops: bool = False  # table.op: rows carry OP_COLUMN (operation_rows), "delete" deletes

    @property
    def _key(self) -> str:
        """The column that holds the Kafka key as records are identified by it."""
        return "key_fields" if self.key_fields else "key"

    # --- which records apply ------------------------------------------------------------------

    def _identity_columns(self) -> list[str]:
        """The columns of a row (and of an upsert) that identify it."""
        if self.key_columns:
            return [f"value.{c}" for c in self.key_columns]
        return [self._key]

    def _identity(self) -> list[Any]:
        """What identifies a record's row (a cdc delete's key is in its before image)."""
        if self.key_columns and self.cdc:
            return [
                F.coalesce(F.col(f"value.{c}"), F.col(f"_floe_before.{c}"))
                for c in self.key_columns
            ]
        return [F.col(c) for c in self._identity_columns()]

    def tombstone(self) -> Any:
        """The record's value was null."""
        condition = F.col("value_raw").isNull() & F.col("value_error").isNull()
        if self.cdc:
            return condition & F.col("cdc").isNull()
        return condition & F.col("value").isNull() if self.has_value else condition

    def _deletes(self) -> Any:
        """The record is a change event (or, with ``op``, an operation) deleting its row."""
        if self.ops:
            return F.coalesce(F.col(OP_COLUMN) == DELETE, F.lit(False))
        return F.coalesce(F.col("cdc.op") == "d", F.lit(False)) if self.cdc else F.lit(False)

    def _identified(self) -> Any:
        identified = F.lit(True)
        for column in self._identity():
            identified = identified & column.isNotNull()
        return identified & ~self.tombstone() & F.col("value_error").isNull()

    def changes(self, rows: DataFrame) -> tuple[DataFrame, DataFrame, DataFrame, DataFrame | None]:
        """(marked, upserts, tombstones, deletes): the batch's records that apply, at most one
        per key; ``deletes`` (mode cdc with keyColumns) are the keys whose last change deletes.
        The three are filters of ``marked`` (each record with what it does), which the caller
        persists: the batch's windows are computed once."""
        position = F.struct(F.col("kafka.partition"), F.col("kafka.offset"))
        kafka_key = F.col(self._key)
        ended = self.tombstone() & kafka_key.isNotNull()
        marked = rows.withColumn("_floe_position", position).withColumn(
            "_floe_tombstone", self.tombstone()
        )
        # Most batches have no tombstone and each key once: then no record is followed by
        # another of its key, and neither window (each a shuffle of the batch's rows) is needed.
        identity = F.struct(*self._identity())
        keyed = self._identified()
        seen = rows.agg(
            F.count_if(ended).alias("ended"),
            F.count_if(keyed).alias("keyed"),
            F.count_distinct(F.when(keyed, identity)).alias("keys"),
        ).first()
        assert seen is not None  # an aggregate over all the rows has one row
        if seen["ended"]:  # the newest tombstone of the record's Kafka key in this batch
            deleted_at = F.max(F.when(ended, F.col("_floe_position"))).over(
                Window.partitionBy(kafka_key)
            )
        else:
            deleted_at = F.lit(None).cast(marked.schema["_floe_position"].dataType)
        marked = marked.withColumn("_floe_deleted_at", deleted_at)
        # A record followed by a tombstone of its Kafka key is deleted by it.
        live = ~F.col("_floe_tombstone") & (
            F.col("_floe_deleted_at").isNull()
            | (F.col("_floe_position") > F.col("_floe_deleted_at"))
        )
        if seen["ended"] or seen["keys"] < seen["keyed"]:
            # the newest live record of each key ranks first (the others of its key after it)
            newest = Window.partitionBy(*self._identity()).orderBy(
                live.desc(), F.col("_floe_position").desc()
            )
            rank = F.when(live & keyed, F.row_number().over(newest)).otherwise(F.lit(1))
        else:
            rank = F.lit(1)
        marked = marked.withColumn("_floe_live", live).withColumn("_floe_rank", rank)
        tombstones = marked.filter(
            F.col("_floe_tombstone")
            & kafka_key.isNotNull()
            & (F.col("_floe_position") == F.col("_floe_deleted_at"))
        ).select(self._key)
        last = marked.filter(F.col("_floe_live") & (F.col("_floe_rank") == 1))
        upserts = last.filter(~self._deletes()).drop(
            "_floe_rank",
            "_floe_live",
            "_floe_position",
            "_floe_tombstone",
            "_floe_deleted_at",
            "_floe_before",
            OP_COLUMN,
        )
        deletes = None
        if self.cdc or self.ops:
            removed = last.filter(self._deletes())
            if self.key_columns:
                deletes = removed.select(
                    *[column.alias(f"_floe_k{i}") for i, column in enumerate(self._identity())]
                )
            else:  # keyed by the Kafka key, a delete is a tombstone
                tombstones = tombstones.unionByName(removed.select(self._key)).distinct()
        return marked, upserts, tombstones, deletes

    # --- the statements -----------------------------------------------------------------------

    def apply(
        self,
        rows: DataFrame,
        target: str,
        properties: dict[str, str],
        changed: Callable[[], None] | None = None,
    ) -> int:
        """Changes ``target`` (the batch's branch) by the batch's records; the last snapshot
        carries ``properties``, the deletes before it :data:`~.ledger.BATCH_PART` (they are
        not a state of the table between batches), and ``changed`` is called after each delete
        (the committer notes where the branch is).  Returns how many records applied.

        Each change is a delete of the rows with the batch's keys (a semi-join: the table's key
        columns are read and probed against the batch's keys, broadcast to the tasks reading
        them: no shuffle of the table), then the upserts appended: what a ``MERGE INTO ...
        UPDATE SET * / INSERT *`` does, without its join of the whole table with the batch.
        Each delete also says the range of the batch's keys (their least and greatest value),
        so only the data files whose key bounds overlap it are read: keys that arrive in order
        (an order's id, a sequence) find their rows in the newest files whatever the table's
        size."""
        # The views and statements go to the batch's own session (foreachBatch gives each
        # batch a session of its own).
        spark = rows.sparkSession
        marked, upserts, tombstones, deletes = self.changes(rows)
        marked = marked.persist()
        try:
            applied = 0
            suffix = uuid.uuid4().hex[:12]
            # (name, records, their key columns, the rows' key columns they match, whether only
            # decoded records count: a row kept raw, its value undecodable, is a row of its own)
            identity = self._identity_columns()
            removals = [("tombstones", tombstones, [self._key], [self._key], False)]
            if deletes is not None:
                removals.append(
                    (
                        "deletes",
                        deletes,
                        [f"_floe_k{i}" for i in range(len(self.key_columns))],
                        identity,
                        False,
                    )
                )
            removals.append(("upserts", upserts, identity, identity, True))
            for name, frame, sources, targets, decoded in removals:
                named = F.lit(True)  # the records that name a row
                for column in sources:
                    named = named & F.col(column).isNotNull()
                if decoded:
                    named = named & F.col("value_error").isNull()
                found = _keys_of(frame, sources, named)
                applied += found["_floe_records"]
                if not found["_floe_keys"]:
                    continue
                view = f"floe_{name}_{suffix}"
                frame.filter(named).createOrReplaceTempView(view)
                keys = ", ".join(f"s.{c}" for c in sources)
                statement = (
                    f"DELETE FROM {target} t WHERE t.value_error IS NULL"
                    f"{_bounds(targets, found)} AND "
                    f"({', '.join(f't.{c}' for c in targets)}) IN "
                    f"(SELECT {_broadcast(found)}{keys} FROM {view} s)"
                )
                with_commit_properties(spark, {BATCH_PART: name}, partial(spark.sql, statement))
                if changed is not None:
                    changed()
            writer = upserts.writeTo(target)
            for key, value in properties.items():
                writer = writer.option(f"snapshot-property.{key}", value)
            writer.append()
            return applied
        finally:
            marked.unpersist()


# Up to this many keys, a delete's keys are broadcast to the tasks reading the table: the
# table's key columns are probed where they are read, never shuffled (Spark's own choice goes
# by its estimate of the batch's cached rows, all their columns, and shuffles the table).
BROADCAST_KEYS = 2_000_000


def _broadcast(found: dict[str, Any]) -> str:
    return "/*+ BROADCAST(s) */ " if found["_floe_keys"] <= BROADCAST_KEYS else ""


_BOUNDED = ("tinyint", "smallint", "int", "bigint", "string", "binary")


def _keys_of(frame: DataFrame, columns: list[str], named: Any) -> dict[str, Any]:
    """How many of ``frame``'s records there are (``_floe_records``), how many name a row
    (``_floe_keys``: ``named`` holds) and, for each key column of a type with an order Iceberg
    keeps bounds for, the least and greatest key they name (``_floe_lo<i>``, ``_floe_hi<i>``)."""
    aggregates = [
        F.count(F.lit(1)).alias("_floe_records"),
        F.count(F.when(named, F.lit(1))).alias("_floe_keys"),
    ]
    types = dict(frame.select(*[F.col(c).alias(c) for c in columns]).dtypes)
    for i, column in enumerate(columns):
        if types[column] in _BOUNDED:
            value = F.when(named, F.col(column))
            aggregates += [F.min(value).alias(f"_floe_lo{i}"), F.max(value).alias(f"_floe_hi{i}")]
    found = frame.agg(*aggregates).first()
    assert found is not None  # an aggregate over all the rows has one row
    return found.asDict()


def _bounds(targets: list[str], found: dict[str, Any]) -> str:
    """`` AND`` the target's key columns within the least and greatest of the batch's keys."""
    out = ""
    for i, column in enumerate(targets):
        lo, hi = found.get(f"_floe_lo{i}"), found.get(f"_floe_hi{i}")
        if lo is None or hi is None:
            continue
        out += f" AND t.{column} BETWEEN {_literal(lo)} AND {_literal(hi)}"
    return out


def _literal(value: Any) -> str:
    """A SQL literal of a key's value (one of _BOUNDED's types): a number as it is, text and
    bytes as hex (no quoting to get wrong)."""
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return f"CAST(X'{value.encode().hex()}' AS STRING)"
    return f"X'{bytes(value).hex()}'"


def with_deletion_vectors(spark: Any, table_ref: str, table: Any) -> Any:
    """Upgrades ``table`` to format version 3 unless it is already; returns it refreshed.

    The operator and the job make a table with PyIceberg, which cannot write a version 3
    snapshot (a new table gets an empty root snapshot), so an upsert or cdc table is made at
    version 2 and Iceberg Java upgrades it here, before the job's first change."""
    if table.format_version >= 3:
        return table
    spark.sql(f"ALTER TABLE {table_ref} SET TBLPROPERTIES ('format-version' = '3')")
    return table.refresh()


class _Callable:
    """A Python function the JVM calls as a ``java.util.concurrent.Callable`` (py4j)."""

    def __init__(self, function: Any) -> None:
        self.function = function

    def call(self) -> None:
        self.function()

    class Java:
        implements: ClassVar[list[str]] = ["java.util.concurrent.Callable"]


def with_commit_properties(spark: Any, properties: dict[str, str], run: Any) -> None:
    """Runs ``run`` (a SQL write) with ``properties`` added to the snapshots it commits."""
    from .jvm_udf import java

    jvm = spark._jvm
    java_properties = java("java.util.HashMap", jvm)()
    for key, value in properties.items():
        java_properties.put(key, value)
    java("org.apache.iceberg.spark.CommitMetadata", jvm).withCommitProperties(
        java_properties,
        _Callable(run),
        java("java.lang.Class", jvm).forName("java.lang.RuntimeException"),
    )
