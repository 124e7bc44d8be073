"""Avro schemas mapped to Iceberg types, the way the table's ``value`` column is built.

Every value field is optional in the table, whatever the Avro schema says: a later schema
version may drop a field (Avro's backward compatibility allows it), and a record that cannot be
decoded leaves ``value`` null.  The mapping follows Spark's ``from_avro`` so the table and the
decoded rows agree:

========================================  =========================================
Avro                                      Iceberg
========================================  =========================================
null (alone)                              string, always null
boolean, int, long, float, double         boolean, int, long, float, double
string, bytes                             string, binary
enum                                      string (the symbol)
fixed(n)                                  fixed(n)
decimal(p, s) on bytes or fixed           decimal(p, s); p > 38 cannot be mapped
date                                      date
time-millis                               int (milliseconds since midnight)
time-micros                               long (microseconds since midnight)
timestamp-millis, timestamp-micros        timestamptz
local-timestamp-millis/-micros            timestamp (without zone)
uuid on string or fixed(16)               uuid
record                                    struct
array                                     list
map                                       map<string, V>
[null, T]                                 T (optional)
[A, B, ...] (several non-null branches)   struct<member0: A, member1: B, ...>
a field that refers back to an enclosing  no column: such values keep their bytes in
record (recursion)                        value_raw, the rest of the record is decoded
========================================  =========================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

PRIMITIVES: dict[str, IcebergType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "bytes": BinaryType(),
    "null": StringType(),
}


class _Recursive(Exception):
    """Raised while mapping a type that refers back to a record being expanded."""


class SchemaMappingError(ValueError):
    """A writer schema (of any format) that has no Iceberg counterpart; the message says why."""


class AvroMappingError(SchemaMappingError):
    """An Avro schema that has no Iceberg counterpart; the message names the field."""


@dataclass
class _Mapper:
    next_id: int = 1
    named: dict[str, Any] = field(default_factory=dict)  # full name -> Avro definition
    path: list[str] = field(default_factory=list)  # record full names being expanded
    recursive_fields: list[str] = field(default_factory=list)

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def map(self, schema: Any, where: str, namespace: str | None) -> IcebergType:
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return PRIMITIVES[schema]
            full = schema if "." in schema or namespace is None else f"{namespace}.{schema}"
            definition = self.named.get(full) or self.named.get(schema)
            if definition is None:
                raise AvroMappingError(f"{where}: unknown Avro type {schema!r}")
            if definition["type"] == "record" and _full_name(definition, namespace) in self.path:
                raise _Recursive(where)
            return self.map(definition, where, namespace)
        if isinstance(schema, list):
            return self.union(schema, where, namespace)
        if not isinstance(schema, dict) or "type" not in schema:
            raise AvroMappingError(f"{where}: not an Avro schema: {json.dumps(schema)[:200]}")

        kind = schema["type"]
        logical = schema.get("logicalType")
        if logical is not None:
            mapped = self.logical(schema, logical, where)
            if mapped is not None:
                return mapped
        if kind == "record" or kind == "error":
            return self.record(schema, where, namespace)
        if kind == "enum":
            self.named[_full_name(schema, namespace)] = schema
            return StringType()
        if kind == "fixed":
            self.named[_full_name(schema, namespace)] = schema
            return FixedType(int(schema["size"]))
        if kind == "array":
            element = self.map(schema["items"], f"{where}[]", namespace)
            return ListType(self.new_id(), element, element_required=False)
        if kind == "map":
            key_id = self.new_id()
            value = self.map(schema["values"], f"{where}{{}}", namespace)
            return MapType(key_id, StringType(), self.new_id(), value, value_required=False)
        if isinstance(kind, (str, list, dict)) and kind not in ("record", "enum", "fixed"):
            # {"type": "string"} and friends: a primitive or a reference wrapped in an object.
            return self.map(kind, where, namespace)
        raise AvroMappingError(f"{where}: unsupported Avro type {kind!r}")

    def logical(self, schema: dict[str, Any], logical: str, where: str) -> IcebergType | None:
        base = schema["type"]
        if logical == "decimal" and base in ("bytes", "fixed"):
            precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
            if precision > 38:
                raise AvroMappingError(
                    f"{where}: decimal({precision}, {scale}) is wider than Iceberg's maximum "
                    "precision 38"
                )
            return DecimalType(precision, scale)
        if logical == "date" and base == "int":
            return DateType()
        if logical == "time-millis" and base == "int":
            return IntegerType()
        if logical == "time-micros" and base == "long":
            return LongType()
        if logical in ("timestamp-millis", "timestamp-micros"):
            return TimestamptzType()
        if logical in ("local-timestamp-millis", "local-timestamp-micros"):
            return TimestampType()
        if logical == "uuid" and (
            base == "string" or (base == "fixed" and schema.get("size") == 16)
        ):
            return UUIDType()
        return None  # unknown logical types fall back to their underlying type, as Avro says

    def union(self, branches: list[Any], where: str, namespace: str | None) -> IcebergType:
        others = [b for b in branches if b != "null" and b != {"type": "null"}]
        if not others:
            return StringType()
        if len(others) == 1:
            return self.map(others[0], where, namespace)
        fields = [
            NestedField(
                self.new_id(),
                f"member{i}",
                self.map(branch, f"{where}.member{i}", namespace),
                required=False,
            )
            for i, branch in enumerate(others)
        ]
        return StructType(*fields)

    def record(self, schema: dict[str, Any], where: str, namespace: str | None) -> StructType:
        full = _full_name(schema, namespace)
        self.named[full] = schema
        own_namespace = full.rsplit(".", 1)[0] if "." in full else None
        self.path.append(full)
        try:
            ids = [self.new_id() for _ in schema.get("fields", [])]
            fields = []
            for field_id, avro_field in zip(ids, schema.get("fields", [])):
                name = avro_field["name"]
                child = f"{where}.{name}" if where else name
                try:
                    mapped = self.map(avro_field["type"], child, own_namespace)
                except _Recursive:
                    self.recursive_fields.append(child)
                    continue
                fields.append(
                    NestedField(field_id, name, mapped, required=False, doc=avro_field.get("doc"))
                )
            return StructType(*fields)
        finally:
            self.path.pop()


def _full_name(schema: dict[str, Any], namespace: str | None) -> str:
    name: str = schema["name"]
    if "." in name:
        return name
    space = schema.get("namespace", namespace)
    return f"{space}.{name}" if space else name


@dataclass(frozen=True)
class MappedValue:
    """The Iceberg struct for a value schema, and the recursive fields left out of it."""

    struct: StructType
    recursive_fields: tuple[str, ...]
    last_field_id: int


def avro_to_iceberg(schema: str | dict[str, Any] | list[Any], first_id: int = 1) -> MappedValue:
    """Maps an Avro schema (JSON text or parsed) to the Iceberg struct of the ``value`` column.

    A top-level schema that is not a record becomes a struct with one field, ``value``.
    Field ids start at ``first_id``; creating the table assigns fresh ids anyway.
    """
    parsed = json.loads(schema) if isinstance(schema, str) else schema
    mapper = _Mapper(next_id=first_id)
    top = parsed if isinstance(parsed, dict) else None
    if top is not None and top.get("type") in ("record", "error"):
        struct = mapper.record(top, "", None)
    else:
        field_id = mapper.new_id()
        struct = StructType(
            NestedField(field_id, "value", mapper.map(parsed, "value", None), required=False)
        )
    return MappedValue(struct, tuple(mapper.recursive_fields), mapper.next_id - 1)
