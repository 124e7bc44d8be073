"""Per-field coercion (``value.coerce``): a value field written as one type landed as another.

Producers often write numbers as text, times as epoch milliseconds or ISO 8601 text, and bytes
as base64.  A coercion names the field and the type its column has (``long``, ``double``,
``decimal(10, 2)``, ``timestamp``, ``binary``, ...): the table's column is that type (and
optional), whatever the writer schema says; each record's field is converted as it lands.  A
field that cannot be (``"n/a"`` as a number) is null in its row, and the row notes which field
and why in ``value_error``, its bytes kept in ``value_raw``: the record is not kept raw whole.

- text to a number: the text, trimmed, read as that number (a fraction or a number past the
  type's range is no long);
- a number to another: when it fits;
- text or a number to ``timestamp``: an integer as epoch milliseconds (text of digits too),
  other text as ISO 8601 (``2026-11-27T10:00:00Z``, a date alone, with or without a zone: UTC);
- text to ``binary``: base64 (padding required, as written by the usual encoders);
- anything scalar to ``string``: its text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

DECIMAL = re.compile(r"^decimal\((\d+), ?(\d+)\)$")
SIMPLE: dict[str, IcebergType] = {
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "timestamp": TimestamptzType(),
    "binary": BinaryType(),
    "string": StringType(),
    "boolean": BooleanType(),
    "date": DateType(),
}


def iceberg_type(to: str) -> IcebergType:
    found = DECIMAL.match(to)
    if found:
        return DecimalType(int(found.group(1)), int(found.group(2)))
    return SIMPLE[to]


def coerced_struct(
    struct: StructType, coerce: Mapping[str, str], path: str = "value"
) -> StructType:
    """``struct`` (a writer's value, mapped) with each coerced scalar field of the declared
    type, optional; a field the struct lacks, or that is not a scalar, is left as it is."""
    if not any(p.startswith(path + ".") for p in coerce):
        return struct
    fields = []
    for f in struct.fields:
        at = f"{path}.{f.name}"
        kind = f.field_type
        if at in coerce and kind.is_primitive:
            f = NestedField(f.field_id, f.name, iceberg_type(coerce[at]), required=False, doc=f.doc)
        elif isinstance(kind, StructType):
            f = NestedField(
                f.field_id, f.name, coerced_struct(kind, coerce, at), required=f.required, doc=f.doc
            )
        fields.append(f)
    return StructType(*fields)


# --- Spark --------------------------------------------------------------------------------------


def as_text(kind: Any, coerce: Mapping[str, str], path: str = "value") -> Any:
    """A Spark struct type with each coerced scalar field as text: how plain JSON is parsed
    before it is coerced (a JSON number or string alike)."""
    from pyspark.sql import types as T

    if not isinstance(kind, T.StructType) or not any(p.startswith(path + ".") for p in coerce):
        return kind
    fields = []
    for f in kind.fields:
        at = f"{path}.{f.name}"
        if at in coerce and not isinstance(f.dataType, (T.StructType, T.ArrayType, T.MapType)):
            f = T.StructField(f.name, T.StringType())
        elif isinstance(f.dataType, T.StructType):
            f = T.StructField(f.name, as_text(f.dataType, coerce, at))
        fields.append(f)
    return T.StructType(fields)


def convert(col: Any, source: Any, target: Any) -> Any:
    """``col`` (of Spark type ``source``) as ``target``; null where it cannot be."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(source, (T.StructType, T.ArrayType, T.MapType)):
        return F.lit(None).cast(target)
    if source == target:
        return col
    text = isinstance(source, T.StringType)
    if isinstance(target, T.TimestampType):
        if text:
            trimmed = F.trim(col)
            return F.when(
                trimmed.rlike(r"^-?[0-9]{1,18}$"), F.timestamp_millis(trimmed.try_cast("long"))
            ).otherwise(trimmed.try_cast(target))
        if isinstance(source, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
            return F.timestamp_millis(col.cast("long"))
        if isinstance(source, (T.FloatType, T.DoubleType, T.DecimalType)):
            whole = col.try_cast("long")
            return F.when(whole == col, F.timestamp_millis(whole))
        return col.try_cast(target)
    if isinstance(target, T.BinaryType):
        if text:
            return F.try_to_binary(col, F.lit("base64"))
        return (
            col.try_cast(target) if isinstance(source, T.BinaryType) else F.lit(None).cast(target)
        )
    if text:
        return F.trim(col).try_cast(target)
    numeric = (
        T.ByteType,
        T.ShortType,
        T.IntegerType,
        T.LongType,
        T.FloatType,
        T.DoubleType,
        T.DecimalType,
        T.BooleanType,
    )
    if isinstance(source, numeric) and isinstance(target, (*numeric, T.StringType)):
        return col.try_cast(target)
    return F.trim(col.cast("string")).try_cast(target)  # e.g. a date: as its text


def note(col: Any, converted: Any, field: str, to: str) -> Any:
    """Why ``col`` (a record's ``field``) became null as ``to``: null when it did not."""
    from pyspark.sql import functions as F

    shown = F.substring(col.cast("string"), 1, 64)
    return F.when(
        col.isNotNull() & converted.isNull(), F.format_string(f"{field}: '%s' is not a {to}", shown)
    )


def noted(col: Any, source: Any, target: Any, coerce: Mapping[str, str]) -> Any:
    """The row's note on the coerced fields of a value ``col`` (of Spark type ``source``,
    landing as ``target``) that could not be converted: null when all could, or none is."""
    from pyspark.sql import functions as F

    found = notes(col, source, target, coerce)
    if not found:
        return None
    joined = F.concat_ws("; ", *found)
    return F.when(
        joined != F.lit(""),
        F.concat(
            F.lit("coercion: null in the row for "),
            joined,
            F.lit(" (the full value is in value_raw)"),
        ),
    )


def notes(
    col: Any, source: Any, target: Any, coerce: Mapping[str, str], path: str = "value"
) -> list[Any]:
    """The notes of every coerced field of a value ``col`` (of Spark type ``source``, landing
    as ``target``) that could not be converted."""
    from pyspark.sql import types as T

    found: list[Any] = []
    if not isinstance(source, T.StructType) or not isinstance(target, T.StructType):
        return found
    present = {f.name: f.dataType for f in source.fields}
    for f in target.fields:
        at = f"{path}.{f.name}"
        if f.name not in present:
            continue
        inner = col.getField(f.name)
        if at in coerce:
            found.append(
                note(
                    inner,
                    convert(inner, present[f.name], f.dataType),
                    at[len("value.") :],
                    coerce[at],
                )
            )
        elif any(p.startswith(at + ".") for p in coerce):
            found.extend(notes(inner, present[f.name], f.dataType, coerce, at))
    return found
