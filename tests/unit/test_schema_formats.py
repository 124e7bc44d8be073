"""Protobuf and JSON Schema writer schemas mapped to the Iceberg struct of the value column,
and how a Protobuf record names its message."""

from __future__ import annotations

import json

import pytest
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestamptzType,
)

from floe_sparkapp.avro_types import SchemaMappingError
from floe_sparkapp.json_schema_types import json_schema_to_iceberg
from floe_sparkapp.protobuf_types import (
    ProtobufCompileError,
    compile_schema,
    message_of,
    protobuf_to_iceberg,
)

pytestmark = pytest.mark.unit


def types(struct: StructType) -> dict[str, object]:
    return {f.name: f.field_type for f in struct.fields}


SCALARS = """syntax = "proto3";
package t.v1;
import "google/protobuf/timestamp.proto";
import "t/common.proto";
message All {
  enum Kind { A = 0; B = 1; }
  message Inner { string s = 1; All again = 2; }
  double d = 1; float f = 2; int32 i32 = 3; int64 i64 = 4; uint32 u32 = 5; uint64 u64 = 6;
  sint32 s32 = 7; sint64 s64 = 8; fixed32 f32 = 9; fixed64 f64 = 10; sfixed32 sf32 = 11;
  sfixed64 sf64 = 12; bool b = 13; string s = 14; bytes raw = 15; Kind kind = 16;
  repeated string names = 17; map<string, Inner> inners = 18;
  google.protobuf.Timestamp at = 19; t.common.Money price = 20; All self = 21;
  oneof choice { string left = 22; int64 right = 23; }
}
message Second { string x = 1; message Deep { int32 y = 1; } }
"""
COMMON = 'syntax = "proto3";\npackage t.common;\nmessage Money { string currency = 1; }\n'


def test_protobuf_types_follow_the_documented_mapping():
    descriptor = compile_schema(SCALARS, (("t/common.proto", COMMON),))
    mapped = protobuf_to_iceberg(descriptor, "t.v1.All")
    got = types(mapped.struct)
    assert [
        got[n]
        for n in (
            "d",
            "f",
            "i32",
            "i64",
            "u32",
            "u64",
            "s32",
            "s64",
            "f32",
            "f64",
            "sf32",
            "sf64",
            "b",
            "s",
            "raw",
            "kind",
        )
    ] == [
        DoubleType(),
        FloatType(),
        IntegerType(),
        LongType(),
        LongType(),
        LongType(),
        IntegerType(),
        LongType(),
        LongType(),
        LongType(),
        IntegerType(),
        LongType(),
        BooleanType(),
        StringType(),
        BinaryType(),
        StringType(),
    ]
    assert isinstance(got["names"], ListType) and got["names"].element_type == StringType()
    assert isinstance(got["inners"], MapType) and got["inners"].key_type == StringType()
    assert types(got["inners"].value_type) == {"s": StringType()}  # Inner.again: recursive
    assert got["at"] == TimestamptzType()
    assert types(got["price"]) == {"currency": StringType()}
    assert "self" not in got and got["left"] == StringType() and got["right"] == LongType()
    assert mapped.recursive_fields == ("inners.value.again", "self")
    assert all(not f.required for f in mapped.struct.fields)


def test_a_protobuf_records_message_index_names_its_message():
    descriptor = compile_schema(SCALARS, (("t/common.proto", COMMON),))
    first = message_of(descriptor)
    assert (first.name, first.indexes) == ("t.v1.All", (b"\x00", b"\x02\x00"))
    deep = message_of(descriptor, "t.v1.Second.Deep")  # [1, 0]: count 2, then 1 and 0
    assert deep.indexes == (b"\x04\x02\x00",)
    with pytest.raises(SchemaMappingError, match=r"has no message t.v1.Missing; it has t.v1.All"):
        message_of(descriptor, "t.v1.Missing")


def test_a_protobuf_schema_protoc_refuses_is_reported_with_protocs_reason():
    with pytest.raises(
        ProtobufCompileError,
        match=r"protoc cannot compile the schema: .*"
        r"t/missing.proto",
    ):
        compile_schema('syntax = "proto3";\nimport "t/missing.proto";\nmessage M { int32 a = 1; }')


def test_protobuf_durations_are_refused_by_name():
    schema = (
        'syntax = "proto3";\nimport "google/protobuf/duration.proto";\n'
        "message M { google.protobuf.Duration took = 1; }"
    )
    with pytest.raises(SchemaMappingError, match="field took is a Duration"):
        protobuf_to_iceberg(compile_schema(schema), "M")


def test_json_schema_types_follow_the_documented_mapping():
    schema = {
        "type": "object",
        "properties": {
            "b": {"type": "boolean"},
            "i": {"type": "integer"},
            "n": {"type": "number"},
            "s": {"type": ["string", "null"]},
            "at": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "kind": {"enum": ["a", "b"]},
            "any": {},
            "either": {"type": ["string", "integer"]},
            "maybe": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/Point"}]},
            "points": {"type": "array", "items": {"$ref": "#/definitions/Point"}},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "free": {"type": "object"},
            "both": {
                "allOf": [{"$ref": "#/$defs/Point"}, {"properties": {"z": {"type": "number"}}}]
            },
            "money": {"$ref": "money.json"},
            "self": {"$ref": "#"},
        },
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "definitions": {"Point": {"type": "object", "properties": {"y": {"type": "number"}}}},
    }
    money = json.dumps({"type": "object", "properties": {"units": {"type": "integer"}}})
    mapped = json_schema_to_iceberg(json.dumps(schema), (("money.json", money),))
    got = types(mapped.struct)
    assert [got[n] for n in ("b", "i", "n", "s", "at", "day", "kind", "any", "either", "free")] == [
        BooleanType(),
        LongType(),
        DoubleType(),
        StringType(),
        TimestamptzType(),
        DateType(),
        StringType(),
        StringType(),
        StringType(),
        StringType(),
    ]
    assert types(got["maybe"]) == {"x": DoubleType()}
    assert types(got["points"].element_type) == {"y": DoubleType()}
    assert isinstance(got["counts"], MapType) and got["counts"].value_type == LongType()
    assert types(got["both"]) == {"x": DoubleType(), "z": DoubleType()}
    assert types(got["money"]) == {"units": LongType()}
    assert "self" not in got and mapped.recursive_fields == ("self",)


def test_a_json_schema_that_is_not_an_object_is_one_value_field():
    assert types(json_schema_to_iceberg('{"type": "array", "items": {"type": "string"}}').struct)[
        "value"
    ] == ListType(1, StringType(), element_required=False)


def test_a_json_schema_ref_to_nothing_is_refused_by_name():
    with pytest.raises(SchemaMappingError, match=r"no referenced schema named 'other.json'"):
        json_schema_to_iceberg('{"type": "object", "properties": {"a": {"$ref": "other.json"}}}')
