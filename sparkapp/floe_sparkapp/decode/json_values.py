"""JSON values and keys: framed ones (JSON Schema) decoded with their writer schema's plan,
plain ones parsed against the table's type; what cannot be is kept raw."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..coercion import as_text, noted
from .checks import beyond_range, past_range
from .framed import decode_writers_onto
from .framing import frame
from .projection import project
from .rows import KEY_ERROR, KEY_FIELDS
from .writers import CORRUPT, JSON_OPTIONS, WriterPlan, decoded_names


def decode_json_key(df: DataFrame, key_type: T.StructType) -> DataFrame:
    """``_key_fields`` and ``_key_error`` of JSON keys, parsed against the table's type."""
    df, fields, error, _ = _parse_json(
        df, "key", key_type, "key is not a JSON object matching the table's key_fields"
    )
    return (
        df.withColumn(KEY_ERROR, error)
        .withColumn(KEY_FIELDS, fields)
        .drop(_plain_checked_name("key"))
    )


def _plain_checked_name(column: str) -> str:
    return f"_{column.strip('_')}_checked"


def _parse_json(
    df: DataFrame,
    column: str,
    struct: T.StructType,
    problem: str,
    coerce: Mapping[str, str] | None = None,
) -> tuple[DataFrame, Column, Column, Column]:
    """``column`` parsed as JSON against ``struct``: the rows with its check (the caller drops
    :func:`_plain_checked_name`), the parsed value, ``problem`` where it is not a JSON object that
    fits (or why it is malformed), and the note on what follows the document (or on the
    ``coerce``d fields that could not be converted, read as text first)."""
    from ..jvm_udf import json_check

    df = df.select("*", json_check(F.col(column), 0).alias(_plain_checked_name(column)))
    checked = F.col(_plain_checked_name(column))
    read = as_text(struct, coerce) if coerce else struct
    with_corrupt = T.StructType([*read.fields, T.StructField(CORRUPT, T.StringType())])
    parsed = F.from_json(F.col(column).cast("string"), with_corrupt, JSON_OPTIONS)
    beyond = beyond_range(parsed, read)
    reasons = [checked.getField("error")]
    if beyond is not None:
        reasons.append(past_range(beyond))
    present = F.col(column).isNotNull()
    error = F.when(
        present & (parsed.isNull() | parsed.getField(CORRUPT).isNotNull()), F.lit(problem)
    ).when(
        present,
        F.concat(
            F.lit(f"JSON {'key' if column == 'key' else 'value'} is malformed: "),
            F.coalesce(*reasons),
        ),
    )
    note = F.when(
        checked.getField("trailing") > 0,
        F.lit("more follows the JSON value and was not read; the full value is in value_raw"),
    )
    coerced = noted(parsed, with_corrupt, struct, coerce or {})
    if coerced is not None:
        note = F.coalesce(note, coerced)
    return (
        df,
        F.when(error.isNull(), project(parsed, with_corrupt, struct, coerce=coerce)),
        error,
        note,
    )


def decode_json(
    df: DataFrame,
    value_type: T.StructType,
    plans: Mapping[int, WriterPlan] | None = None,
    coerce: Mapping[str, str] | None = None,
    unfit: str | None = None,
) -> DataFrame:
    """JSON values: those in the Confluent wire format (JSON Schema, see :func:`frame`) decoded
    with their writer schema's plan, plain ones parsed against the table's value struct; what
    cannot be is kept raw.  ``coerce``: the fields converted to their column's type; ``unfit``:
    the fields whose inferred type the table's columns do not take (:mod:`.schemaless`), named
    in the reason of the plain values that do not fit."""
    df = frame(df)
    framed = F.col("_schema_id").isNotNull()
    df = df.withColumn("_plain", F.when(~framed, F.col("value")))
    problem = "value is not a JSON object matching the table schema" + (
        f" (fields of this batch's values of another type than their column: {unfit})"
        if unfit
        else ""
    )
    df, plain, plain_error, plain_note = _parse_json(df, "_plain", value_type, problem, coerce)
    df, decoded_col, failure_col, partial_col = decode_writers_onto(
        df, plans or {}, value_type, coerce=coerce
    )
    unplanned = F.format_string(
        "value is framed with writer schema id %d, which this table does not decode (a cdc "
        "table reads Debezium's plain JSON)",
        F.col("_schema_id"),
    )
    if plans:
        unplanned = F.when(~F.col("_schema_id").isin(*plans), unplanned)
    error = F.when(framed, F.coalesce(failure_col.cast("string"), unplanned)).otherwise(plain_error)
    note = F.when(error.isNull(), F.when(framed, partial_col.cast("string")).otherwise(plain_note))
    checked = df.select(
        "*",
        error.alias("_error"),
        note.alias("_note"),
        F.when(error.isNull(), F.when(framed, decoded_col.cast(value_type)).otherwise(plain)).alias(
            "_value"
        ),
    )
    kept_raw = F.col("_error").isNotNull() | F.col("_note").isNotNull()
    return (
        checked.withColumn("value_error", F.coalesce(F.col("_error"), F.col("_note")))
        .withColumn("value_raw", F.when(kept_raw, F.col("value")))
        .drop(
            "_error",
            "_note",
            "_plain",
            _plain_checked_name("_plain"),
            "_frame_error",
            *decoded_names(plans or {}),
        )
    )
