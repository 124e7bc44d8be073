"""Change data capture (``table.mode: cdc``): Debezium change events as table rows.

A record's value is a Debezium envelope: ``op`` (``c`` create, ``r`` snapshot read, ``u``
update, ``d`` delete), the row ``before`` and ``after`` the change, and the connector's
``source`` block (database, table, log position, ...).  The table holds the source table's
rows: the ``value`` column is the ``after`` image (its type is the envelope's ``after`` type,
evolved as the source table's schema changes), and the ``cdc`` column keeps where the change
came from (``op``, ``ts``: when the connector saw it, ``source``: every field of the source
block as text, so any connector's position, an LSN or a binlog file and position, is there).

Rows are keyed as in upsert (:mod:`.upsert`): by ``keyColumns`` fields of the row (taken from
``after``, or from ``before`` for a delete) or by the Kafka key, which Debezium sets to the
row's primary key.  The last change per key in a batch applies; ``d`` deletes the row, and so
does the tombstone Debezium sends after it.  A record that is not a row change (a truncate,
a message event, a value without ``op``) is kept as a row of its own with its bytes in
``value_raw`` and the reason in ``value_error``.

Envelopes come Avro through the registry (the subject's schema is the envelope's), or JSON,
with or without the converter's ``schema``/``payload`` wrapper.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pyiceberg.types import MapType, NestedField, StringType, StructType, TimestamptzType

from .avro_types import AvroMappingError, MappedValue, avro_to_iceberg

OPS = ("c", "r", "u", "d")
ENVELOPE = ("before", "after", "op")


def table_value(schema: str | dict[str, Any], mode: str) -> MappedValue:
    """The ``value`` column's type for a registry schema: the schema's own, or for ``cdc`` its
    envelope's ``after`` row."""
    mapped = avro_to_iceberg(schema)
    return row_of_envelope(mapped) if mode == "cdc" else mapped


def row_of_envelope(envelope: MappedValue) -> MappedValue:
    """The row type inside a Debezium envelope (its ``after`` field)."""
    names = {f.name: f for f in envelope.struct.fields}
    missing = [name for name in ENVELOPE if name not in names]
    if missing:
        raise AvroMappingError(
            f"mode cdc reads Debezium change events, and the schema has no "
            f"{', '.join(missing)} field(s) (it has {', '.join(names) or 'none'}): register "
            "the connector's envelope schema for the topic, or use mode upsert or append"
        )
    after = names["after"].field_type
    if not isinstance(after, StructType):
        raise AvroMappingError(
            f"mode cdc: the envelope's after field is a {after}, not a row (a record)"
        )
    inside = tuple(f[len("after.") :] for f in envelope.recursive_fields if f.startswith("after."))
    return replace(envelope, struct=after, recursive_fields=inside)


def lineage_struct() -> StructType:
    """The ``cdc`` column: where a row's last change came from."""
    return StructType(
        NestedField(
            201,
            "op",
            StringType(),
            required=False,
            doc="c create, r snapshot read, u update (d deletes the row)",
        ),
        NestedField(
            202,
            "ts",
            TimestamptzType(),
            required=False,
            doc="when the connector processed the change (the envelope's ts_ms)",
        ),
        NestedField(
            203,
            "source",
            MapType(204, StringType(), 205, StringType(), value_required=False),
            required=False,
            doc="the envelope's source block, each field as text (db, table, lsn, ...)",
        ),
    )


# --- Spark --------------------------------------------------------------------------------------


def envelope_type(value_type: Any) -> Any:
    """The Spark type envelopes are decoded into, for a table whose rows are ``value_type``."""
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("before", value_type),
            T.StructField("after", value_type),
            T.StructField("op", T.StringType()),
            T.StructField("ts_ms", T.LongType()),
            T.StructField("source", T.MapType(T.StringType(), T.StringType())),
        ]
    )


def json_type(value_type: Any) -> Any:
    """JSON envelopes, bare or in the JSON converter's ``{"schema", "payload"}`` wrapper."""
    from pyspark.sql import types as T

    envelope = envelope_type(value_type)
    return T.StructType([*envelope.fields, T.StructField("payload", envelope)])


def unwrap_json(parsed: Any) -> Any:
    from pyspark.sql import functions as F

    bare = F.struct(
        *[parsed.getField(n).alias(n) for n in ("before", "after", "op", "ts_ms", "source")]
    )
    return (
        F.when(parsed.isNull(), F.lit(None))
        .when(parsed.getField("payload").isNotNull(), parsed.getField("payload"))
        .otherwise(bare)
    )


def envelope_routes(routes: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """Routes of the row's fields (``value.x``) as fields of both images of the envelope."""
    return tuple(
        (f"value.{image}{path[len('value') :]}", column)
        for path, column in routes
        for image in ("before", "after")
    )


def change_rows(df: Any, key_columns: tuple[str, ...]) -> Any:
    """Decoded envelopes (``_value``) to rows: ``_value`` the after image, ``_cdc`` the
    lineage and ``_floe_before`` the before image (a delete's key); a record that is no row
    change keeps its bytes in ``value_raw`` with the reason."""
    from pyspark.sql import functions as F

    envelope = F.col("_value")
    op = envelope.getField("op")
    before, after = envelope.getField("before"), envelope.getField("after")
    if key_columns:
        unkeyed_delete = before.isNull()
        why = "a delete (op d) without a before image: no row to find by keyColumns"
    else:
        unkeyed_delete = F.col("key").isNull()
        why = "a delete (op d) without a Kafka key: no row to find"
    problem = (
        F.when(envelope.isNull(), F.lit(None))
        .when(op.isNull(), F.lit("not a Debezium change event: the value has no op"))
        .when(
            op == "t",
            F.lit(
                "a truncate event (op t) is not applied: delete the rows "
                "with a query, or recreate the table from a snapshot"
            ),
        )
        .when(~op.isin(*OPS), F.format_string("op %s is not a row change (c, r, u or d)", op))
        .when(
            (op != "d") & after.isNull(),
            F.format_string("a change with op %s but no after image", op),
        )
        .when((op == "d") & unkeyed_delete, F.lit(why))
    )
    checked = df.withColumn("_cdc_problem", problem)
    fine = envelope.isNotNull() & F.col("_cdc_problem").isNull()
    return (
        checked.withColumn("value_error", F.coalesce(F.col("value_error"), F.col("_cdc_problem")))
        .withColumn(
            "value_raw",
            F.when(F.col("_cdc_problem").isNotNull(), F.col("value")).otherwise(F.col("value_raw")),
        )
        .withColumn(
            "_cdc",
            F.when(
                fine,
                F.struct(
                    op.alias("op"),
                    F.timestamp_millis(envelope.getField("ts_ms")).alias("ts"),
                    envelope.getField("source").alias("source"),
                ),
            ),
        )
        .withColumn("_floe_before", F.when(fine & (op == "d"), before))
        .withColumn("_value", F.when(fine & (op != "d"), after))
        .drop("_cdc_problem")
    )
