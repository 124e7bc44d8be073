"""Framed values read with their writer schema, a column per writer schema id of the batch
(Avro with ``from_avro``, Protobuf with ``from_protobuf``, JSON Schema with ``from_json``), and
what the JVM's check of each reader lets through."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.avro.functions import from_avro

from ..protobuf_decode import read as read_protobuf
from ..schemas import OK_FIELD, Writer
from .framing import HEADER_BYTES, framing_columns
from .projection import scalar_at


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


CORRUPT = "__floe_corrupt"
# NaN and Infinity are not JSON numbers (RFC 8259): a record that has them is kept raw, as the
# registry's JSON deserializer refuses it
JSON_OPTIONS = {
    "mode": "PERMISSIVE",
    "columnNameOfCorruptRecord": CORRUPT,
    "allowNonNumericNumbers": "false",
}


def decoded_names(plans: Mapping[int, WriterPlan], column: str = "value") -> list[str]:
    """The columns :func:`decode_writers` adds for ``plans``."""
    return [
        name
        for plan in plans.values()
        if plan.writer is not None
        for name in (decoded_name(plan.schema_id, column), checked_name(plan.schema_id, column))
    ]


def decoded_name(schema_id: int, column: str = "value") -> str:
    return f"_decoded_{schema_id}" if column == "value" else f"_{column}_decoded_{schema_id}"


def checked_name(schema_id: int, column: str = "value") -> str:
    return f"_checked_{schema_id}" if column == "value" else f"_{column}_checked_{schema_id}"


def decode_writers(
    df: DataFrame, writers: Mapping[int, Writer], column: str = "value"
) -> DataFrame:
    """Adds a ``_decoded_<id>`` column per writer schema id, null for rows of other ids; a
    column already there (decoded to pick a route) is kept."""
    id_name = framing_columns(column)[0]
    columns = []
    for schema_id, writer in writers.items():
        if decoded_name(schema_id, column) in df.columns:
            continue
        this = F.col(id_name) == F.lit(schema_id)
        columns.append(
            F.when(this, _read(F.col(column), writer)).alias(decoded_name(schema_id, column))
        )
        check = _check(F.col(column), writer)
        if check is not None:
            columns.append(F.when(this, check).alias(checked_name(schema_id, column)))
    return df.select("*", *columns) if columns else df


def _check(framed: Column, writer: Writer) -> Column | None:
    """What the reader of ``writer`` lets through (:mod:`.jvm_udf`): a struct of ``error``
    and ``trailing``; None for Protobuf, whose decoder checks for itself."""
    from ..jvm_udf import avro_check, json_check

    if writer.format == "AVRO":
        return avro_check(framed, writer.schema)
    if writer.format == "JSON":
        return json_check(framed, HEADER_BYTES)
    return None


def _read(framed: Column, writer: Writer) -> Column:
    """The bytes after the header read with ``writer`` (:func:`decoded_ok` tells whether that
    succeeded)."""
    body = F.substring(framed, HEADER_BYTES + 1, 2**31 - 1)
    if writer.format == "JSON":
        corrupt = T.StructField(CORRUPT, T.StringType())
        struct = T.StructType([*T.StructType.fromJson(json.loads(writer.schema)).fields, corrupt])
        return F.from_json(body.cast("string"), struct, JSON_OPTIONS)
    if writer.format == "PROTOBUF":
        return read_protobuf(framed, writer)
    return _from_avro(body, writer.schema, cut_recursion=writer.recursive)


def decoded_field(df: DataFrame, schema_id: int, writer: Writer, path: str) -> Column | None:
    """The field at ``path`` (dotted) of values decoded with writer ``schema_id`` (see
    :func:`decode_writers`), as text; None when the writer's schema has no such field."""
    name = decoded_name(schema_id)
    column = scalar_at(F.col(name), df.schema[name].dataType, path)
    if column is None:
        return None
    return F.when(decoded_ok(writer)(F.col(name)), column.cast("string"))


def decoded_ok(writer: Writer) -> Callable[[Column], Column]:
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
    """Decodes with the writer schema (:func:`decoded_ok` tells whether it succeeded).

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
