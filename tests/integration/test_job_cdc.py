"""Change data capture (``table.mode: cdc``): a Debezium-shaped stream (the test produces the
connector's envelopes) of snapshot reads, inserts, updates, deletes and a schema change of the
row; the table equals the source table, read alike by PyIceberg and Spark, its changes written
as deletion vectors."""

from __future__ import annotations

import json
import random

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from .jobkit import (
    AvroProducer,
    create_topic,
    duckdb_rows,
    job_config,
    load_table,
    run_killed_between_branch_and_main,
    run_once,
    table_rows,
)
from .test_job_upsert import delete_files

pytestmark = [pytest.mark.integration]

NAMESPACE = "inventory.public.customers"
SOURCE = {
    "type": "record",
    "name": "Source",
    "namespace": "io.debezium.connector.postgresql",
    "fields": [
        {"name": "version", "type": "string"},
        {"name": "connector", "type": "string"},
        {"name": "name", "type": "string"},
        {"name": "ts_ms", "type": "long"},
        {"name": "snapshot", "type": ["null", "string"], "default": None},
        {"name": "db", "type": "string"},
        {"name": "schema", "type": "string"},
        {"name": "table", "type": "string"},
        {"name": "txId", "type": ["null", "long"], "default": None},
        {"name": "lsn", "type": ["null", "long"], "default": None},
    ],
}
ROW_V1 = [
    {"name": "id", "type": "int"},
    {"name": "name", "type": "string"},
    {"name": "email", "type": ["null", "string"], "default": None},
]
ROW_V2 = [*ROW_V1, {"name": "tier", "type": ["null", "string"], "default": None}]


def envelope(row_fields: list, namespace: str = NAMESPACE) -> dict:
    """Debezium's envelope schema for a table whose rows have ``row_fields``."""
    row = {"type": "record", "name": "Value", "namespace": namespace, "fields": row_fields}
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": namespace,
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", f"{namespace}.Value"], "default": None},
            {"name": "source", "type": SOURCE},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {
                "name": "transaction",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "block",
                        "namespace": "event",
                        "fields": [
                            {"name": "id", "type": "string"},
                            {"name": "total_order", "type": "long"},
                            {"name": "data_collection_order", "type": "long"},
                        ],
                    },
                ],
                "default": None,
            },
        ],
    }


class Database:
    """The source table, and the change events a Debezium connector would send for it."""

    def __init__(self, table: str = "customers", blank: dict | None = None) -> None:
        self.table = table
        self.blank = {"email": None, "tier": None} if blank is None else blank  # a new row
        self.rows: dict[int, dict] = {}
        self.lsn = 1000
        self.last: dict[int, tuple[str, int]] = {}  # id -> (op, lsn) of its last change

    def change(self, op: str, row_id: int, **fields) -> dict:
        """The event of a change of row ``row_id``, applied to the source table."""
        before = self.rows.get(row_id)
        after = None if op == "d" else {**(before or {"id": row_id, **self.blank}), **fields}
        event = self.event(op, before, after)
        if after is None:
            self.rows.pop(row_id)
            self.last.pop(row_id, None)
        else:
            self.rows[row_id] = after
            self.last[row_id] = (op, self.lsn)
        return event

    def event(self, op: str, before: dict | None, after: dict | None) -> dict:
        self.lsn += 8
        source = {
            "version": "2.7.0.Final",
            "connector": "postgresql",
            "name": "inventory",
            "ts_ms": 1_700_000_000_000 + self.lsn,
            "snapshot": "true" if op == "r" else "false",
            "db": "inventory",
            "schema": "public",
            "table": self.table,
            "txId": self.lsn // 8,
            "lsn": self.lsn,
        }
        return {
            "before": before,
            "after": after,
            "source": source,
            "op": op,
            "ts_ms": 1_700_000_000_500 + self.lsn,
            "transaction": None,
        }


def cdc_topic(stack, unique_name: str) -> str:
    name = f"cdc-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, name, partitions=3)
    return name


def spark_rows(spark, config) -> list:
    name = f"{config.table.catalog.name}.{config.table.identifier}"
    return spark.table(name).filter("value IS NOT NULL").select("value.*").collect()


def test_cdc_table_equals_the_source_through_a_crash_and_a_schema_change(
    stack, spark, tmp_path, unique_name, monkeypatch
):
    topic = cdc_topic(stack, unique_name)
    producer = AvroProducer(stack, topic)
    config = job_config(stack, tmp_path, topic, mode="cdc", max_records=300)
    db = Database()
    rng = random.Random(7)

    def send(op: str, row_id: int, schema: dict, **fields) -> None:
        # Debezium keys a change by the row's primary key, so a row's changes share a partition
        producer.send(
            key=f'{{"id":{row_id}}}'.encode(), value=db.change(op, row_id, **fields), schema=schema
        )

    v1, v2 = envelope(ROW_V1), envelope(ROW_V2)
    for i in range(200):  # the connector's initial snapshot
        send("r", i, v1, name=f"customer {i}")
    producer.flush()
    run_once(config, spark)

    # Streaming changes: inserts, updates, deletes (each followed by Debezium's tombstone),
    # several changes of a row in one batch; the job killed between a batch's branch and main.
    next_id = 200
    for round_ in range(3):
        schema = v1 if round_ < 2 else v2  # the source table gained a column
        for _ in range(600):
            choice = rng.random()
            if choice < 0.2:
                fields = {"name": f"customer {next_id}"}
                if schema is v2:
                    fields["tier"] = "new"
                send("c", next_id, schema, **fields)
                next_id += 1
            elif choice < 0.85:
                row_id = rng.choice(sorted(db.rows))
                fields = {"email": f"{row_id}-{db.lsn}@example.com"}
                if schema is v2:
                    fields["tier"] = rng.choice(["gold", "silver"])
                send("u", row_id, schema, **fields)
            else:
                row_id = rng.choice(sorted(db.rows))
                send("d", row_id, schema)
                producer.send(key=f'{{"id":{row_id}}}'.encode(), raw=None)
        producer.flush()
        if round_ == 1:
            run_killed_between_branch_and_main(config, spark, monkeypatch)
        run_once(config, spark)

    # A truncate is no row change, and a value that does not decode has no key: each is kept as
    # a row of its own, and the row with that Kafka key is left alone.
    kept = sorted(db.rows)[0]
    producer.send(key=None, value=db.event("t", None, None), schema=v2)
    producer.send(key=f'{{"id":{kept}}}'.encode(), raw=b"not avro")
    producer.flush()
    run_once(config, spark)

    rows = table_rows(config)
    changed = [r for r in rows if r["value"] is not None]
    assert {r["value"]["id"]: r["value"] for r in changed} == db.rows
    assert len(changed) == len(db.rows) and kept in db.rows
    for r in changed:  # each row's lineage is its last change's
        op, lsn = db.last[r["value"]["id"]]
        source = dict(r["cdc"]["source"])  # PyIceberg reads a map as its entries
        assert (r["cdc"]["op"], source["lsn"]) == (op, str(lsn))
        assert (source["table"], source["snapshot"]) == ("customers", str(op == "r").lower())
        assert r["cdc"]["ts"] is not None
    kept_raw = sorted((r["value_error"], r["value_raw"]) for r in rows if r["value"] is None)
    assert [error.split(":")[0] for error, _ in kept_raw] == [
        "a truncate event (op t) is not applied",
        "not in the Confluent wire format",
    ]
    assert kept_raw[0][1][5:] and kept_raw[1][1] == b"not avro"

    assert sorted(tuple(r) for r in spark_rows(spark, config)) == sorted(
        (r["value"]["id"], r["value"]["name"], r["value"]["email"], r["value"]["tier"])
        for r in changed
    )
    assert sorted(
        duckdb_rows(config, "value.id, value.name, value.email, value.tier", "value IS NOT NULL")
    ) == sorted(tuple(r) for r in spark_rows(spark, config))
    files = delete_files(spark, config)
    assert files and {(f["content"], f["file_format"]) for f in files} == {(1, "PUFFIN")}
    assert load_table(config).format_version == 3


def test_cdc_of_json_envelopes_keyed_by_a_field_of_the_row(stack, spark, tmp_path, unique_name):
    """JSON envelopes, bare or in the JSON converter's schema/payload wrapper, keyed by the
    row's id: the last change per key in a batch applies, a delete finds its row by the before
    image."""
    topic = cdc_topic(stack, unique_name)
    registry = SchemaRegistryClient({"url": stack.registry_url})
    registry.register_schema(f"{topic}-value", Schema(json.dumps(envelope(ROW_V1)), "AVRO"))
    config = job_config(stack, tmp_path, topic, fmt="json", mode="cdc", key_columns=("id",))
    producer = Producer({"bootstrap.servers": stack.bootstrap})
    db = Database()
    wrapped = iter([False, True] * 100)

    def send(op: str, row_id: int, **fields) -> None:
        event = db.change(op, row_id, **fields)
        if next(wrapped):
            event = {"schema": {"type": "struct", "optional": False}, "payload": event}
        producer.produce(
            topic, key=str(row_id).encode(), value=json.dumps(event).encode(), partition=0
        )

    for i in range(10):
        send("c", i, name=f"customer {i}")
    producer.flush()
    run_once(config, spark)

    send("u", 0, name="renamed once")
    send("u", 0, name="renamed twice")
    send("u", 1, name="renamed, then deleted")
    send("d", 1)
    send("d", 2)
    send("c", 2, name="deleted, then made again")
    send("d", 3)
    producer.produce(topic, key=b"4", value=b'{"op": "u", "after": ', partition=0)
    producer.flush()
    run_once(config, spark)

    rows = table_rows(config)
    assert {
        r["value"]["id"]: (r["value"]["name"], r["cdc"]["op"])
        for r in rows
        if r["value"] is not None
    } == {i: (row["name"], db.last[i][0]) for i, row in db.rows.items()}
    assert sorted(db.rows) == [0, 2, 4, 5, 6, 7, 8, 9]
    bad = [r for r in rows if r["value"] is None]
    assert len(bad) == 1 and bad[0]["value_raw"] == b'{"op": "u", "after": '


def test_cdc_keyed_by_debeziums_json_key_decoded_by_its_subject(
    stack, spark, tmp_path, unique_name
):
    """Debezium's key is the row's primary key, ``{"id": 1}`` in JSON.  Decoded by its own
    subject (key.format json), the key's fields identify the row, whatever the bytes: a key
    written with other spacing or field order finds the same row."""
    from floe_sparkapp.config import parse_config

    topic = cdc_topic(stack, unique_name)
    registry = SchemaRegistryClient({"url": stack.registry_url})
    registry.register_schema(f"{topic}-value", Schema(json.dumps(envelope(ROW_V1)), "AVRO"))
    registry.register_schema(
        f"{topic}-key",
        Schema(
            json.dumps(
                {
                    "type": "record",
                    "name": "Key",
                    "namespace": NAMESPACE,
                    "fields": [{"name": "id", "type": "int"}],
                }
            ),
            "AVRO",
        ),
    )
    base = job_config(stack, tmp_path, topic, fmt="json", mode="cdc")
    data = base.model_dump(by_alias=True, mode="json", exclude_none=True)
    data["key"] = {"format": "json", "subject": f"{topic}-key"}
    config = parse_config(data)
    producer = Producer({"bootstrap.servers": stack.bootstrap})
    db = Database()
    spacing = iter(['{"id":%d}', '{ "id" : %d }'] * 100)

    def send(op: str, row_id: int, **fields) -> None:
        key = (next(spacing) % row_id).encode()
        producer.produce(
            topic, key=key, value=json.dumps(db.change(op, row_id, **fields)), partition=row_id % 3
        )
        if op == "d":  # Debezium's tombstone after a delete
            producer.produce(topic, key=key, value=None, partition=row_id % 3)

    for i in range(20):
        send("r", i, name=f"customer {i}")
    producer.flush()
    run_once(config, spark)
    for i in range(20):
        send("u", i, name=f"renamed {i}")
    for i in range(0, 20, 4):
        send("d", i)
    producer.produce(topic, key=b"[1]", value=json.dumps(db.change("u", 1, name="x")), partition=1)
    producer.flush()
    run_once(config, spark)

    rows = table_rows(config)
    applied = [r for r in rows if r["value_error"] is None]
    source = {i: {k: v for k, v in row.items() if k != "tier"} for i, row in db.rows.items()}
    source[1]["name"] = "renamed 1"  # its last change came with a key that is not the row's
    assert {r["key_fields"]["id"]: r["value"] for r in applied} == source
    assert len(applied) == 15  # one row per id, whichever spacing its key had
    [kept] = [r for r in rows if r["value_error"]]
    assert kept["key"] == b"[1]"
    assert kept["value_error"] == "key is not a JSON object matching the table's key_fields"
