"""Upsert with an operation field (``table.op``): for producers that are not Debezium, a value
field or a Kafka header says whether a record inserts, updates or deletes its key's row; a
record with any other operation is kept raw with the reason and sent to the dead-letter
topic."""

from __future__ import annotations

import pytest

from .jobkit import (
    AvroProducer,
    consume_to_end,
    create_topic,
    job_config,
    run_once,
    table_rows,
    with_sections,
)

pytestmark = [pytest.mark.integration]

PRODUCT = {
    "type": "record",
    "name": "Product",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "action", "type": ["null", "string"], "default": None},
    ],
}


@pytest.fixture
def topic(stack, unique_name):
    name = f"upsert-op-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, name, partitions=2)
    return name


def test_an_operation_field_inserts_updates_and_deletes_rows_by_key_columns(
    stack, spark, tmp_path, topic
):
    dead = f"{topic}-dlq"
    create_topic(stack.bootstrap, dead, partitions=1)
    producer = AvroProducer(stack, topic)
    config = with_sections(
        job_config(stack, tmp_path, topic, mode="upsert", key_columns=("id",), dead_letter=dead),
        table={
            "op": {
                "field": "action",
                "insert": ["c", "r", "index"],
                "update": ["u"],
                "delete": ["d", "delete"],
            }
        },
    )

    def send(i: int, name: str, action: str | None) -> None:
        # keyed by something else than id: the rows follow the value's id
        producer.send(
            key=f"k{i % 3}".encode(),
            partition=i % 2,
            schema=PRODUCT,
            value={"id": i, "name": name, "action": action},
        )

    for i in range(10):
        send(i, f"first-{i}", "c" if i % 2 else "INDEX")  # compared lower-cased
    producer.flush()
    run_once(config, spark)
    assert sorted(r["value"]["id"] for r in table_rows(config)) == list(range(10))

    send(0, "second-0", "u")
    send(0, "third-0", " U ")
    send(1, "second-1", "u")
    send(1, "gone-1", "d")
    send(2, "gone-2", "delete")
    send(2, "again-2", "r")
    send(3, "bogus-3", "merge")  # unknown: raw, dead letter; id 3 keeps its row
    send(4, "none-4", None)  # no operation: raw too
    send(5, "never-5", "d")
    send(5, "back-5", "c")
    send(6, "gone-6", "d")
    send(42, "absent", "d")  # deleting a key the table lacks changes nothing
    producer.flush()
    run_once(config, spark)

    rows = table_rows(config)
    applied = {r["value"]["id"]: r["value"]["name"] for r in rows if r["value_error"] is None}
    assert applied == {
        0: "third-0",
        2: "again-2",
        3: "first-3",
        4: "first-4",
        5: "back-5",
        7: "first-7",
        8: "first-8",
        9: "first-9",
    }
    raw = sorted(r["value_error"] for r in rows if r["value_error"])
    assert raw == [
        "op field action is null: the record's operation is unknown",
        "op merge (field action) is not an insert (c, r, index), update (u) or delete (d, delete)",
    ]
    assert all(r["value"] is None and r["value_raw"] for r in rows if r["value_error"])
    letters = consume_to_end(stack, dead)
    assert sorted(dict(m.headers())["floe.error"].decode() for m in letters) == raw


def test_an_operation_header_deletes_rows_by_the_kafka_key(stack, spark, tmp_path, topic):
    producer = AvroProducer(stack, topic)
    config = with_sections(
        job_config(stack, tmp_path, topic, mode="upsert"), table={"op": {"header": "op"}}
    )

    def send(key: str, name: str, op: bytes | None) -> None:
        producer.send(
            key=key.encode(),
            partition=0,
            schema=PRODUCT,
            value={"id": 0, "name": name, "action": None},
            headers=[("source", b"app")] + ([("op", op)] if op is not None else []),
        )

    for key in ("a", "b", "c", "d"):
        send(key, f"{key}-1", b"insert")
    producer.flush()
    run_once(config, spark)
    send("a", "a-2", b"update")
    send("b", "b-2", b"delete")  # a delete with a value: keyed by its Kafka key
    send("c", "c-2", b"upsert")
    send("c", "c-3", b"d")
    send("d", "d-2", None)  # no header: raw, the row kept
    producer.send(
        key=b"e",
        partition=0,
        schema=PRODUCT,
        value={"id": 0, "name": "e-1"},
        headers=[("op", b"d"), ("op", b"c")],
    )  # a repeated header: its last value
    producer.flush()
    run_once(config, spark)

    rows = table_rows(config)
    assert {r["key"].decode(): r["value"]["name"] for r in rows if not r["value_error"]} == {
        "a": "a-2",
        "d": "d-1",
        "e": "e-1",
    }
    [raw] = [r for r in rows if r["value_error"]]
    assert (
        raw["key"] == b"d"
        and raw["value_error"] == "op header op is missing: the record has no such header"
    )
