"""Avro value schemas mapped to the Iceberg struct of the table's value column."""

from __future__ import annotations

import json

import pytest
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

from floe_sparkapp.avro_types import AvroMappingError, avro_to_iceberg

pytestmark = pytest.mark.unit


def field_types(struct: StructType) -> dict[str, object]:
    return {f.name: f.field_type for f in struct.fields}


def test_primitives_logical_types_and_nullable_unions():
    schema = {
        "type": "record",
        "name": "All",
        "fields": [
            {"name": "b", "type": "boolean"},
            {"name": "i", "type": "int"},
            {"name": "l", "type": ["null", "long"], "default": None},
            {"name": "f", "type": "float"},
            {"name": "d", "type": "double"},
            {"name": "s", "type": {"type": "string"}},
            {"name": "raw", "type": "bytes"},
            {
                "name": "color",
                "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]},
            },
            {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 8}},
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
            },
            {
                "name": "big",
                "type": {
                    "type": "fixed",
                    "name": "Big",
                    "size": 16,
                    "logicalType": "decimal",
                    "precision": 38,
                    "scale": 0,
                },
            },
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
            {"name": "tod", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "tod_us", "type": {"type": "long", "logicalType": "time-micros"}},
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "odd", "type": {"type": "string", "logicalType": "no-such-logical-type"}},
        ],
    }

    mapped = avro_to_iceberg(schema)

    assert field_types(mapped.struct) == {
        "b": BooleanType(),
        "i": IntegerType(),
        "l": LongType(),
        "f": FloatType(),
        "d": DoubleType(),
        "s": StringType(),
        "raw": BinaryType(),
        "color": StringType(),
        "hash": FixedType(8),
        "price": DecimalType(12, 2),
        "big": DecimalType(38, 0),
        "day": DateType(),
        "at_ms": TimestamptzType(),
        "at_us": TimestamptzType(),
        "local": TimestampType(),
        "tod": IntegerType(),
        "tod_us": LongType(),
        "id": UUIDType(),
        "odd": StringType(),
    }
    assert all(not f.required for f in mapped.struct.fields)
    assert mapped.recursive_fields == ()


def test_nested_records_arrays_maps_and_multi_type_unions():
    schema = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {
                "name": "customer",
                "type": {
                    "type": "record",
                    "name": "Customer",
                    "fields": [{"name": "name", "type": "string"}],
                },
            },
            {"name": "referrer", "type": ["null", "Customer"]},
            {
                "name": "lines",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Line",
                        "fields": [{"name": "sku", "type": "string"}],
                    },
                },
            },
            {"name": "tags", "type": {"type": "map", "values": ["null", "string"]}},
            {"name": "either", "type": ["null", "int", "string"]},
        ],
    }

    types = field_types(avro_to_iceberg(schema).struct)

    assert field_types(types["customer"]) == {"name": StringType()}
    assert field_types(types["referrer"]) == {"name": StringType()}  # reused by reference
    assert isinstance(types["lines"], ListType)
    assert field_types(types["lines"].element_type) == {"sku": StringType()}
    assert isinstance(types["tags"], MapType)
    assert (types["tags"].key_type, types["tags"].value_type) == (StringType(), StringType())
    assert field_types(types["either"]) == {"member0": IntegerType(), "member1": StringType()}


def test_field_ids_are_unique():
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "a", "type": {"type": "array", "items": "int"}},
            {"name": "m", "type": {"type": "map", "values": "long"}},
            {
                "name": "s",
                "type": {
                    "type": "record",
                    "name": "S",
                    "fields": [
                        {"name": "x", "type": "int"},
                        {"name": "y", "type": ["null", "int", "string"]},
                    ],
                },
            },
        ],
    }
    mapped = avro_to_iceberg(schema, first_id=10)

    ids = []

    def collect(t):
        if isinstance(t, StructType):
            for f in t.fields:
                ids.append(f.field_id)
                collect(f.field_type)
        elif isinstance(t, ListType):
            ids.append(t.element_id)
            collect(t.element_type)
        elif isinstance(t, MapType):
            ids.extend([t.key_id, t.value_id])
            collect(t.value_type)

    collect(mapped.struct)
    assert len(ids) == len(set(ids))
    assert min(ids) == 10 and max(ids) == mapped.last_field_id


def test_recursive_fields_are_left_out_and_named():
    schema = {
        "type": "record",
        "name": "Node",
        "fields": [
            {"name": "label", "type": "string"},
            {"name": "children", "type": {"type": "array", "items": "Node"}},
            {"name": "parent", "type": ["null", "Node"], "default": None},
            {
                "name": "meta",
                "type": {
                    "type": "record",
                    "name": "Meta",
                    "fields": [
                        {"name": "owner", "type": "string"},
                        {"name": "up", "type": ["null", "Node"]},
                    ],
                },
            },
        ],
    }

    mapped = avro_to_iceberg(schema)

    types = field_types(mapped.struct)
    assert list(types) == ["label", "meta"]
    assert field_types(types["meta"]) == {"owner": StringType()}
    assert mapped.recursive_fields == ("children", "parent", "meta.up")


def test_a_top_level_primitive_becomes_a_single_value_field():
    assert field_types(avro_to_iceberg('"string"').struct) == {"value": StringType()}


@pytest.mark.parametrize(
    "schema, message",
    [
        (
            {
                "type": "record",
                "name": "R",
                "fields": [
                    {
                        "name": "amount",
                        "type": {
                            "type": "bytes",
                            "logicalType": "decimal",
                            "precision": 40,
                            "scale": 2,
                        },
                    }
                ],
            },
            "amount: decimal(40, 2) is wider than Iceberg's maximum precision 38",
        ),
        (
            {"type": "record", "name": "R", "fields": [{"name": "x", "type": "Missing"}]},
            "x: unknown Avro type 'Missing'",
        ),
    ],
)
def test_unmappable_schemas_name_the_field(schema, message):
    with pytest.raises(AvroMappingError) as error:
        avro_to_iceberg(schema)
    assert str(error.value) == message


def test_a_cdc_table_holds_the_row_inside_the_debezium_envelope():
    from floe_sparkapp.cdc import table_value

    row = {
        "type": "record",
        "name": "Value",
        "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": ["null", "string"]}],
    }
    envelope = {
        "type": "record",
        "name": "Envelope",
        "fields": [
            {"name": "before", "type": ["null", row]},
            {"name": "after", "type": ["null", "Value"]},
            {
                "name": "source",
                "type": {
                    "type": "record",
                    "name": "Source",
                    "fields": [{"name": "lsn", "type": "long"}],
                },
            },
            {"name": "op", "type": "string"},
        ],
    }
    mapped = table_value(json.dumps(envelope), "cdc")
    assert field_types(mapped.struct) == {"id": IntegerType(), "name": StringType()}
    assert list(field_types(table_value(json.dumps(envelope), "upsert").struct)) == [
        "before",
        "after",
        "source",
        "op",
    ]
    with pytest.raises(AvroMappingError) as refused:
        table_value(json.dumps(row), "cdc")
    assert str(refused.value) == (
        "mode cdc reads Debezium change events, and the schema has no before, after, op "
        "field(s) (it has id, name): register the connector's envelope schema for the topic, "
        "or use mode upsert or append"
    )
