"""Plain JSON without a schema registry (``value.format: json`` with ``value.columns`` and/or
``value.inferSchema``).

Declared columns make the table's value struct, each a field converted as ``value.coerce``
converts (:mod:`.coercion`).  With ``inferSchema``, each batch's JSON objects are read for
their fields (Spark's JSON schema inference: integers as ``long``, other numbers as
``double``, objects as structs, arrays as lists, a field of several types as ``string``); the
fields the table lacks are added (a table made before any record has no ``value`` column until
then), field ids kept as they are.  A field whose inferred type differs from its column's is not
changed: records whose value does not fit are kept raw, the reason naming the field.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.types import (
    BooleanType,
    DoubleType,
    IcebergType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
)

from .coercion import coerced_struct, iceberg_type
from .evolution import EvolutionPlan, _keep_wider, _union_value, plan_evolution, value_struct


def declared_struct(columns: Any) -> StructType | None:
    """``value.columns`` as the value struct (every field optional; a dotted name is a field of
    a nested struct); None when there are none."""
    if not columns:
        return None
    tree: dict[str, Any] = {}
    for column in columns:
        *parents, leaf = column.name.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = iceberg_type(column.type)
    ids = iter(range(1, 10_000))

    def build(node: dict[str, Any]) -> StructType:
        return StructType(
            *[
                NestedField(
                    next(ids), name, build(kind) if isinstance(kind, dict) else kind, required=False
                )
                for name, kind in node.items()
            ]
        )

    return build(tree)


def configured_value(value: Any) -> StructType | None:
    """The value struct a registry-less JSON spec (``value``, its ValueSpec) makes the table
    with: its declared columns, as ``coerce`` types them; None without any."""
    declared = declared_struct(value.columns)
    return coerced_struct(declared, value.conversions) if declared is not None else None


# --- inference ----------------------------------------------------------------------------------


def infer(values: Any) -> StructType:
    """The fields of a DataFrame of JSON texts (one column), as an Iceberg struct (optional
    fields; objects with no fields left out): one pass over them."""
    from .jvm_udf import java

    spark = values.sparkSession
    reader = (
        spark._jsparkSession.read()
        .option("mode", "DROPMALFORMED")
        .option("allowNonNumericNumbers", "false")
    )
    texts = getattr(values._jdf, "as")(java("org.apache.spark.sql.Encoders", spark._jvm).STRING())
    inferred = reader.json(texts)
    from pyspark.sql import types as T

    kind = T._parse_datatype_json_string(inferred.schema().json())
    ids = iter(range(1, 1_000_000))
    found = _iceberg(kind, ids) or StructType()
    assert isinstance(found, StructType)  # a DataFrame's schema is a struct
    return found


def _iceberg(kind: Any, ids: Any) -> IcebergType | None:
    from pyspark.sql import types as T

    if isinstance(kind, T.StructType):
        fields = [
            (f.name, _iceberg(f.dataType, ids)) for f in kind.fields if f.name != "_corrupt_record"
        ]
        kept = [
            NestedField(next(ids), name, found, required=False)
            for name, found in fields
            if found is not None
        ]
        return StructType(*kept) if kept else None
    if isinstance(kind, T.ArrayType):
        element = _iceberg(kind.elementType, ids)
        return ListType(next(ids), element, element_required=False) if element else None
    if isinstance(kind, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        return LongType()
    if isinstance(kind, (T.DoubleType, T.FloatType, T.DecimalType)):
        return DoubleType()
    if isinstance(kind, T.BooleanType):
        return BooleanType()
    return StringType()  # strings, and fields only ever null


def evolve_inferred(
    table: Any, inferred: StructType, coerce: dict[str, str], apply: bool = True
) -> EvolutionPlan:
    """Adds the fields of ``inferred`` the table's value lacks (the value column itself when
    the table has none); a field of another type keeps its column (the plan's ``incompatible``
    changes say which).  Declared and coerced fields keep their declared type.  Without
    ``apply`` (a look that changes nothing), only the plan."""
    inferred = coerced_struct(inferred, coerce)
    current = value_struct(table)
    plan = plan_evolution(current or StructType(), inferred, route=current is not None)
    if apply and plan.needs_update:
        _union_value(table, _keep_wider(current, inferred) if current is not None else inferred)
        table.refresh()
    return plan


def conflicts(plan: EvolutionPlan) -> str | None:
    """The fields whose inferred type the table's columns do not take, in words."""
    found = [str(c) for c in plan.changes if c.kind == "incompatible"]
    return "; ".join(found) if found else None
