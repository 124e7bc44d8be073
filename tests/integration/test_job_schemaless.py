"""Plain JSON without a schema registry: the table's value columns inferred from the records
(``value.inferSchema``) or declared in the spec (``value.columns``), field ids kept as the
table evolves."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from pyiceberg.types import (
    BooleanType,
    DecimalType,
    DoubleType,
    ListType,
    LongType,
    StringType,
    StructType,
    TimestamptzType,
)

from .jobkit import (
    AvroProducer,
    create_topic,
    job_config,
    load_table,
    run_once,
    table_rows,
    with_sections,
)

pytestmark = [pytest.mark.integration]


@pytest.fixture
def topic(stack, unique_name):
    name = f"schemaless-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, name, partitions=1)
    return name


def plain_json(stack, tmp_path, topic, **value):
    return with_sections(
        job_config(stack, tmp_path, topic, fmt="raw"), value={"format": "json", **value}
    )


def send(producer: AvroProducer, *values) -> None:
    for value in values:
        producer.send(
            key=None,
            raw=None
            if value is None
            else (value if isinstance(value, bytes) else json.dumps(value).encode()),
        )
    producer.flush()


def ids(struct) -> dict[str, int]:
    return {f.name: f.field_id for f in struct.fields}


def test_inferred_columns_are_made_by_the_first_batch_and_grow_with_later_ones(
    stack, spark, tmp_path, topic
):
    producer = AvroProducer(stack, topic)
    config = plain_json(stack, tmp_path, topic, inferSchema=True)
    send(producer, b"not json", None)  # nothing to infer from yet: no value column
    run_once(config, spark)
    table = load_table(config)
    assert "value" not in {f.name for f in table.schema().fields}
    [garbage, tombstone] = sorted(table_rows(config), key=lambda r: r["kafka"]["offset"])
    assert garbage["value_raw"] == b"not json" and garbage["value_error"] == (
        "value is not a JSON object with a field: the table's value columns are inferred from "
        "the first one that is"
    )
    assert tombstone["value_raw"] is None and tombstone["value_error"] is None

    send(
        producer,
        {"id": 1, "name": "a", "tags": ["x"], "customer": {"id": 7}, "empty": {}},
        {"id": 2, "name": None, "tags": [], "customer": {"id": 8, "vip": True}},
        b"[1, 2]",
    )
    run_once(config, spark)
    value = load_table(config).schema().find_field("value").field_type
    assert {f.name: f.field_type for f in value.fields} == {
        "id": LongType(),
        "name": StringType(),
        "tags": ListType(
            value.field_by_name("tags").field_type.element_id, StringType(), element_required=False
        ),
        "customer": StructType(*value.field_by_name("customer").field_type.fields),
    }
    assert {f.name: f.field_type for f in value.field_by_name("customer").field_type.fields} == {
        "id": LongType(),
        "vip": BooleanType(),
    }
    first_ids = ids(value)

    send(
        producer, {"id": 3, "name": "c", "note": "new", "score": 1.5}, {"id": "x4", "name": "d"}
    )  # id of another type: kept raw, the reason naming it
    run_once(config, spark)
    value = load_table(config).schema().find_field("value").field_type
    assert {k: v for k, v in ids(value).items() if k in first_ids} == first_ids
    assert value.field_by_name("note").field_type == StringType()
    assert value.field_by_name("score").field_type == DoubleType()
    assert value.field_by_name("id").field_type == LongType()

    rows = {r["kafka"]["offset"]: r for r in table_rows(config)}
    assert rows[2]["value"]["customer"] == {"id": 7, "vip": None}
    assert rows[2]["value"]["tags"] == ["x"] and rows[3]["value"]["customer"]["vip"] is True
    assert rows[4]["value"] is None and rows[4]["value_raw"] == b"[1, 2]"
    assert rows[5]["value"]["note"] == "new" and rows[5]["value"]["score"] == 1.5
    assert rows[6]["value"] is None and rows[6]["value_raw"] == b'{"id": "x4", "name": "d"}'
    assert rows[6]["value_error"] == (
        "value is not a JSON object matching the table schema (fields of this batch's values of "
        "another type than their column: value.id: type changed from long to string)"
    )


def test_declared_columns_make_the_table_and_a_new_column_evolves_it(stack, spark, tmp_path, topic):
    producer = AvroProducer(stack, topic)
    columns = [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "decimal(10, 2)"},
        {"name": "at", "type": "timestamp"},
        {"name": "customer.name", "type": "string"},
    ]
    config = plain_json(stack, tmp_path, topic, columns=columns)
    at = datetime(2026, 11, 27, 10, 0, tzinfo=timezone.utc)
    send(
        producer,
        {
            "id": 1,
            "amount": "12.50",
            "at": int(at.timestamp() * 1000),
            "customer": {"name": "Ann", "age": 3},
            "vip": True,
        },
        {"id": "one", "amount": 3, "at": "2026-11-27T10:00:00Z", "customer": None},
    )
    run_once(config, spark)

    value = load_table(config).schema().find_field("value").field_type
    assert [(f.name, f.field_type, f.required) for f in value.fields][:3] == [
        ("id", LongType(), False),
        ("amount", DecimalType(10, 2), False),
        ("at", TimestamptzType(), False),
    ]
    assert [f.name for f in value.fields] == ["id", "amount", "at", "customer"]  # vip left out
    rows = sorted(table_rows(config), key=lambda r: r["kafka"]["offset"])
    assert [r["value"] for r in rows] == [
        {"id": 1, "amount": Decimal("12.50"), "at": at, "customer": {"name": "Ann"}},
        {"id": None, "amount": Decimal("3.00"), "at": at, "customer": None},
    ]
    assert rows[1]["value_error"] == (
        "coercion: null in the row for id: 'one' is not a long (the full value is in value_raw)"
    )
    before = ids(value)

    config = plain_json(
        stack, tmp_path, topic, columns=[*columns, {"name": "vip", "type": "boolean"}]
    )
    send(producer, {"id": 2, "vip": "true"})
    run_once(config, spark)
    value = load_table(config).schema().find_field("value").field_type
    assert {k: v for k, v in ids(value).items() if k in before} == before
    assert value.field_by_name("vip").field_type == BooleanType()
    newest = max(table_rows(config), key=lambda r: r["kafka"]["offset"])
    assert newest["value"]["vip"] is True and newest["value"]["id"] == 2
