"""JSON Schemas from the registry mapped to Iceberg types.

A value written with Confluent's JSON Schema serializer is the 5-byte header and the JSON text;
it is parsed with Spark's ``from_json`` against the type mapped here from its writer schema:

=========================================  ============================================
JSON Schema                                Iceberg
=========================================  ============================================
boolean, integer, number                   boolean, long, double
string                                     string
string, format date-time                   timestamptz
string, format date                        date
object with properties                     struct (every field optional)
object without properties, whose           map<string, V>
additionalProperties is a schema V
array with items T                         list<T>
["T", "null"], oneOf/anyOf [T, null]       T
allOf of objects                           one struct of all their properties
enum, const                                string
several non-null types or branches, an     string: the value's JSON text
object with no declared shape, {} / true
$ref (#/definitions, #/$defs, or another   the referenced schema; a reference back to a
subject's schema by its reference name)    schema being expanded (recursion) is no column,
                                           such values keep their text in value_raw
=========================================  ============================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from .avro_types import MappedValue, SchemaMappingError

_PRIMITIVES: dict[str, IcebergType] = {
    "boolean": BooleanType(),
    "integer": LongType(),
    "number": DoubleType(),
    "string": StringType(),
    "null": StringType(),
}
_FORMATS: dict[str, IcebergType] = {"date-time": TimestamptzType(), "date": DateType()}


@dataclass
class _Mapper:
    documents: dict[str, Any]  # the writer schema ("") and the schemas it references, by name
    next_id: int = 1
    recursive_fields: list[str] = field(default_factory=list)

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def resolve(self, ref: str, document: str) -> tuple[Any, str]:
        """The schema a ``$ref`` points at, and the document it is in."""
        name, _, pointer = ref.partition("#")
        document = name or document
        if document not in self.documents:
            raise SchemaMappingError(f"$ref {ref!r}: no referenced schema named {document!r}")
        target = self.documents[document]
        for part in [p for p in pointer.split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise SchemaMappingError(f"$ref {ref!r} points at nothing")
            target = target[part]
        return target, document

    def map(
        self, schema: Any, where: str, document: str, expanding: tuple[str, ...]
    ) -> IcebergType | None:
        """The Iceberg type of ``schema``; None for a recursive reference (no column)."""
        if schema is True or schema == {} or schema is None:
            return StringType()
        if not isinstance(schema, dict):
            raise SchemaMappingError(f"{where or 'the schema'} is not a JSON Schema")
        if "$ref" in schema:
            target, in_document = self.resolve(schema["$ref"], document)
            key = f"{in_document}#{schema['$ref'].partition('#')[2]}"
            if key in expanding:
                self.recursive_fields.append(where)
                return None
            return self.map(target, where, in_document, (*expanding, key))
        branches = schema.get("oneOf") or schema.get("anyOf")
        if branches:
            real = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
            if len(real) == 1:
                return self.map(real[0], where, document, expanding)
            return StringType()
        if schema.get("allOf"):
            merged: dict[str, Any] = {"type": "object", "properties": {}}
            for part in schema["allOf"]:
                if isinstance(part, dict) and "$ref" in part:
                    part, _ = self.resolve(part["$ref"], document)
                if isinstance(part, dict):
                    merged["properties"].update(part.get("properties", {}))
            return self.map(merged, where, document, expanding)
        kind = schema.get("type")
        if isinstance(kind, list):
            real = [k for k in kind if k != "null"]
            if len(real) != 1:
                return StringType()
            kind = real[0]
        if kind is None:
            if "properties" in schema:
                kind = "object"
            elif "items" in schema:
                kind = "array"
            else:
                return StringType()  # enum, const, or any value: its JSON text
        if kind == "object":
            return self.object(schema, where, document, expanding)
        if kind == "array":
            element_id = self.new_id()
            items = schema.get("items", True)
            if isinstance(items, list):  # a tuple: its items have no one type
                items = True
            element = self.map(items, f"{where}.element", document, expanding)
            if element is None:
                return None
            return ListType(element_id, element, element_required=False)
        if kind == "string" and schema.get("format") in _FORMATS:
            return _FORMATS[schema["format"]]
        if kind not in _PRIMITIVES:
            raise SchemaMappingError(
                f"{where or 'the schema'} has type {kind!r}, which JSON Schema does not define"
            )
        return _PRIMITIVES[kind]

    def object(
        self, schema: dict[str, Any], where: str, document: str, expanding: tuple[str, ...]
    ) -> IcebergType | None:
        properties = schema.get("properties")
        if not properties:
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                key_id, value_id = self.new_id(), self.new_id()
                value = self.map(extra, f"{where}.value", document, expanding)
                if value is None:
                    return None
                return MapType(key_id, StringType(), value_id, value, value_required=False)
            return StringType()
        fields = []
        for name, sub in properties.items():
            field_id = self.new_id()
            kind = self.map(sub, f"{where}.{name}" if where else name, document, expanding)
            if kind is not None:
                fields.append(NestedField(field_id, name, kind, required=False))
        return StructType(*fields)


def json_schema_to_iceberg(
    schema: str | dict[str, Any], references: tuple[tuple[str, str], ...] = (), first_id: int = 1
) -> MappedValue:
    """Maps a JSON Schema (and the schemas it references, by reference name) to the Iceberg
    struct of the ``value`` column; a schema that is not an object is one field, ``value``."""
    try:
        documents = {"": json.loads(schema) if isinstance(schema, str) else schema}
        documents.update({name: json.loads(text) for name, text in references})
    except json.JSONDecodeError as error:
        raise SchemaMappingError(f"the JSON Schema is not JSON: {error}") from None
    mapper = _Mapper(documents, next_id=first_id)
    top = mapper.map(documents[""], "", "", ("#",))
    if not isinstance(top, StructType):
        field_id = mapper.new_id()
        top = StructType(NestedField(field_id, "value", top or StringType(), required=False))
    return MappedValue(top, tuple(mapper.recursive_fields), mapper.next_id - 1)


def spark_type(kind: IcebergType) -> Any:
    """The Spark type of a value of Iceberg type ``kind`` (the types the JSON Schema and
    Protobuf mappings give), as ``from_json`` or the Protobuf decoder makes it."""
    from pyspark.sql import types as T

    if isinstance(kind, StructType):
        return T.StructType([T.StructField(f.name, spark_type(f.field_type)) for f in kind.fields])
    if isinstance(kind, ListType):
        return T.ArrayType(spark_type(kind.element_type))
    if isinstance(kind, MapType):
        return T.MapType(spark_type(kind.key_type), spark_type(kind.value_type))
    simple: dict[IcebergType, Any] = {
        BooleanType(): T.BooleanType(),
        IntegerType(): T.IntegerType(),
        LongType(): T.LongType(),
        FloatType(): T.FloatType(),
        DoubleType(): T.DoubleType(),
        StringType(): T.StringType(),
        BinaryType(): T.BinaryType(),
        TimestamptzType(): T.TimestampType(),
        DateType(): T.DateType(),
    }
    return simple[kind]
