"""Schema changes in the registry while the job streams, and the other value formats."""

from __future__ import annotations

import json

import pytest
import requests

from floe_sparkapp.job import run, start
from floe_sparkapp.ledger import last_commit

from .jobkit import (
    AvroProducer,
    create_topic,
    job_config,
    load_table,
    table_rows,
    valid_through,
    wait_for_rows,
)
from .test_job_roundtrip import V1, V2, normalize, order

pytestmark = pytest.mark.integration


def test_additive_version_adds_a_column_without_restart_and_breaking_one_is_kept_raw(
    stack, spark, tmp_path, unique_name
):
    topic = f"evolve-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = AvroProducer(stack, topic)
    for i in range(40):
        producer.send(key=f"v1-{i}".encode(), value=order(i, 1), schema=V1)
    producer.flush()
    config = job_config(stack, tmp_path, topic, interval=1)
    query = start(config, spark)
    try:
        wait_for_rows(config, 40)
        assert "note" not in [
            f.name for f in load_table(config).schema().find_field("value").field_type.fields
        ]

        for i in range(40, 80):  # a new optional field, registered by the producer
            producer.send(key=f"v2-{i}".encode(), value=order(i, 2), schema=V2)
        producer.flush()
        wait_for_rows(config, 80)

        # A breaking change: quantity becomes a string. The registry must be told to accept it.
        subject = f"{topic}-value"
        requests.put(
            f"{stack.registry_url}/config/{subject}", json={"compatibility": "NONE"}, timeout=10
        ).raise_for_status()
        v3 = {
            **V2,
            "fields": [
                f if f["name"] != "quantity" else {"name": "quantity", "type": "string"}
                for f in V2["fields"]
            ],
        }
        for i in range(80, 90):
            value = {**order(i, 2), "quantity": f"{i} pieces"}
            producer.send(key=f"v3-{i}".encode(), value=value, schema=v3)
        producer.flush()
        rows = wait_for_rows(config, 90)
    finally:
        query.stop()
    assert query.exception() is None

    by_key = {r["key"].decode(): r for r in rows}
    assert len(rows) == 90
    assert by_key["v1-3"]["value"]["note"] is None  # older rows: the new column is null
    assert normalize(by_key["v2-44"]["value"]) == normalize(order(44, 2))
    breaking = by_key["v3-85"]
    assert breaking["value"] is None
    assert (
        breaking["value_raw"]
        == producer.sent[next(p for p, s in producer.sent.items() if s["key"] == b"v3-85")][
            "payload"
        ]
    )
    assert breaking["value_error"].endswith(
        "breaking schema change: value.quantity: type changed from int to string"
    )
    value_fields = load_table(config).schema().find_field("value").field_type
    assert str(value_fields.field_by_name("quantity").field_type) == "int"  # table unchanged


def test_json_values_are_parsed_against_the_table_schema(stack, spark, tmp_path, unique_name):
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    topic = f"json-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=1)
    schema = {
        "type": "record",
        "name": "Event",
        "fields": [{"name": "id", "type": "long"}, {"name": "kind", "type": "string"}],
    }
    SchemaRegistryClient({"url": stack.registry_url}).register_schema(
        f"{topic}-value", Schema(json.dumps(schema), "AVRO")
    )
    producer = Producer({"bootstrap.servers": stack.bootstrap})
    payloads = [
        b'{"id": 1, "kind": "click"}',
        b'{"id": 2, "kind": "view", "extra": true}',
        b"not json at all",
        None,
        b'{"id": "not a number", "kind": "click"}',
    ]
    for i, payload in enumerate(payloads):
        producer.produce(topic, key=str(i).encode(), value=payload)
    producer.flush(30)
    config = job_config(stack, tmp_path, topic, fmt="json")

    run(config, spark, available_now=True, timeout=600)

    rows = {r["key"]: r for r in table_rows(config)}
    assert rows[b"0"]["value"] == {"id": 1, "kind": "click"}
    assert rows[b"1"]["value"] == {"id": 2, "kind": "view"}
    assert rows[b"2"]["value"] is None and rows[b"2"]["value_raw"] == b"not json at all"
    assert rows[b"2"]["value_error"] == "value is not a JSON object matching the table schema"
    assert rows[b"3"]["value"] is None and rows[b"3"]["value_error"] is None  # tombstone
    # A value that does not fit its column is kept raw too.
    assert rows[b"4"]["value"] is None and rows[b"4"]["value_raw"] == payloads[4]
    assert rows[b"4"]["value_error"] == "value is not a JSON object matching the table schema"


def test_raw_format_keeps_the_bytes(stack, spark, tmp_path, unique_name):
    from confluent_kafka import Producer

    topic = f"raw-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": stack.bootstrap})
    values = {f"k{i}".encode(): bytes([i % 256]) * (i + 1) for i in range(50)}
    for key, value in values.items():
        producer.produce(topic, key=key, value=value)
    producer.flush(30)
    config = job_config(stack, tmp_path, topic, fmt="raw")

    run(config, spark, available_now=True, timeout=600)

    rows = table_rows(config)
    assert {r["key"]: r["value_raw"] for r in rows} == values
    assert all(r["value_error"] is None for r in rows)
    assert "value" not in [f.name for f in load_table(config).schema().fields]


def test_a_recursive_schema_is_decoded_but_for_its_recursive_part_which_is_kept_raw(
    stack, spark, tmp_path, unique_name
):
    topic = f"tree-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=1)
    node = {
        "type": "record",
        "name": "Node",
        "fields": [
            {"name": "label", "type": "string"},
            {"name": "children", "type": {"type": "array", "items": "Node"}},
        ],
    }
    producer = AvroProducer(stack, topic)
    producer.send(key=b"first", value=order(1, 1), schema=V1)  # the table comes from V1
    producer.flush()
    config = job_config(stack, tmp_path, topic)
    run(config, spark, available_now=True, timeout=600)

    producer.send(
        key=b"tree",
        value={"label": "root", "children": [{"label": "leaf", "children": []}]},
        schema=node,
    )
    producer.send(key=b"second", value=order(2, 1), schema=V1)
    producer.flush()
    run(config, spark, available_now=True, timeout=600)

    rows = {r["key"]: r for r in table_rows(config)}
    second = rows[b"second"]["value"]
    assert normalize({k: second[k] for k in order(2, 1)}) == normalize(order(2, 1))
    tree = rows[b"tree"]
    sent = next(s for s in producer.sent.values() if s["key"] == b"tree")
    assert tree["value"]["label"] == "root"  # the rest of the record is decoded
    assert "children" not in tree["value"]
    assert tree["value_raw"] == sent["payload"]  # the recursive part is kept, raw
    assert tree["value_error"].startswith("recursive field(s) children of writer schema id ")


def test_a_batch_of_versions_the_job_has_not_seen_lands_each_in_its_columns(
    stack, spark, tmp_path, unique_name, caplog
):
    """Four writer versions, each adding a field, registered after the job last ran and mixed
    in one batch: all decode, the table evolved for each, the batch decoded again once (the
    three the job did not plan for are found in one go, though the first pass counts only the
    least and greatest of them).  The
    table keeps no column bounds, so the commit's valid-through time is counted from the
    records themselves."""
    import logging

    caplog.set_level(logging.INFO, logger="floe.job")
    topic = f"versions-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = AvroProducer(stack, topic)
    for i in range(10):
        producer.send(key=f"v1-{i}".encode(), value=order(i, 1), schema=V1)
    producer.flush()
    config = job_config(stack, tmp_path, topic)
    config = config.model_copy(
        update={
            "table": config.table.model_copy(
                update={"properties": {"write.metadata.metrics.default": "none"}}
            )
        }
    )
    run(config, spark, available_now=True, timeout=600)

    added = ("colour", "size", "weight", "shape")
    fields: list[dict] = []
    versions = []
    for name in added:
        fields = [*fields, {"name": name, "type": ["null", "string"], "default": None}]
        versions.append((name, {**V1, "fields": V1["fields"] + fields}))
    # registered in turn: shape, size, weight, then colour, the latest, which the job's start
    # evolves the table for; the other three need the table to evolve further
    turns = (3, 1, 2, 0)
    for i in range(12, 44):
        name, schema = versions[turns[i % 4]]
        value = {**order(i, 1), **{f: f"{f} {i}" for f in added[: turns[i % 4] + 1]}}
        producer.send(key=f"{name}-{i}".encode(), value=value, schema=schema)
    producer.flush()
    caplog.clear()
    run(config, spark, available_now=True, timeout=600)

    rows = table_rows(config)
    assert len(rows) == 42
    assert all(r["value_error"] is None for r in rows), {r["value_error"] for r in rows}
    for r in rows:
        i = r["value"]["id"]
        assert {f: r["value"][f] for f in added} == {
            f: f"{f} {i}" if i >= 10 and n <= turns[i % 4] else None for n, f in enumerate(added)
        }
    assert len({r["kafka"]["schema_id"] for r in rows}) == 5
    assert len([r for r in caplog.records if "decoding it again" in r.getMessage()]) == 1

    table = load_table(config)
    assert table.properties["write.metadata.metrics.default"] == "none"
    assert last_commit(table, config.writer).vtts == valid_through(rows)


@pytest.mark.faults
def test_schema_evolution_none_keeps_the_tables_schema_in_the_job(
    stack, spark, tmp_path, unique_name
):
    """`schemaEvolution.mode: none` reaches the job: a new field is left out, and a value that
    needs a wider column is kept raw with the reason, while the table keeps its schema."""
    from floe_sparkapp.config import parse_config

    topic = f"frozen-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=1)
    producer = AvroProducer(stack, topic)
    for i in range(10):
        producer.send(key=f"v1-{i}".encode(), value=order(i, 1), schema=V1)
    producer.flush()
    config = parse_config(
        {
            **json.loads(job_config(stack, tmp_path, topic).to_json()),
            "schemaEvolution": {"mode": "none"},
        }
    )
    run(config, spark, available_now=True, timeout=600)

    wide = {
        **V2,
        "fields": [
            f if f["name"] != "quantity" else {"name": "quantity", "type": "long"}
            for f in V2["fields"]
        ],
    }
    for i in range(10, 20):
        producer.send(key=f"v2-{i}".encode(), value=order(i, 2), schema=V2)
    for i in range(20, 25):
        producer.send(key=f"wide-{i}".encode(), value=order(i, 2), schema=wide)
    producer.flush()
    run(config, spark, available_now=True, timeout=600)

    rows = {r["key"].decode(): r for r in table_rows(config)}
    assert len(rows) == 25
    value_type = load_table(config).schema().find_field("value").field_type
    assert "note" not in [f.name for f in value_type.fields]
    assert str(value_type.field_by_name("quantity").field_type) == "int"
    expected = {k: v for k, v in order(14, 2).items() if k != "note"}
    assert normalize(rows["v2-14"]["value"]) == normalize(expected)
    kept = rows["wide-22"]
    assert kept["value"] is None and kept["value_raw"] is not None
    assert kept["value_error"].endswith(
        "schemaEvolution.mode is none and the table would have to change: "
        "value.quantity: int widened to long"
    )


@pytest.mark.faults
@pytest.mark.alone("registry")  # it takes the registry's next schema id
def test_a_schema_id_the_registry_did_not_know_decodes_once_it_is_registered(
    stack, spark, tmp_path, unique_name
):
    """A record framed with a schema id the registry does not know (yet) lands raw; once the
    schema is registered, the running job decodes that id's records: a 404 is not kept."""
    import io

    import fastavro
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    topic = f"late-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=1)
    producer = AvroProducer(stack, topic)
    for i in range(5):
        producer.send(key=f"v1-{i}".encode(), value=order(i, 1), schema=V1)
    producer.flush()
    registry = SchemaRegistryClient({"url": stack.registry_url})

    def new_content(tag: str) -> dict:
        return {**V1, "doc": f"{unique_name} {tag}"}

    # The registry numbers new schemas in turn: the next one will get the probe's id + 1.
    probe = registry.register_schema(
        f"{topic}-probe", Schema(json.dumps(new_content("probe")), "AVRO")
    )
    late = new_content("late")
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(late), order(5, 1))
    producer.send(key=b"early", raw=b"\x00" + (probe + 1).to_bytes(4, "big") + body.getvalue())
    producer.flush()
    config = job_config(stack, tmp_path, topic)
    query = start(config, spark)
    try:
        rows = {r["key"].decode(): r for r in wait_for_rows(config, 6)}
        assert rows["early"]["value_error"] == (
            f"unknown schema id {probe + 1}: the schema registry has no schema with this id"
        )

        assert registry.register_schema(f"{topic}-value", Schema(json.dumps(late), "AVRO")) == (
            probe + 1
        )
        for i in range(6, 11):
            producer.send(key=f"late-{i}".encode(), value=order(i, 1), schema=late)
        producer.flush()
        rows = {r["key"].decode(): r for r in wait_for_rows(config, 11)}
    finally:
        query.stop()
    assert query.exception() is None
    assert len(rows) == 11
    assert all(
        rows[f"late-{i}"]["value"] is not None and rows[f"late-{i}"]["value_error"] is None
        for i in range(6, 11)
    ), [rows[f"late-{i}"]["value_error"] for i in range(6, 11)]
    assert normalize(rows["late-8"]["value"]) == normalize(order(8, 1))


@pytest.mark.faults
def test_records_of_an_older_writer_after_an_approved_change_land_in_the_before_column(
    stack, spark, tmp_path, unique_name
):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from floe_sparkapp.avro_types import avro_to_iceberg
    from floe_sparkapp.evolution import apply_approved_breaking

    topic = f"approved-{unique_name}".replace("_", "-")
    subject = f"{topic}-value"
    create_topic(stack.bootstrap, topic, partitions=1)
    producer = AvroProducer(stack, topic)
    for i in range(10):
        producer.send(key=f"v1-{i}".encode(), value=order(i, 1), schema=V1)
    producer.flush()
    config = job_config(stack, tmp_path, topic, interval=1)
    query = start(config, spark)  # streams through the approval: it knows V1 from before
    try:
        wait_for_rows(config, 10)
        # item becomes a number: a breaking change, approved as the operator applies it.
        requests.put(
            f"{stack.registry_url}/config/{subject}", json={"compatibility": "NONE"}, timeout=10
        ).raise_for_status()
        numbered = {
            **V1,
            "fields": [
                f if f["name"] != "item" else {"name": "item", "type": "long"} for f in V1["fields"]
            ],
        }
        producer.send(key=b"v2-before", value={**order(10, 1), "item": 10}, schema=numbered)
        producer.flush()
        wait_for_rows(config, 11)
        version = (
            SchemaRegistryClient({"url": stack.registry_url}).get_latest_version(subject).version
        )
        incoming = avro_to_iceberg(json.dumps(numbered)).struct
        assert apply_approved_breaking(load_table(config), incoming, version) == [
            f"value.item -> item_before_v{version}"
        ]
        # Approving again (the annotation stays; another operator replica) changes nothing.
        schema_id = load_table(config).schema().schema_id
        assert apply_approved_breaking(load_table(config), incoming, version) == []
        assert load_table(config).schema().schema_id == schema_id

        # Old producers go on beside new ones: "item-11" would fail a cast to long (ANSI).
        for i in range(11, 21):
            if i % 2:
                producer.send(key=f"v1-{i}".encode(), value=order(i, 1), schema=V1)
            else:
                producer.send(
                    key=f"v2-{i}".encode(), value={**order(i, 1), "item": i}, schema=numbered
                )
        producer.flush()
        rows = wait_for_rows(config, 21, timeout=120)
    finally:
        query.stop()
    assert query.exception() is None

    before = f"item_before_v{version}"
    by_key = {r["key"].decode(): r for r in rows}
    assert len(rows) == 21
    for i in range(21):
        row = by_key.get(f"v1-{i}") or by_key.get(f"v2-{i}")
        if row is None:
            continue
        assert row["value_error"] is None, row["value_error"]
        if row["key"].startswith(b"v1-"):  # the old writer's strings, in the kept column
            assert (row["value"]["item"], row["value"][before]) == (None, f"item-{i}")
        else:
            assert (row["value"]["item"], row["value"][before]) == (i, None)
    # The record of the new version that came before the approval was kept raw meanwhile.
    assert by_key["v2-before"]["value"] is None and by_key["v2-before"]["value_raw"]
