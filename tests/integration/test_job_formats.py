"""Protobuf and JSON Schema values through the registry, as Confluent's serializers frame them:
decoded per writer schema, evolved additively, a breaking change kept raw until approved, what
cannot be decoded in value_raw and the dead-letter topic."""

from __future__ import annotations

import datetime as dt
import json
import struct

import pytest
import requests
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient

from floe_sparkapp.job import start
from floe_sparkapp.protobuf_types import compile_schema

from .jobkit import consume_to_end, create_topic, job_config, load_table, wait_for_rows

pytestmark = pytest.mark.integration

COMMON = """syntax = "proto3";
package shop.common;
message Money { string currency = 1; int64 units = 2; }
"""

ORDER = """syntax = "proto3";
package shop;
import "shop/common.proto";
import "google/protobuf/timestamp.proto";
message Order {
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; }
  message Line { string sku = 1; uint32 quantity = 2; shop.common.Money price = 3;%s }
  int64 id = 1;
  string customer = 2;
  Status status = 3;
  repeated Line lines = 4;
  map<string, int32> tags = 5;
  google.protobuf.Timestamp at = 6;
  uint64 big = 7;
  optional string note = 8;
  Order parent = 9;%s
}
"""
V1 = ORDER % ("", "")
V2 = ORDER % (" bool gift = 4;", "\n  double discount = 10;")  # additive, one of them nested
V3 = V2.replace("string customer = 2;", "int64 customer = 2;")  # breaking


class FramedProducer:
    """Registers schemas and frames values as Confluent's serializers do: magic byte, schema
    id, then (Protobuf) the message-index array; remembers what landed where."""

    def __init__(self, stack, topic: str):
        self.topic = topic
        self.registry = SchemaRegistryClient({"url": stack.registry_url})
        self.producer = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 5})
        self.sent: dict[tuple[int, int], dict] = {}

    def register(self, subject: str, schema: Schema) -> int:
        return self.registry.register_schema(subject, schema)

    def send(self, key: bytes, payload: bytes, value=None) -> None:
        def delivered(error, message):
            assert error is None, error
            self.sent[(message.partition(), message.offset())] = {
                "key": key,
                "payload": payload,
                "value": value,
            }

        self.producer.produce(self.topic, key=key, value=payload, on_delivery=delivered)

    def flush(self) -> None:
        assert self.producer.flush(60) == 0


def assert_dead_lettered(stack, dlq: str, by_key: dict[str, dict], keys: set[str]) -> None:
    """The records that could not be decoded are in the dead-letter topic, as they came, with
    the reason the table gives; no other record is."""
    dead = {m.key().decode(): m for m in consume_to_end(stack, dlq)}
    assert set(dead) == keys
    for key, message in dead.items():
        headers = dict(message.headers())
        assert message.value() == by_key[key]["value_raw"]
        assert headers["floe.error"].decode() == by_key[key]["value_error"]
        assert int(headers["floe.offset"]) == by_key[key]["kafka"]["offset"]


def framed(schema_id: int, body: bytes, index: bytes = b"") -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + index + body


def message_class(schema: str, references: tuple[tuple[str, str], ...], name: str):
    """The Python class of a registered Protobuf message, compiled from the same files."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(
        compile_schema(schema, references)
    ).file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def proto_order(cls, i: int, version: int):
    order = cls(id=i, customer=f"c{i % 7}", status=i % 3, big=2**64 - 1 - i, tags={"a": i, "b": -i})
    order.at.FromDatetime(
        dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i, microseconds=i)
    )
    for n in range(i % 3):
        line = order.lines.add(sku=f"s{n}", quantity=2**32 - 1 - n)
        line.price.currency, line.price.units = "EUR", 100 * n
        if version >= 2:
            line.gift = n % 2 == 0
    if i % 4 == 0:
        order.note = f"note {i}"
    if i % 5 == 0:
        order.parent.id = i - 1  # a recursive field: no column, the record kept raw too
    if version >= 2:
        order.discount = i / 4
    return order


def python_view(message) -> dict:
    """What protobuf in Python decodes, in the table's terms: enums by name, uint64 as the
    signed long of its bits, proto3 fields without presence at their zero value, unset
    message and optional fields null, the recursive ``parent`` left out."""

    def convert(msg) -> dict:
        out = {}
        for field in msg.DESCRIPTOR.fields:
            name = field.name
            if name == "parent":
                continue
            value = getattr(msg, name)
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                out[name] = dict(value)
            elif field.is_repeated:
                out[name] = [convert(v) for v in value]
            elif field.message_type is not None and field.message_type.full_name.endswith(
                "Timestamp"
            ):
                out[name] = value.ToDatetime(tzinfo=dt.timezone.utc) if msg.HasField(name) else None
            elif field.message_type is not None:
                out[name] = convert(value) if msg.HasField(name) else None
            elif field.has_presence and not msg.HasField(name):
                out[name] = None
            elif field.enum_type is not None:
                out[name] = field.enum_type.values_by_number[value].name
            elif field.type == field.TYPE_UINT64 and value >= 2**63:
                out[name] = value - 2**64
            else:
                out[name] = value
        return out

    return convert(message)


def table_view(value: dict) -> dict:
    """A table row's value as :func:`python_view` shows it (maps as dicts)."""
    out = {}
    for name, item in value.items():
        if name == "tags":
            out[name] = dict(item) if item is not None else None
        elif name == "lines":
            out[name] = [table_view(line) for line in item or []]
        elif isinstance(item, dict):
            out[name] = table_view(item)
        else:
            out[name] = item
    return out


def test_protobuf_values_decode_per_writer_schema_evolve_and_gate_a_breaking_change(
    stack, spark, tmp_path, unique_name
):
    topic = f"proto-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    dlq = f"{topic}.dlq"
    create_topic(stack.bootstrap, dlq, partitions=1)
    producer = FramedProducer(stack, topic)
    common_subject = f"{topic}-shop.common"
    producer.register(common_subject, Schema(COMMON, "PROTOBUF"))
    references = [SchemaReference("shop/common.proto", common_subject, 1)]
    imports = (("shop/common.proto", COMMON),)
    subject = f"{topic}-value"
    v1_id = producer.register(subject, Schema(V1, "PROTOBUF", references))
    v1 = message_class(V1, imports, "shop.Order")
    for i in range(30):
        producer.send(
            f"v1-{i}".encode(),
            framed(v1_id, proto_order(v1, i, 1).SerializeToString(), b"\x00"),
            proto_order(v1, i, 1),
        )
    producer.send(b"corrupt", framed(v1_id, b"\x0a\xff\xff\xff", b"\x00"))
    producer.flush()
    config = job_config(stack, tmp_path, topic, fmt="protobuf", dead_letter=dlq)
    query = start(config, spark)
    try:
        wait_for_rows(config, 31)
        v2_id = producer.register(subject, Schema(V2, "PROTOBUF", references))
        v2 = message_class(V2, imports, "shop.Order")
        for i in range(30, 60):  # the non-compact index array [0] (0x02 0x00) is the same
            producer.send(
                f"v2-{i}".encode(),
                framed(
                    v2_id,
                    proto_order(v2, i, 2).SerializeToString(),
                    b"\x02\x00" if i % 2 else b"\x00",
                ),
                proto_order(v2, i, 2),
            )
        # a v2 value framed with v1's id: fields v1 does not know are kept in value_raw
        newer = proto_order(v2, 61, 2).SerializeToString()
        producer.send(b"unknown", framed(v1_id, newer, b"\x00"), v1.FromString(newer))
        producer.flush()
        wait_for_rows(config, 62)
        requests.put(
            f"{stack.registry_url}/config/{subject}", json={"compatibility": "NONE"}, timeout=10
        ).raise_for_status()
        v3_id = producer.register(subject, Schema(V3, "PROTOBUF", references))
        v3 = message_class(V3, imports, "shop.Order")
        broken = v3(id=99, customer=7).SerializeToString()
        producer.send(b"v3", framed(v3_id, broken, b"\x00"))
        producer.flush()
        rows = wait_for_rows(config, 63)
    finally:
        query.stop()
    assert query.exception() is None

    by_key = {r["key"].decode(): r for r in rows}
    for sent in producer.sent.values():
        key = sent["key"].decode()
        if key in ("corrupt", "v3"):
            continue
        row = by_key[key]
        expected = python_view(sent["value"])
        got = table_view(row["value"])
        if key.startswith("v1-") or key == "unknown":
            expected.setdefault("discount", None)
            for line in expected["lines"]:
                line.setdefault("gift", None)
        assert got == expected, key
        # the writers have a recursive field: the raw value is kept beside the decoded one
        assert row["value_raw"] == sent["payload"]
        if key == "unknown":
            assert row["value_error"] == (
                "the value has fields its writer schema's shop.Order "
                "does not define; the full value is in value_raw"
            )
            continue
        assert row["value_error"].startswith("recursive field(s) parent of writer schema id")
        assert row["kafka"]["schema_id"] == (v1_id if key.startswith("v1-") else v2_id)

    corrupt = by_key["corrupt"]
    assert corrupt["value"] is None and corrupt["value_raw"] == framed(
        v1_id, b"\x0a\xff\xff\xff", b"\x00"
    )
    assert corrupt["value_error"].startswith(
        f"Protobuf value could not be decoded as message shop.Order of its writer schema id {v1_id}"
    )
    breaking = by_key["v3"]
    assert breaking["value"] is None and breaking["value_raw"] == framed(v3_id, broken, b"\x00")
    assert breaking["value_error"].endswith(
        "breaking schema change: value.customer: type changed from string to long"
    )
    value_type = load_table(config).schema().find_field("value").field_type
    assert [f.name for f in value_type.fields] == [
        "id",
        "customer",
        "status",
        "lines",
        "tags",
        "at",
        "big",
        "note",
        "discount",
    ]
    assert str(value_type.field_by_name("customer").field_type) == "string"
    assert_dead_lettered(stack, dlq, by_key, {"corrupt", "v3"})


MONEY = {
    "type": "object",
    "properties": {"currency": {"type": "string"}, "units": {"type": "integer"}},
}


def json_order_schema(version: int) -> dict:
    line = {
        "type": "object",
        "properties": {
            "sku": {"type": "string"},
            "quantity": {"type": "integer"},
            "price": {"$ref": "money.json"},
        },
    }
    properties = {
        "id": {"type": "integer"},
        "customer": {"type": "integer" if version == 3 else "string"},
        "status": {"type": "string", "enum": ["NEW", "PAID", "SHIPPED"]},
        "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}},
        "tags": {"type": "object", "additionalProperties": {"type": "integer"}},
        "at": {"type": "string", "format": "date-time"},
        "note": {"oneOf": [{"type": "null"}, {"type": "string"}]},
        "parent": {"$ref": "#"},  # recursive: no column
    }
    if version >= 2:
        line["properties"]["gift"] = {"type": "boolean"}
        properties["discount"] = {"type": "number"}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Order",
        "type": "object",
        "properties": properties,
        "definitions": {"Line": line},
    }


def json_order(i: int, version: int) -> dict:
    order = {
        "id": i,
        "customer": f"c{i % 7}",
        "status": ["NEW", "PAID", "SHIPPED"][i % 3],
        "lines": [
            {"sku": f"s{n}", "quantity": n, "price": {"currency": "EUR", "units": 100 * n}}
            for n in range(i % 3)
        ],
        "tags": {"a": i},
        "at": f"2026-01-01T00:00:{i % 60:02d}.{i:06d}Z",
    }
    if i % 4 == 0:
        order["note"] = f"note {i}"
    if i % 5 == 0:
        order["parent"] = {"id": i - 1}
    if version >= 2:
        order["discount"] = i / 4
        for line in order["lines"]:
            line["gift"] = True
    return order


def json_view(order: dict, version: int) -> dict:
    """What a JSON reader makes of a sent value, in the table's terms."""
    out = {k: v for k, v in order.items() if k != "parent"}
    out["at"] = dt.datetime.fromisoformat(order["at"].replace("Z", "+00:00"))
    out.setdefault("note", None)
    out.setdefault("discount", None)
    out["lines"] = [{**line, "gift": line.get("gift")} for line in order["lines"]]
    return out


def test_json_schema_values_decode_per_writer_schema_evolve_and_gate_a_breaking_change(
    stack, spark, tmp_path, unique_name
):
    topic = f"jsonschema-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    dlq = f"{topic}.dlq"
    create_topic(stack.bootstrap, dlq, partitions=1)
    producer = FramedProducer(stack, topic)
    money_subject = f"{topic}-money"
    producer.register(money_subject, Schema(json.dumps(MONEY), "JSON"))
    references = [SchemaReference("money.json", money_subject, 1)]
    subject = f"{topic}-value"
    v1_id = producer.register(subject, Schema(json.dumps(json_order_schema(1)), "JSON", references))
    for i in range(30):
        producer.send(
            f"v1-{i}".encode(),
            framed(v1_id, json.dumps(json_order(i, 1)).encode()),
            json_order(i, 1),
        )
    producer.send(b"corrupt", framed(v1_id, b'{"id": "not a number"'))
    producer.send(b"plain", json.dumps(json_order(7, 1)).encode(), json_order(7, 1))
    producer.flush()
    config = job_config(stack, tmp_path, topic, fmt="json", dead_letter=dlq)
    query = start(config, spark)
    try:
        wait_for_rows(config, 32)
        v2_id = producer.register(
            subject, Schema(json.dumps(json_order_schema(2)), "JSON", references)
        )
        for i in range(30, 60):
            producer.send(
                f"v2-{i}".encode(),
                framed(v2_id, json.dumps(json_order(i, 2)).encode()),
                json_order(i, 2),
            )
        producer.flush()
        wait_for_rows(config, 62)
        requests.put(
            f"{stack.registry_url}/config/{subject}", json={"compatibility": "NONE"}, timeout=10
        ).raise_for_status()
        v3_id = producer.register(
            subject, Schema(json.dumps(json_order_schema(3)), "JSON", references)
        )
        broken = json.dumps({"id": 99, "customer": 7}).encode()
        producer.send(b"v3", framed(v3_id, broken))
        producer.flush()
        rows = wait_for_rows(config, 63)
    finally:
        query.stop()
    assert query.exception() is None

    by_key = {r["key"].decode(): r for r in rows}
    for sent in producer.sent.values():
        key = sent["key"].decode()
        if key in ("corrupt", "v3"):
            continue
        row = by_key[key]
        version = 2 if key.startswith("v2-") else 1
        assert row["value"] is not None, (key, row["value_error"])
        assert table_view(row["value"]) == json_view(sent["value"], version), key
        if key == "plain":  # no header: parsed against the table's struct, nothing kept
            assert row["kafka"]["schema_id"] is None
            assert row["value_raw"] is None and row["value_error"] is None
            continue
        assert row["kafka"]["schema_id"] == (v1_id if version == 1 else v2_id)
        assert row["value_raw"] == sent["payload"]  # the recursive parent: kept raw too
        assert row["value_error"].startswith("recursive field(s) parent of writer schema id")

    corrupt = by_key["corrupt"]
    assert corrupt["value"] is None
    assert corrupt["value_error"] == (
        f"JSON value of writer schema id {v1_id} is not a JSON document of its schema's shape"
    )
    breaking = by_key["v3"]
    assert breaking["value"] is None and breaking["value_raw"] == framed(v3_id, broken)
    assert breaking["value_error"].endswith(
        "breaking schema change: value.customer: type changed from string to long"
    )
    value_type = load_table(config).schema().find_field("value").field_type
    assert [f.name for f in value_type.fields] == [
        "id",
        "customer",
        "status",
        "lines",
        "tags",
        "at",
        "note",
        "discount",
    ]
    assert_dead_lettered(stack, dlq, by_key, {"corrupt", "v3"})
