"""Spark transforms from Kafka source rows to table rows: lineage, decoding, raw fallback.

Values in the Confluent wire format are decoded in the JVM, once per writer schema id present
in the batch: Avro with ``from_avro``, Protobuf with ``from_protobuf`` (the message-index array
after the header checked and cut per record), JSON Schema with ``from_json``.  Each is then
projected by name onto the table's current value struct (missing fields null, widened types
cast).  Plain JSON values (no header) are parsed against the table's struct directly.  A value
that cannot be decoded keeps its bytes in ``value_raw`` with the reason in ``value_error``; no
record is dropped.  A null value (tombstone) is a row with a null
value and no error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.avro.functions import from_avro

from .coercion import as_text, convert, noted
from .protobuf_decode import read as read_protobuf
from .schemas import NOTE_FIELD, OK_FIELD, Writer

HEADER_BYTES = 5  # Confluent wire format: magic byte 0, then a 4-byte big-endian schema id


@dataclass(frozen=True)
class WriterPlan:
    """How records written with one registry schema id are decoded.

    ``writer`` says how to read them when they can be decoded into the table; otherwise
    ``error`` says why they are kept raw (unknown id, breaking change, ...).
    """

    schema_id: int
    writer: Writer | None = None
    error: str | None = None
    recursive_fields: tuple[str, ...] = ()
    routes: tuple[tuple[str, str], ...] = ()  # field path -> its <name>_before_v<N> column


def _names(column: str) -> tuple[str, str]:
    """The framing columns of ``column``: its writer schema id, and why it is not framed."""
    prefix = "" if column == "value" else f"_{column}"
    return f"{prefix}_schema_id", f"{prefix}_frame_error"


def frame(df: DataFrame, column: str = "value") -> DataFrame:
    """Adds ``_schema_id`` (the framed writer schema id) and ``_frame_error`` (for the key:
    ``_key_schema_id``, ``_key_frame_error``)."""
    value = F.col(column)
    magic = F.substring(value, 1, 1)
    error = (
        F.when(value.isNull(), F.lit(None))
        .when(
            F.length(value) < HEADER_BYTES,
            F.format_string(
                f"{column} is %d bytes, shorter than the 5-byte Confluent header", F.length(value)
            ),
        )
        .when(
            magic != F.lit(bytearray(b"\x00")),
            F.concat(
                F.lit(
                    ("" if column == "value" else f"{column} ")
                    + "not in the Confluent wire format: first byte 0x"
                ),
                F.hex(magic),
                F.lit(", expected 0x00"),
            ),
        )
    )
    # A signed 32-bit big-endian integer, as the registry's own deserializers read it: ids
    # with the high bit set (``ff ff ff ff``) are negative, never a cast error that wedges
    # the batch; no registry has them, so their records are kept raw with that reason.
    unsigned = F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long")
    signed = F.when(unsigned >= F.lit(2**31), unsigned - F.lit(2**32)).otherwise(unsigned)
    schema_id = F.when(value.isNotNull() & error.isNull(), signed.cast("int"))
    id_name, error_name = _names(column)
    return df.withColumn(error_name, error).withColumn(id_name, schema_id)


def framed_ids(df: DataFrame, column: str = "value") -> list[int]:
    """The writer schema ids ``column``'s framed values carry (one pass over ``df``)."""
    name = "_schema_id" if column == "value" else "_key_schema_id"
    return sorted(
        int(r[0]) for r in frame(df, column).select(name).distinct().collect() if r[0] is not None
    )


def project(
    col: Column,
    source: T.DataType,
    target: T.DataType,
    routes: Mapping[str, str] | None = None,
    path: str = "value",
    coerce: Mapping[str, str] | None = None,
) -> Column:
    """Reshapes ``col`` of type ``source`` into ``target`` by field name, recursively.

    ``routes`` maps a field's path (``value.a.b``) to the sibling column its values go to
    instead (``b_before_v3``, where an approved change kept the field's old type); the field's
    own column is then null.  ``coerce`` (:attr:`.contract.ValueSpec.conversions`) names the
    fields converted to their column's type (null where they cannot be) rather than cast."""
    routes = routes or {}
    coerce = coerce or {}
    if source == target and not any(r.startswith(path + ".") for r in routes):
        return col
    if isinstance(source, T.StructType) and isinstance(target, T.StructType):
        present = {f.name: f.dataType for f in source.fields}
        moved = {
            column: name for name in present if (column := routes.get(f"{path}.{name}")) is not None
        }
        parts = []
        for f in target.fields:
            name = moved.get(f.name, f.name)
            if name in present and f"{path}.{name}" in coerce and f.name not in moved:
                part = convert(col.getField(name), present[name], f.dataType)
            elif name in present and (f.name in moved or f"{path}.{name}" not in routes):
                part = project(
                    col.getField(name), present[name], f.dataType, routes, f"{path}.{name}", coerce
                )
            else:
                part = F.lit(None).cast(f.dataType)
            parts.append(part.alias(f.name))
        return F.when(col.isNull(), F.lit(None).cast(target)).otherwise(F.struct(*parts))
    if isinstance(source, T.ArrayType) and isinstance(target, T.ArrayType):
        return F.transform(col, lambda x: project(x, source.elementType, target.elementType))
    if isinstance(source, T.MapType) and isinstance(target, T.MapType):
        return F.transform_values(col, lambda _, v: project(v, source.valueType, target.valueType))
    if isinstance(source, T.StructType) and isinstance(target, T.MapType):
        # a record of any shape as text by field name (a Debezium source block)
        entries = F.array(
            *[
                F.struct(
                    F.lit(f.name).alias("key"), col.getField(f.name).cast("string").alias("value")
                )
                for f in source.fields
            ]
        )
        given = F.filter(entries, lambda entry: entry.getField("value").isNotNull())
        return F.when(col.isNotNull(), F.map_from_entries(given))
    if source == T.DecimalType(20, 0) and isinstance(target, T.LongType):
        # a Protobuf uint64 (upcast by from_protobuf): the same 64 bits as a signed long
        return F.when(col > F.lit(2**63 - 1), col - F.lit(2**64)).otherwise(col).cast(target)
    return col.cast(target)


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
    df, decoded_col, failure_col, partial_col = _decode_writers_onto(
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
        .drop("_error", "_note", *_decoded_names(plans))
    )


def _decode_writers_onto(
    df: DataFrame,
    plans: Mapping[int, WriterPlan],
    target: T.StructType,
    column: str = "value",
    coerce: Mapping[str, str] | None = None,
) -> tuple[DataFrame, Column, Column, Column]:
    """Decodes ``column`` once per writer schema id (:func:`decode_writers`); returns the rows
    with those columns, the value projected onto ``target``, why it could not be decoded, and
    the note on recursive fields left out (each null where it does not apply)."""
    schema_id = F.col(_names(column)[0])
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
        name = _decoded_name(plan.schema_id, column)
        raw, ok = F.col(name), _decoded_ok(plan.writer)(F.col(name))
        value = project(raw, df.schema[name].dataType, target, dict(plan.routes), path, coerce)
        decoded = (decoded if decoded is not None else F).when(matches, value)
        notes = [raw.getField(NOTE_FIELD)] if plan.writer.format == "PROTOBUF" else []
        coerced = noted(raw, df.schema[name].dataType, target, coerce or {})
        if coerced is not None:
            notes.append(coerced)
        malformed = None
        if _checked_name(plan.schema_id, column) in df.columns:
            malformed, trailing = _checked(df, plan, column)
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
            matches & ~ok, F.lit(_failure(plan.writer, plan.schema_id, column))
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


def _checked(df: DataFrame, plan: WriterPlan, column: str) -> tuple[Column, Column]:
    """Of values read with an Avro or JSON ``plan``: why one decoded into something else than
    was written (an Avro int past 32 bits, text that is not UTF-8, a JSON number past its
    column's range), and the note on what follows the value's end.

    Bytes after a complete value are what the registry's deserializers ignore too: the value
    decodes, and its full bytes are kept in ``<column>_raw`` with the note."""
    assert plan.writer is not None
    kind = "Avro" if plan.writer.format == "AVRO" else "JSON"
    what = f"{kind} {column} of writer schema id {plan.schema_id}"
    checked = F.col(_checked_name(plan.schema_id, column))
    reasons = [checked.getField("error")]
    if kind == "JSON":
        name = _decoded_name(plan.schema_id, column)
        beyond = _beyond_range(F.col(name), df.schema[name].dataType)
        if beyond is not None:
            reasons.append(_past_range(beyond))
    malformed = F.concat(F.lit(f"{what} is malformed: "), F.coalesce(*reasons))
    trailing = checked.getField("trailing")
    if kind == "Avro":
        after = F.format_string(
            f"%d byte(s) follow the {what} and were not read; the full {column} is in {column}_raw",
            trailing,
        )
    else:
        after = F.lit(
            f"more follows the {what} and was not read; the full {column} is in {column}_raw"
        )
    return malformed, F.when(trailing > 0, after)


def _past_range(path: Column) -> Column:
    return F.when(
        path.isNotNull(), F.format_string("field %s is a number past its type's range", path)
    )


def _beyond_range(col: Column, kind: T.DataType, path: str = "") -> Column | None:
    """The path of a float or double in ``col`` that is infinite, which JSON cannot write (a
    number past its column's range reads as infinity); None when ``kind`` has neither."""
    if isinstance(kind, (T.FloatType, T.DoubleType)):
        return F.when(F.abs(col) == F.lit(float("inf")), F.lit(path or "(the value)"))
    if isinstance(kind, T.StructType):
        found = [
            part
            for f in kind.fields
            if f.name != CORRUPT
            if (
                part := _beyond_range(
                    col.getField(f.name), f.dataType, f"{path}.{f.name}" if path else f.name
                )
            )
            is not None
        ]
        return F.coalesce(*found) if found else None
    if isinstance(kind, (T.ArrayType, T.MapType)):
        array = isinstance(kind, T.ArrayType)
        element = kind.elementType if isinstance(kind, T.ArrayType) else kind.valueType
        where = f"{path}[]"
        if _beyond_range(F.lit(None), element, where) is None:  # (no float inside)
            return None

        def beyond(item: Column) -> Column:
            found = _beyond_range(item, element, where)
            assert found is not None  # a float inside, as for F.lit(None) above
            return found.isNotNull()

        return F.when(F.exists(col if array else F.map_values(col), beyond), F.lit(where))
    return None


def _failure(writer: Writer, schema_id: int, column: str) -> str:
    if writer.format == "PROTOBUF":
        return (
            f"Protobuf {column} could not be decoded as message {writer.schema} of its "
            f"writer schema id {schema_id} (truncated, corrupt, or framed as another "
            "message of the schema)"
        )
    if writer.format == "JSON":
        return (
            f"JSON {column} of writer schema id {schema_id} is not a JSON document of its "
            "schema's shape"
        )
    return (
        f"Avro {column} could not be decoded with its writer schema id {schema_id} "
        "(truncated, corrupt, or a value out of its type's range)"
    )


def _decoded_names(plans: Mapping[int, WriterPlan], column: str = "value") -> list[str]:
    """The columns :func:`decode_writers` adds for ``plans``."""
    return [
        name
        for plan in plans.values()
        if plan.writer is not None
        for name in (_decoded_name(plan.schema_id, column), _checked_name(plan.schema_id, column))
    ]


def _decoded_name(schema_id: int, column: str = "value") -> str:
    return f"_decoded_{schema_id}" if column == "value" else f"_{column}_decoded_{schema_id}"


def _checked_name(schema_id: int, column: str = "value") -> str:
    return f"_checked_{schema_id}" if column == "value" else f"_{column}_checked_{schema_id}"


def decode_writers(
    df: DataFrame, writers: Mapping[int, Writer], column: str = "value"
) -> DataFrame:
    """Adds a ``_decoded_<id>`` column per writer schema id, null for rows of other ids; a
    column already there (decoded to pick a route) is kept."""
    id_name = _names(column)[0]
    columns = []
    for schema_id, writer in writers.items():
        if _decoded_name(schema_id, column) in df.columns:
            continue
        this = F.col(id_name) == F.lit(schema_id)
        columns.append(
            F.when(this, _read(F.col(column), writer)).alias(_decoded_name(schema_id, column))
        )
        check = _check(F.col(column), writer)
        if check is not None:
            columns.append(F.when(this, check).alias(_checked_name(schema_id, column)))
    return df.select("*", *columns) if columns else df


def _check(framed: Column, writer: Writer) -> Column | None:
    """What the reader of ``writer`` lets through (:mod:`.jvm_udf`): a struct of ``error``
    and ``trailing``; None for Protobuf, whose decoder checks for itself."""
    from .jvm_udf import avro_check, json_check

    if writer.format == "AVRO":
        return avro_check(framed, writer.schema)
    if writer.format == "JSON":
        return json_check(framed, HEADER_BYTES)
    return None


def _read(framed: Column, writer: Writer) -> Column:
    """The bytes after the header read with ``writer`` (:func:`_decoded_ok` tells whether that
    succeeded)."""
    body = F.substring(framed, HEADER_BYTES + 1, 2**31 - 1)
    if writer.format == "JSON":
        corrupt = T.StructField(CORRUPT, T.StringType())
        struct = T.StructType([*T.StructType.fromJson(json.loads(writer.schema)).fields, corrupt])
        return F.from_json(body.cast("string"), struct, JSON_OPTIONS)
    if writer.format == "PROTOBUF":
        return read_protobuf(framed, writer)
    return _from_avro(body, writer.schema, cut_recursion=writer.recursive)


KEY_FIELDS, KEY_ERROR = "_key_fields", "_key_error"
# The batch's landing time (:meth:`.table_writer.TableWriter` sets it): the lineage's
# ingest_timestamp; without it, the time of the query
INGESTED = "_floe_ingested"

# Why a record is kept raw, in a few words (:data:`.contract.RAW_REASONS`): each is read off
# the start of ``value_error``, as the messages above, :mod:`.cdc` and the table writer's
# refused schemas word it.


def raw_reason(error: Column) -> Column:
    """The reason (one of :data:`RAW_REASONS`) of a row kept raw with ``value_error``."""
    return (
        F.when(error.rlike(r"^(key[ :]|(Avro|JSON|Protobuf) key )"), F.lit("key"))
        .when(error.contains("Confluent"), F.lit("not_framed"))
        .when(error.startswith("unknown schema id"), F.lit("unknown_schema"))
        .when(
            error.rlike(r"^(schema id \d+[ :]|value is framed with writer schema id)"),
            F.lit("schema_refused"),
        )
        .when(error.contains(" is malformed: "), F.lit("malformed"))
        .when(
            error.contains("could not be decoded") | error.contains("is not a JSON"),
            F.lit("undecodable"),
        )
        .when(
            error.rlike(r"^(not a Debezium|a truncate|op |a change with|a delete)"),
            F.lit("not_a_change"),
        )
        .otherwise(F.lit("other"))
    )


def decode_framed_key(
    df: DataFrame, plans: Mapping[int, WriterPlan], key_type: T.StructType
) -> DataFrame:
    """Adds ``_key_fields`` (the key, Avro or Protobuf, decoded with its writer schema,
    projected onto the table's ``key_fields`` type) and ``_key_error`` (why it could not be) to
    rows whose key is framed (``frame(df, "key")``); a null key is neither."""
    df, decoded_col, failure_col, _ = _decode_writers_onto(df, plans, key_type, "key")
    error = F.coalesce(
        F.col("_key_frame_error"), F.when(F.col("key").isNotNull(), failure_col.cast("string"))
    )
    return df.select(
        "*",
        error.alias(KEY_ERROR),
        F.when(error.isNull(), decoded_col.cast(key_type)).alias(KEY_FIELDS),
    ).drop(*_decoded_names(plans, "key"))


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


def scalar_at(column: Column, kind: T.DataType, path: str) -> Column | None:
    """The single-valued field at ``path`` (dotted) of ``column``, whose type is ``kind``;
    None when there is no such field, or it is a struct, list or map."""
    for part in path.split("."):
        if not isinstance(kind, T.StructType) or part not in kind.fieldNames():
            return None
        column, kind = column.getField(part), kind[part].dataType
    if isinstance(kind, (T.StructType, T.ArrayType, T.MapType)):
        return None
    return column


def decoded_field(df: DataFrame, schema_id: int, writer: Writer, path: str) -> Column | None:
    """The field at ``path`` (dotted) of values decoded with writer ``schema_id`` (see
    :func:`decode_writers`), as text; None when the writer's schema has no such field."""
    name = _decoded_name(schema_id)
    column = scalar_at(F.col(name), df.schema[name].dataType, path)
    if column is None:
        return None
    return F.when(_decoded_ok(writer)(F.col(name)), column.cast("string"))


CORRUPT = "__floe_corrupt"
# NaN and Infinity are not JSON numbers (RFC 8259): a record that has them is kept raw, as the
# registry's JSON deserializer refuses it
JSON_OPTIONS = {
    "mode": "PERMISSIVE",
    "columnNameOfCorruptRecord": CORRUPT,
    "allowNonNumericNumbers": "false",
}


def _decoded_ok(writer: Writer) -> Callable[[Column], Column]:
    """How to tell, from a value :func:`_read` decoded, whether decoding succeeded."""
    if writer.format == "JSON":
        return lambda decoded: decoded.isNotNull() & decoded.getField(CORRUPT).isNull()
    if writer.format == "PROTOBUF":
        return lambda decoded: F.coalesce(decoded.getField(OK_FIELD), F.lit(False))
    parsed = json.loads(writer.schema)
    if isinstance(parsed, dict) and parsed.get("type") in ("record", "error"):
        return lambda decoded: F.coalesce(decoded.getField(OK_FIELD), F.lit(False))
    return lambda decoded: decoded.isNotNull()


def _from_avro(body: Column, writer_schema: str, *, cut_recursion: bool = False) -> Column:
    """Decodes with the writer schema (:func:`_decoded_ok` tells whether it succeeded).

    In PERMISSIVE mode Spark answers a record it cannot decode with a struct of nulls, which a
    valid all-null record would also give.  Reading through a reader schema with one extra
    field, defaulted to true, tells them apart: it is null only when decoding failed.
    """
    parsed = json.loads(writer_schema)
    options = {"mode": "PERMISSIVE"}
    if cut_recursion:
        options["recursiveFieldMaxDepth"] = "1"  # Spark leaves recursive fields out
    if isinstance(parsed, dict) and parsed.get("type") in ("record", "error"):
        reader = {
            **parsed,
            "fields": [*parsed["fields"], {"name": OK_FIELD, "type": "boolean", "default": True}],
        }
        return from_avro(body, writer_schema, {**options, "avroSchema": json.dumps(reader)})
    return from_avro(body, writer_schema, options)


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
    from .jvm_udf import json_check

    df = df.select("*", json_check(F.col(column), 0).alias(_plain_checked_name(column)))
    checked = F.col(_plain_checked_name(column))
    read = as_text(struct, coerce) if coerce else struct
    with_corrupt = T.StructType([*read.fields, T.StructField(CORRUPT, T.StringType())])
    parsed = F.from_json(F.col(column).cast("string"), with_corrupt, JSON_OPTIONS)
    beyond = _beyond_range(parsed, read)
    reasons = [checked.getField("error")]
    if beyond is not None:
        reasons.append(_past_range(beyond))
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
    df, decoded_col, failure_col, partial_col = _decode_writers_onto(
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
            *_decoded_names(plans or {}),
        )
    )


# Plain JSON of a table whose value columns are inferred, none yet (decode_raw's reason)
NO_COLUMNS_YET = (
    "value is not a JSON object with a field: the table's value columns are "
    "inferred from the first one that is"
)


def decode_raw(df: DataFrame, reason: str | None = None) -> DataFrame:
    """The values' bytes in ``value_raw``; ``reason`` (why they are not decoded) on those that
    are not null."""
    error = (
        F.when(F.col("value").isNotNull(), F.lit(reason)) if reason else F.lit(None).cast("string")
    )
    return (
        df.withColumn("value_raw", F.col("value"))
        .withColumn("value_error", error)
        .withColumn("_schema_id", F.lit(None).cast("int"))
    )


def table_rows(
    df: DataFrame,
    has_value: bool,
    cdc: bool = False,
    key_fields: bool = False,
    op: str | None = None,
) -> DataFrame:
    """Selects the table's columns from decoded Kafka source rows (for ``cdc``, from rows
    made by :func:`.cdc.change_rows`, with the before image a delete is keyed by; with
    ``key_fields``, from rows whose key was decoded too: a record whose key could not be is
    kept raw, the key's reason in ``value_error``; ``op``: the column of each record's operation,
    kept for the upsert, :func:`.upsert.operation_rows`)."""
    if key_fields:
        bad_key = F.col(KEY_ERROR).isNotNull()
        df = df.withColumn(
            "value_error", F.coalesce(F.col("value_error"), F.col(KEY_ERROR))
        ).withColumn("value_raw", F.when(bad_key, F.col("value")).otherwise(F.col("value_raw")))
        for name in ("_value", "_cdc", "_floe_before", op):
            if name in df.columns:
                df = df.withColumn(name, F.when(~bad_key, F.col(name)))
    kafka = F.struct(
        F.col("topic").alias("topic"),
        F.col("partition").alias("partition"),
        F.col("offset").alias("offset"),
        F.col("timestamp").alias("timestamp"),
        F.col("timestampType").alias("timestamp_type"),
        F.col("headers").alias("headers"),
        F.col("_schema_id").alias("schema_id"),
        (F.col(INGESTED) if INGESTED in df.columns else F.current_timestamp()).alias(
            "ingest_timestamp"
        ),
    )
    columns = [kafka.alias("kafka")]
    if cdc:
        columns.append(F.col("_cdc").alias("cdc"))
    columns.append(F.col("key"))
    if key_fields:
        columns.append(F.col(KEY_FIELDS).alias("key_fields"))
    if has_value:
        columns.append(F.col("_value").alias("value"))
    columns += [F.col("value_raw"), F.col("value_error")]
    if cdc:
        columns.append(F.col("_floe_before"))
    if op:
        columns.append(F.col(op))
    return df.select(*columns)
