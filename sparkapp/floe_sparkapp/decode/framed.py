"""Framed values and keys (Avro, Protobuf, JSON Schema) decoded with their writer schema,
projected onto the table's type and checked: ``value``, ``value_raw`` and ``value_error``, or a
key's ``_key_fields`` and ``_key_error``."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..coercion import noted
from ..schemas import NOTE_FIELD
from .checks import checked_reasons, failure_reason
from .framing import framing_columns
from .projection import project
from .rows import KEY_ERROR, KEY_FIELDS
from .writers import (
    WriterPlan,
    checked_name,
    decode_writers,
    decoded_name,
    decoded_names,
    decoded_ok,
)


def decode_framed(
    df: DataFrame,
    plans: Mapping[int, WriterPlan],
    value_type: T.StructType,
    coerce: Mapping[str, str] | None = None,
) -> DataFrame:
    """Adds ``value``, ``value_raw`` and ``value_error`` to rows framed in the Confluent wire
    format (see :func:`frame`): Avro or Protobuf values.

    Each value is decoded once: first into a column per writer schema id (null for rows of
    other ids), and only then projected onto the table type and checked, in a projection of
    its own.  Spark does not collapse the two, since the decoded column is used many times and
    decoding is not cheap; written as one expression, every field read and every check would
    decode the value again (conditional branches escape common-subexpression elimination).
    ``coerce``: the fields converted to their column's type (:mod:`.coercion`).
    """
    df, decoded_col, failure_col, partial_col = decode_writers_onto(
        df, plans, value_type, coerce=coerce
    )
    error = F.coalesce(
        F.col("_frame_error"), F.when(F.col("value").isNotNull(), failure_col.cast("string"))
    )
    note = F.when(error.isNull() & F.col("value").isNotNull(), partial_col.cast("string"))
    checked = df.select(
        "*",
        error.alias("_error"),
        note.alias("_note"),
        F.when(error.isNull(), decoded_col.cast(value_type)).alias("_value"),
    )
    kept_raw = F.col("_error").isNotNull() | F.col("_note").isNotNull()
    return (
        checked.withColumn("value_error", F.coalesce(F.col("_error"), F.col("_note")))
        .withColumn("value_raw", F.when(kept_raw, F.col("value")))
        .drop("_error", "_note", *decoded_names(plans))
    )


def decode_writers_onto(
    df: DataFrame,
    plans: Mapping[int, WriterPlan],
    target: T.StructType,
    column: str = "value",
    coerce: Mapping[str, str] | None = None,
) -> tuple[DataFrame, Column, Column, Column]:
    """Decodes ``column`` once per writer schema id (:func:`decode_writers`); returns the rows
    with those columns, the value projected onto ``target``, why it could not be decoded, and
    the note on recursive fields left out (each null where it does not apply)."""
    schema_id = F.col(framing_columns(column)[0])
    df = decode_writers(
        df,
        {plan.schema_id: plan.writer for plan in plans.values() if plan.writer is not None},
        column,
    )
    path = "value" if column == "value" else "key_fields"  # the table column's name
    refused = "" if column == "value" else f"{column}: "
    decoded = failure = partial = None
    for plan in plans.values():
        matches = schema_id == F.lit(plan.schema_id)
        if plan.writer is None:
            failure = (failure if failure is not None else F).when(
                matches, F.lit(f"{refused}{plan.error}")
            )
            continue
        name = decoded_name(plan.schema_id, column)
        raw, ok = F.col(name), decoded_ok(plan.writer)(F.col(name))
        value = project(raw, df.schema[name].dataType, target, dict(plan.routes), path, coerce)
        decoded = (decoded if decoded is not None else F).when(matches, value)
        notes = [raw.getField(NOTE_FIELD)] if plan.writer.format == "PROTOBUF" else []
        coerced = noted(raw, df.schema[name].dataType, target, coerce or {})
        if coerced is not None:
            notes.append(coerced)
        malformed = None
        if checked_name(plan.schema_id, column) in df.columns:
            malformed, trailing = checked_reasons(df, plan, column)
            notes.append(trailing)
        if plan.recursive_fields:  # (Protobuf's note: fields the writer schema does not know)
            notes.append(
                F.lit(
                    f"recursive field(s) {', '.join(plan.recursive_fields)} of writer schema id "
                    f"{plan.schema_id} are not columns; the full {column} is in {column}_raw"
                )
            )
        if notes:
            partial = (partial if partial is not None else F).when(matches & ok, F.coalesce(*notes))
        failure = (failure if failure is not None else F).when(
            matches & ~ok, F.lit(failure_reason(plan.writer, plan.schema_id, column))
        )
        if malformed is not None:
            failure = failure.when(matches & malformed.isNotNull(), malformed)
    none = F.lit(None)
    return (
        df,
        decoded if decoded is not None else none,
        failure if failure is not None else none,
        partial if partial is not None else none,
    )


def decode_framed_key(
    df: DataFrame, plans: Mapping[int, WriterPlan], key_type: T.StructType
) -> DataFrame:
    """Adds ``_key_fields`` (the key, Avro or Protobuf, decoded with its writer schema,
    projected onto the table's ``key_fields`` type) and ``_key_error`` (why it could not be) to
    rows whose key is framed (``frame(df, "key")``); a null key is neither."""
    df, decoded_col, failure_col, _ = decode_writers_onto(df, plans, key_type, "key")
    error = F.coalesce(
        F.col("_key_frame_error"), F.when(F.col("key").isNotNull(), failure_col.cast("string"))
    )
    return df.select(
        "*",
        error.alias(KEY_ERROR),
        F.when(error.isNull(), decoded_col.cast(key_type)).alias(KEY_FIELDS),
    ).drop(*decoded_names(plans, "key"))
