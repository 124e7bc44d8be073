"""Why a framed value is kept raw: it decoded into something else than was written (an Avro
int past 32 bits, text that is not UTF-8, a JSON number past its column's range), or its writer
could not decode it; and the note on what follows its end."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..schemas import Writer
from .writers import CORRUPT, WriterPlan, checked_name, decoded_name


def checked_reasons(df: DataFrame, plan: WriterPlan, column: str) -> tuple[Column, Column]:
    """Of values read with an Avro or JSON ``plan``: why one decoded into something else than
    was written (an Avro int past 32 bits, text that is not UTF-8, a JSON number past its
    column's range), and the note on what follows the value's end.

    Bytes after a complete value are what the registry's deserializers ignore too: the value
    decodes, and its full bytes are kept in ``<column>_raw`` with the note."""
    assert plan.writer is not None
    kind = "Avro" if plan.writer.format == "AVRO" else "JSON"
    what = f"{kind} {column} of writer schema id {plan.schema_id}"
    checked = F.col(checked_name(plan.schema_id, column))
    reasons = [checked.getField("error")]
    if kind == "JSON":
        name = decoded_name(plan.schema_id, column)
        beyond = beyond_range(F.col(name), df.schema[name].dataType)
        if beyond is not None:
            reasons.append(past_range(beyond))
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


def past_range(path: Column) -> Column:
    return F.when(
        path.isNotNull(), F.format_string("field %s is a number past its type's range", path)
    )


def beyond_range(col: Column, kind: T.DataType, path: str = "") -> Column | None:
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
                part := beyond_range(
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
        if beyond_range(F.lit(None), element, where) is None:  # (no float inside)
            return None

        def beyond(item: Column) -> Column:
            found = beyond_range(item, element, where)
            assert found is not None  # a float inside, as for F.lit(None) above
            return found.isNotNull()

        return F.when(F.exists(col if array else F.map_values(col), beyond), F.lit(where))
    return None


def failure_reason(writer: Writer, schema_id: int, column: str) -> str:
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
