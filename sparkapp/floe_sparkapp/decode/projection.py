"""A decoded value reshaped onto the table's type by field name, and the single-valued field
at a path of one."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..coercion import convert


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
