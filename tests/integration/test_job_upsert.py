"""Upsert (``table.mode: upsert``): the table holds one row per key, the last record's; a
tombstone deletes the key's row; the changes are deletion vectors, read alike by PyIceberg and
Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .jobkit import (
    AvroProducer,
    create_topic,
    duckdb_rows,
    job_config,
    load_table,
    run_killed_between_branch_and_main,
    run_once,
    table_rows,
    with_sections,
)
from .test_job_roundtrip import V1, order

pytestmark = [pytest.mark.integration]

KEYS = 500


@pytest.fixture
def topic(stack, unique_name):
    name = f"upsert-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, name, partitions=4)
    return name


def update(producer: AvroProducer, i: int, *, key_field: bool = False) -> tuple[str, dict]:
    """Update number ``i``: key k<i mod 500>, its item naming the update."""
    k = i % KEYS
    value = {**order(k, 1), "item": f"update-{i}"}
    producer.send(key=f"k{k}".encode(), value=value, schema=V1)
    return f"k{k}", value


def spark_rows(spark, config) -> list:
    name = f"{config.table.catalog.name}.{config.table.identifier}"
    return spark.table(name).select("key", "value.id", "value.item").collect()


def delete_files(spark, config) -> list:
    name = f"{config.table.catalog.name}.{config.table.identifier}"
    return spark.sql(f"SELECT content, file_format FROM {name}.all_delete_files").collect()


def test_upsert_holds_the_last_record_per_key_through_crashes_and_tombstones(
    stack, spark, tmp_path, topic, monkeypatch
):
    producer = AvroProducer(stack, topic)
    config = job_config(stack, tmp_path, topic, mode="upsert", max_records=1000)
    latest: dict[str, dict] = {}

    # A crash after a batch's rows are on its branch, before main moves (round 1): the batch is
    # not committed, and the job started again applies it once.
    for round_ in range(4):  # 10,000 updates over 500 keys, in four runs of several batches
        for i in range(round_ * 2500, (round_ + 1) * 2500):
            key, value = update(producer, i)
            latest[key] = value
        producer.flush()
        if round_ == 1:
            run_killed_between_branch_and_main(config, spark, monkeypatch)
        run_once(config, spark)

    for k in range(50):  # tombstones delete keys k0 .. k49
        producer.send(key=f"k{k}".encode(), raw=None)
        latest.pop(f"k{k}")
    producer.flush()
    run_once(config, spark)

    rows = table_rows(config)
    assert len(rows) == len(latest) == KEYS - 50
    assert {r["key"].decode(): r["value"]["item"] for r in rows} == {
        k: v["item"] for k, v in latest.items()
    }
    expected = sorted((r["key"].decode(), r["value"]["id"], r["value"]["item"]) for r in rows)
    assert (
        sorted((r["key"].decode(), r["id"], r["item"]) for r in spark_rows(spark, config))
        == expected
    )
    assert (
        sorted(
            (key.decode(), i, item)
            for key, i, item in duckdb_rows(config, "key, value.id, value.item")
        )
        == expected
    )

    # Changed rows are deletion vectors (position deletes in Puffin files); no equality deletes.
    files = delete_files(spark, config)
    assert files and {(f["content"], f["file_format"]) for f in files} == {(1, "PUFFIN")}
    table = load_table(config)
    assert table.format_version == 3
    assert table.properties["floe.mode"] == "upsert"
    assert table.properties["write.merge.mode"] == "merge-on-read"


def metadata(table) -> dict:
    """The table's metadata file, an empty list of identifier fields written or not alike."""
    with table.io.new_input(table.metadata_location).open() as file:
        found = json.load(file)
    for schema in found["schemas"]:
        if schema.get("identifier-field-ids") == []:
            del schema["identifier-field-ids"]
    return found


@pytest.mark.faults
def test_a_batch_whose_branch_a_starting_driver_drops_between_its_deletes_and_its_append_starts_over(  # noqa: E501 - the name is the test's sentence
    stack, spark, tmp_path, topic, monkeypatch
):
    """A driver that starts drops the batch branches it finds (a zombie's still writing among
    them): the zombie's append, whose commit finds its branch gone, makes it again at main's
    head, without the deletes before it.  Its batch must start over, not move main there:
    each key keeps one row."""
    producer = AvroProducer(stack, topic)
    config = job_config(stack, tmp_path, topic, mode="upsert", max_records=1000)
    latest: dict[str, dict] = {}
    for i in range(100):  # keys k0 .. k99
        key, value = update(producer, i)
        latest[key] = value
    producer.flush()
    run_once(config, spark)
    for i in range(KEYS, KEYS + 100):  # the same keys again
        key, value = update(producer, i)
        latest[key] = value
    producer.flush()

    from pyspark.sql import functions as F
    from pyspark.sql.classic.dataframe import DataFrame

    # The batch's rows go through a filter that, in one task, drops the branches as a
    # starting driver does (sweep_branches): after the append has loaded the table, before
    # it commits.
    marker = str(tmp_path / "swept")
    catalog, identifier, writer = config.table.catalog, config.table.identifier, config.writer

    def sweep_once(_):  # in a Python worker, while the append writes the batch's files
        import os

        from floe_sparkapp.catalog import load_catalog
        from floe_sparkapp.commit import sweep_branches as sweep

        try:  # one task of the batch's sweeps (the others go on)
            claimed = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return True
        dropped = sweep(load_catalog(catalog).load_table(identifier), writer)
        os.write(claimed, ",".join(dropped).encode())
        os.close(claimed)
        return True

    swept_udf = F.udf(sweep_once, "boolean").asNondeterministic()
    write_to = DataFrame.writeTo

    def swept_while_written(frame, target):
        if "branch_" in target:
            frame = frame.filter(swept_udf(F.lit(1)))
        return write_to(frame, target)

    monkeypatch.setattr(DataFrame, "writeTo", swept_while_written)
    run_once(config, spark)

    assert Path(marker).read_text()  # the batch's branch was there to drop
    rows = table_rows(config)
    assert sorted(r["key"].decode() for r in rows) == sorted(latest)
    assert {r["key"].decode(): r["value"]["item"] for r in rows} == {
        k: v["item"] for k, v in latest.items()
    }


def test_pyiceberg_changing_a_version_3_table_keeps_what_iceberg_java_wrote(
    stack, spark, tmp_path, topic
):
    """floe changes an upsert table's metadata with PyIceberg (its writer, schema, tags) between
    the job's commits, which Iceberg Java writes: the file PyIceberg writes keeps every field
    of the one Java wrote (row lineage included), and Spark goes on reading and writing it."""
    producer = AvroProducer(stack, topic)
    config = job_config(stack, tmp_path, topic, mode="upsert")
    for i in range(1200):
        update(producer, i)
    producer.flush()
    run_once(config, spark)
    table = load_table(config)
    before = metadata(table)
    assert before["format-version"] == 3 and before["next-row-id"] > 0
    assert all("first-row-id" in s for s in before["snapshots"] if s["sequence-number"] > 1)

    with table.transaction() as change:
        change.set_properties({"owner-team": "orders"})
    after = metadata(load_table(config))
    assert after["properties"] == {**before["properties"], "owner-team": "orders"}
    changed = {"properties", "last-updated-ms", "metadata-log"}
    assert {k: v for k, v in after.items() if k not in changed} == {
        k: v for k, v in before.items() if k not in changed
    }

    for i in range(1200, 1300):
        update(producer, i)
    producer.flush()
    run_once(config, spark)
    assert len(spark_rows(spark, config)) == len(table_rows(config)) == KEYS
    assert metadata(load_table(config))["next-row-id"] > before["next-row-id"]


def test_upsert_by_value_fields_applies_the_last_change_per_key_within_a_batch(
    stack, spark, tmp_path, topic
):
    producer = AvroProducer(stack, topic)
    config = job_config(stack, tmp_path, topic, mode="upsert", key_columns=("id",))

    def send(key: str, i: int | None, item: str = "") -> None:
        if i is None:
            producer.send(key=key.encode(), raw=None, partition=0)
        else:
            producer.send(
                key=key.encode(), value={**order(i, 1), "item": item}, schema=V1, partition=0
            )

    for i in range(5):
        send(f"a{i}", i, "first")
    producer.flush()
    run_once(config, spark)

    # One batch: id 0 updated twice; id 1 updated then deleted (tombstone of its Kafka key);
    # id 2 deleted then inserted again; id 3 updated under another Kafka key (the row follows
    # its value's id); a record that does not decode is a row of its own.
    send("a0", 0, "second")
    send("a0", 0, "third")
    send("a1", 1, "second")
    send("a1", None)
    send("a2", None)
    send("a2", 2, "again")
    send("b3", 3, "moved")
    producer.send(key=b"a4", raw=b"not avro", partition=0)
    producer.flush()
    run_once(config, spark)

    rows = table_rows(config)
    decoded = {
        r["value"]["id"]: (r["key"].decode(), r["value"]["item"])
        for r in rows
        if r["value"] is not None
    }
    assert decoded == {
        0: ("a0", "third"),
        2: ("a2", "again"),
        3: ("b3", "moved"),
        4: ("a4", "first"),
    }
    undecodable = [r for r in rows if r["value"] is None]
    assert len(undecodable) == 1 and undecodable[0]["value_raw"] == b"not avro"
    assert undecodable[0]["value_error"]
    assert len(rows) == 5


def test_upsert_by_a_text_field_replaces_rows_whatever_characters_their_keys_hold(
    stack, spark, tmp_path, topic
):
    # A commit names its keys' range in its statement: keys with quotes, backslashes and
    # letters outside ASCII, on either end of the range, replace their rows all the same.
    producer = AvroProducer(stack, topic)
    config = job_config(stack, tmp_path, topic, mode="upsert", key_columns=("item",))
    items = ["o'brien", "back\\slash", "\u00fcber", "plain", "'; DROP TABLE x; --", "~~~"]
    for round_ in (1, 2):
        for i, item in enumerate(items):
            producer.send(
                key=item.encode(),
                value={**order(i, 1), "item": item, "quantity": round_ * 10 + i},
                schema=V1,
                partition=i % 4,
            )
        producer.flush()
        run_once(config, spark)

    rows = table_rows(config)
    assert sorted((r["value"]["item"], r["value"]["quantity"]) for r in rows) == sorted(
        (item, 20 + i) for i, item in enumerate(items)
    )


KEY_V1 = {
    "type": "record",
    "name": "OrderKey",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}],
}
KEY_V2 = {
    **KEY_V1,
    "fields": [*KEY_V1["fields"], {"name": "shard", "type": ["null", "string"], "default": None}],
}


def test_upsert_keyed_by_the_avro_key_decoded_by_its_own_subject_across_key_versions(
    stack, spark, tmp_path, topic
):
    """A key in the registry's wire format carries its schema id in its bytes: a new key schema
    version changes the bytes of every key.  Decoded by its subject (key.format avro), the key
    fields identify the row, so records keyed by either version update one row, tombstones of
    either delete it, and the key's fields are a column to query."""
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from floe_sparkapp.config import parse_config

    producer = AvroProducer(stack, topic)
    keys = {
        json.dumps(s): AvroSerializer(producer.registry, json.dumps(s)) for s in (KEY_V1, KEY_V2)
    }
    context = SerializationContext(topic, MessageField.KEY)

    def key(schema: dict, i: int) -> bytes:
        fields = {"id": i} if schema is KEY_V1 else {"id": i, "shard": None}
        return keys[json.dumps(schema)](fields, context)

    base = job_config(stack, tmp_path, topic, mode="upsert", max_records=70)
    data = base.model_dump(by_alias=True, mode="json", exclude_none=True)
    data["key"] = {"format": "avro", "subject": f"{topic}-key"}
    config = parse_config(data)
    latest: dict[int, str] = {}
    for i in range(100):  # ids 0..19, five updates each, keys of version 1
        producer.send(
            key=key(KEY_V1, i % 20), value={**order(i % 20, 1), "item": f"a{i}"}, schema=V1
        )
        latest[i % 20] = f"a{i}"
    producer.flush()
    run_once(config, spark)
    assert len(table_rows(config)) == 20

    for i in range(0, 40, 2):  # half the ids updated again, keyed by version 2
        producer.send(
            key=key(KEY_V2, i % 20), value={**order(i % 20, 1), "item": f"b{i}"}, schema=V1
        )
        latest[i % 20] = f"b{i}"
    for i in range(5):  # tombstones: ids 0, 2 by version 2, ids 1, 3, 5 by version 1
        producer.send(
            key=key(KEY_V2 if i < 2 else KEY_V1, i * 2 if i < 2 else i * 2 - 3), value=None
        )
    for gone in (0, 2, 1, 3, 5):
        latest.pop(gone)
    producer.send(key=b"\x01not a framed key", value=order(99, 1), schema=V1)
    producer.flush()
    run_once(config, spark)

    rows = table_rows(config)
    [kept] = [r for r in rows if r["value_error"]]
    assert kept["key"] == b"\x01not a framed key" and kept["value"] is None
    assert (
        kept["value_error"] == "key not in the Confluent wire format: first byte 0x01, "
        "expected 0x00"
    )
    assert kept["value_raw"]  # the value's bytes, kept with the key's reason
    applied = [r for r in rows if not r["value_error"]]
    assert sorted(r["key_fields"]["id"] for r in applied) == sorted(latest)  # one row per id
    assert {r["key_fields"]["id"]: r["value"]["item"] for r in applied} == latest
    assert [
        f.name for f in load_table(config).schema().find_field("key_fields").field_type.fields
    ] == ["id", "shard"]
    assert sorted(
        spark.table(f"{config.table.catalog.name}.{config.table.identifier}")
        .filter("value_error IS NULL")
        .select("key_fields.id")
        .collect()
    ) == sorted((i,) for i in latest)


KEY_PROTO = """syntax = "proto3";
package shop;
message OrderKey { int64 id = 1;%s }
"""


def test_upsert_keyed_by_a_protobuf_key_decoded_by_its_own_subject(stack, spark, tmp_path, topic):
    """key.format protobuf: keys framed as Confluent's Protobuf serializer frames them (schema
    id, message index, message) decode into key_fields, which identify the row across key
    schema versions; a key that does not decode keeps its record raw with the reason."""
    from confluent_kafka.schema_registry import Schema

    from .test_job_formats import framed, message_class

    producer = AvroProducer(stack, topic)
    versions = {}
    # A field added to a key is optional (presence): unset, it reads null, as the older
    # version's keys do, so both versions' keys of an id are one key.
    for version, extra in ((1, ""), (2, " optional string shard = 2;")):
        schema = KEY_PROTO % extra
        schema_id = producer.registry.register_schema(f"{topic}-key", Schema(schema, "PROTOBUF"))
        versions[version] = (schema_id, message_class(schema, (), "shop.OrderKey"))

    def key(version: int, i: int) -> bytes:
        schema_id, cls = versions[version]
        return framed(schema_id, cls(id=i).SerializeToString(), index=b"\x00")

    config = with_sections(
        job_config(stack, tmp_path, topic, mode="upsert"),
        key={"format": "protobuf", "subject": f"{topic}-key", "message": "shop.OrderKey"},
    )
    for i in range(10):
        producer.send(key=key(1, i), value={**order(i, 1), "item": f"a{i}"}, schema=V1, partition=0)
    producer.send(key=key(2, 3), value={**order(3, 1), "item": "b3"}, schema=V1, partition=0)
    producer.send(key=key(2, 4), value=None, partition=0)  # deletes id 4's row
    producer.send(key=key(1, 5)[:-1] + b"\xff", value=order(5, 1), schema=V1, partition=0)
    producer.flush()
    run_once(config, spark)

    rows = table_rows(config)
    [kept] = [r for r in rows if r["value_error"]]
    assert kept["value_error"].startswith(
        "Protobuf key could not be decoded as message shop.OrderKey of its writer schema id"
    )
    assert kept["value_raw"] and kept["value"] is None
    applied = {r["key_fields"]["id"]: r["value"]["item"] for r in rows if not r["value_error"]}
    assert applied == {**{i: f"a{i}" for i in range(10) if i != 4}, 3: "b3"}
    assert [
        f.name for f in load_table(config).schema().find_field("key_fields").field_type.fields
    ] == ["id", "shard"]
