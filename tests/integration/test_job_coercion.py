"""Per-field coercion (``value.coerce``): fields written as text or epoch milliseconds land as
numbers, timestamps and bytes; a field that cannot be converted is null in its row, which
notes which field and why, instead of the whole record going raw."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from confluent_kafka.schema_registry import Schema
from pyiceberg.types import BinaryType, DecimalType, LongType, TimestamptzType

from .jobkit import (
    AvroProducer,
    consume_to_end,
    create_topic,
    job_config,
    load_table,
    run_once,
    table_rows,
    with_sections,
)
from .test_job_formats import framed

pytestmark = [pytest.mark.integration]

READING = {
    "type": "record",
    "name": "Reading",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "string"},
        {"name": "paid_at", "type": "long"},
        {"name": "created", "type": ["null", "string"], "default": None},
        {"name": "blob", "type": "string"},
        {"name": "count", "type": "string"},
        {
            "name": "meta",
            "type": {
                "type": "record",
                "name": "Meta",
                "fields": [{"name": "seen", "type": "string"}],
            },
        },
    ],
}
COERCE = [
    {"field": "amount", "to": "decimal(10, 2)"},
    {"field": "paid_at", "to": "timestamp"},
    {"field": "created", "to": "timestamp"},
    {"field": "blob", "to": "binary"},
    {"field": "count", "to": "long"},
    {"field": "meta.seen", "to": "timestamp"},
]
AT = datetime(2026, 11, 27, 10, 0, tzinfo=timezone.utc)
AT_MS = int(AT.timestamp() * 1000)


@pytest.fixture
def topic(stack, unique_name):
    name = f"coerce-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, name, partitions=1)
    return name


def test_avro_fields_are_coerced_and_one_that_cannot_be_is_null_with_a_note(
    stack, spark, tmp_path, topic
):
    dead = f"{topic}-dlq"
    create_topic(stack.bootstrap, dead, partitions=1)
    producer = AvroProducer(stack, topic)
    config = with_sections(
        job_config(stack, tmp_path, topic, dead_letter=dead), value={"coerce": COERCE}
    )
    producer.send(
        key=b"0",
        schema=READING,
        value={
            "id": 0,
            "amount": "12.50",
            "paid_at": AT_MS,
            "created": "2026-11-27T11:00:00+01:00",
            "blob": base64.b64encode(b"hello").decode(),
            "count": " 42 ",
            "meta": {"seen": "2026-11-27"},
        },
    )
    producer.send(
        key=b"1",
        schema=READING,
        value={
            "id": 1,
            "amount": "n/a",
            "paid_at": 0,
            "created": "yesterday",
            "blob": "!!not base64",
            "count": "4.5",
            "meta": {"seen": str(AT_MS)},
        },
    )
    producer.send(
        key=b"2",
        schema=READING,
        value={
            "id": 2,
            "amount": "-7",
            "paid_at": AT_MS,
            "created": None,
            "blob": "",
            "count": "9223372036854775807",
            "meta": {"seen": "2026-11-27T10:00:00Z"},
        },
    )
    producer.flush()
    run_once(config, spark)

    value = load_table(config).schema().find_field("value").field_type
    assert {
        f.name: (f.field_type, f.required)
        for f in value.fields
        if f.name != "meta" and f.name != "id"
    } == {
        "amount": (DecimalType(10, 2), False),
        "paid_at": (TimestamptzType(), False),
        "created": (TimestamptzType(), False),
        "blob": (BinaryType(), False),
        "count": (LongType(), False),
    }
    assert (
        value.field_by_name("meta").field_type.field_by_name("seen").field_type == TimestamptzType()
    )
    rows = {r["value"]["id"]: r for r in table_rows(config)}
    assert rows[0]["value"] == {
        "id": 0,
        "amount": Decimal("12.50"),
        "paid_at": AT,
        "created": AT,
        "blob": b"hello",
        "count": 42,
        "meta": {"seen": datetime(2026, 11, 27, tzinfo=timezone.utc)},
    }
    assert rows[0]["value_error"] is None and rows[0]["value_raw"] is None
    assert rows[1]["value"] == {
        "id": 1,
        "amount": None,
        "paid_at": datetime(1970, 1, 1, tzinfo=timezone.utc),
        "created": None,
        "blob": None,
        "count": None,
        "meta": {"seen": AT},
    }
    assert rows[1]["value_error"] == (
        "coercion: null in the row for amount: 'n/a' is not a decimal(10, 2); created: "
        "'yesterday' is not a timestamp; blob: '!!not base64' is not a binary; count: '4.5' "
        "is not a long (the full value is in value_raw)"
    )
    assert rows[1]["value_raw"]  # the record's bytes, nothing lost
    assert rows[2]["value"] == {
        "id": 2,
        "amount": Decimal("-7.00"),
        "paid_at": AT,
        "created": None,
        "blob": b"",
        "count": 2**63 - 1,
        "meta": {"seen": AT},
    }
    assert rows[2]["value_error"] is None
    assert consume_to_end(stack, dead, timeout=5) == []  # decoded rows: no dead letters


PAYMENT_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Payment",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "amount": {"type": "string"},
        "at": {"type": "integer"},
    },
}


def test_plain_and_framed_json_fields_are_coerced_from_text_or_numbers(
    stack, spark, tmp_path, topic
):
    producer = AvroProducer(stack, topic)
    schema_id = producer.registry.register_schema(
        f"{topic}-value", Schema(json.dumps(PAYMENT_SCHEMA), "JSON")
    )
    config = with_sections(
        job_config(stack, tmp_path, topic, fmt="json"),
        value={"coerce": [{"field": "amount", "to": "double"}, {"field": "at", "to": "timestamp"}]},
    )
    sent = [
        {"id": 1, "amount": "12.5", "at": AT_MS},
        {"id": 2, "amount": 7, "at": "2026-11-27T11:00:00+01:00"},
        {"id": 3, "amount": "lots", "at": "soon"},
    ]
    for value in sent:
        producer.send(key=None, raw=json.dumps(value).encode())
    producer.send(
        key=None,
        raw=framed(schema_id, json.dumps({"id": 4, "amount": "3.25", "at": AT_MS}).encode()),
    )
    producer.flush()
    run_once(config, spark)

    rows = {r["value"]["id"]: r for r in table_rows(config)}
    assert {i: (r["value"]["amount"], r["value"]["at"]) for i, r in rows.items()} == {
        1: (12.5, AT),
        2: (7.0, AT),
        3: (None, None),
        4: (3.25, AT),
    }
    assert [i for i, r in rows.items() if r["value_error"]] == [3]
    assert rows[3]["value_error"] == (
        "coercion: null in the row for amount: 'lots' is not a double; at: 'soon' is not a "
        "timestamp (the full value is in value_raw)"
    )
    assert json.loads(rows[3]["value_raw"]) == sent[2]
