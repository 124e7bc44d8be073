"""The ingestion job end to end: Avro topic in, one row per record out, exactly once."""

from __future__ import annotations

import io
import json
import logging
import time
import uuid
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import fastavro
import pytest
from confluent_kafka.serialization import MessageField, SerializationContext
from prometheus_client import REGISTRY

from floe_sparkapp.contract import RAW_REASONS
from floe_sparkapp.job import start
from floe_sparkapp.ledger import last_commit

from .jobkit import (
    AvroProducer,
    assert_exactly_once,
    consume_to_end,
    create_topic,
    duckdb_rows,
    group_offsets,
    job_config,
    load_table,
    run_once,
    table_rows,
    valid_through,
)

pytestmark = pytest.mark.integration

LINE = {
    "type": "record",
    "name": "Line",
    "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}],
}
V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "tags", "type": {"type": "map", "values": "string"}},
        {"name": "lines", "type": {"type": "array", "items": LINE}},
        {"name": "quantity", "type": "int"},
    ],
}
V2 = {
    **V1,
    "fields": V1["fields"] + [{"name": "note", "type": ["null", "string"], "default": None}],
}


def order(i: int, version: int) -> dict:
    value = {
        "id": i,
        "item": f"item-{i}",
        "status": "PAID" if i % 2 else "NEW",
        "price": Decimal(i) / 4,
        "day": date(2026, 11, 1 + i % 20),
        "at": datetime(2026, 11, 22, 10, i % 60, tzinfo=timezone.utc),
        "ref": str(uuid.UUID(int=i)),
        "tags": {"n": str(i)},
        "lines": [{"sku": f"s{i}", "qty": i % 7}],
        "quantity": i % 100,
    }
    if version == 2:
        value["note"] = f"note {i}" if i % 3 else None
    return value


def produce_orders(producer: AvroProducer, start_at: int, count: int) -> None:
    """Orders start_at .. start_at+count-1 as V1 records keyed k<i>, flushed."""
    for i in range(start_at, start_at + count):
        producer.send(key=f"k{i}".encode(), value=order(i, 1), schema=V1)
    producer.flush()


def normalize(value: dict | None) -> dict | None:
    if value is None:
        return None
    out = dict(value)
    out["price"] = Decimal(out["price"]).quantize(Decimal("0.01"))
    if isinstance(out["ref"], bytes):
        out["ref"] = str(uuid.UUID(bytes=out["ref"]))
    out["ref"] = str(out["ref"])
    out["tags"] = dict(out["tags"])
    out["at"] = out["at"].astimezone(timezone.utc)
    out.setdefault("note", None)
    return out


def sample(name: str, labels: dict[str, str]) -> float:
    """A metric of the job as its driver serves it (each test's table is its own)."""
    found = REGISTRY.get_sample_value(name, labels)
    return 0.0 if found is None else found


@pytest.mark.parametrize("catalog", ["sqlite", "postgresql", "rest"])
def test_avro_topic_lands_exactly_once_with_lineage(
    stack, spark, tmp_path, unique_name, caplog, catalog
):
    caplog.set_level(logging.INFO)
    topic = f"orders-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=3)
    producer = AvroProducer(stack, topic)
    for i in range(300):
        version = 1 if i < 150 else 2
        producer.send(
            key=f"k{i}".encode(),
            value=order(i, version),
            schema=V1 if version == 1 else V2,
            headers=[("trace", f"t{i}".encode())],
        )
    for i in range(5):  # tombstones
        producer.send(key=f"gone{i}".encode(), raw=None)
    producer.flush()
    config = job_config(stack, tmp_path, topic, catalog=catalog)

    query = start(config, spark, available_now=True)
    query.awaitTermination(600)
    assert query.exception() is None

    rows = table_rows(config)
    by_position = {(r["kafka"]["partition"], r["kafka"]["offset"]): r for r in rows}
    assert len(rows) == len(producer.sent) == 305
    assert set(by_position) == set(producer.sent)
    for position, sent in producer.sent.items():
        row = by_position[position]
        assert row["key"] == sent["key"]
        assert row["kafka"]["topic"] == topic
        assert [(h["key"], h["value"]) for h in row["kafka"]["headers"] or []] == sent["headers"]
        assert normalize(row["value"]) == normalize(sent["value"])
        assert row["value_raw"] is None and row["value_error"] is None
        if sent["value"] is None:
            assert row["kafka"]["schema_id"] is None
    schema_ids = {r["kafka"]["schema_id"] for r in rows if r["value"] is not None}
    assert len(schema_ids) == 2  # two writer schema versions, one table schema
    # DuckDB reads the same rows
    assert sorted(duckdb_rows(config, "kafka.partition, kafka.offset, key, value.id")) == sorted(
        (
            r["kafka"]["partition"],
            r["kafka"]["offset"],
            r["key"],
            r["value"]["id"] if r["value"] else None,
        )
        for r in rows
    )

    table = load_table(config)
    committed = last_commit(table, config.writer)
    assert committed.offsets == producer.next_offsets()
    # valid through: every partition has landed its records up to the least of the
    # partitions' newest timestamps
    assert committed.vtts == valid_through(rows)
    summary = table.snapshot_by_id(committed.snapshot_id).summary
    assert summary.get("floe.writer") == "data/orders"
    assert summary.get("floe.topic") == topic
    assert group_offsets(stack, config, [0, 1, 2]) == producer.next_offsets()
    assert [f.name for f in table.schema().find_field("value").field_type.fields][-1] == "note"

    # The job reports its progress as structured log lines.
    batches = [
        json.loads(r.getMessage())
        for r in caplog.records
        if r.name == "floe.job" and r.getMessage().startswith('{"event": "floe.batch"')
    ]
    assert sum(b["rows"] for b in batches) == 305
    assert all(b["decode_failures"] == 0 and b["commit_seconds"] > 0 for b in batches)
    # each with the driver's time by step, which together stay within the batch's
    landing = [b for b in batches if b["rows"]]
    assert landing and all(
        {"load_table", "ledger", "decode_plan", "write", "commit"} <= set(b["steps"])
        for b in landing
    ), landing
    assert all(sum(b["steps"].values()) <= b["seconds"] + 0.01 for b in batches), batches

    def progress_rows() -> int:  # the listener's events arrive asynchronously, other
        # queries' late ones too: only this query's count
        events = [
            json.loads(r.getMessage())
            for r in caplog.records
            if r.name == "floe.metrics" and '"floe.progress"' in r.getMessage()
        ]
        return sum(e["input_rows"] for e in events if e["id"] == str(query.id))

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and progress_rows() < 305:
        time.sleep(0.5)
    assert progress_rows() == 305

    # ... and as the Prometheus metrics its driver serves.
    table_label = {"table": config.table.identifier}
    assert sample("floe_job_rows_total", table_label) == 305
    assert sample("floe_job_commits_total", table_label) >= 1
    assert (
        sum(
            sample("floe_job_records_raw_total", {**table_label, "reason": reason})
            for reason in RAW_REASONS
        )
        == 0
    )
    committed_offsets = {
        p: sample("floe_job_committed_offset", {**table_label, "partition": str(p)})
        for p in range(3)
    }
    assert committed_offsets == producer.next_offsets()
    assert all(
        sample("floe_job_schema_seen_timestamp_seconds", {"schema_id": str(i)}) > 0
        for i in schema_ids
    )
    assert sample("floe_job_landed_timestamp_seconds", table_label) > 0

    # A second run with nothing new commits nothing and lands no row twice.
    snapshots = len(table.snapshots())
    query = start(config, spark, available_now=True)
    query.awaitTermination(300)
    table.refresh()
    assert len(table.snapshots()) == snapshots
    assert len(table_rows(config)) == 305


def test_poison_records_land_raw_with_their_reason_and_in_the_dead_letter_topic(
    stack, spark, tmp_path, unique_name
):
    topic = f"poison-{unique_name}".replace("_", "-")
    dlq = f"{topic}.dlq"
    create_topic(stack.bootstrap, topic, partitions=1)
    create_topic(stack.bootstrap, dlq, partitions=1)
    producer = AvroProducer(stack, topic)
    producer.send(key=b"good-1", value=order(1, 1), schema=V1)
    serialize = next(iter(producer.serializers.values()))
    good = serialize(order(2, 1), SerializationContext(topic, MessageField.VALUE))
    wide = {
        **V1,
        "fields": [
            f if f["name"] != "price" else {**f, "type": {**f["type"], "precision": 30}}
            for f in V1["fields"]
        ],
    }
    body = io.BytesIO()
    fastavro.schemaless_writer(
        body,
        fastavro.parse_schema(wide),
        {**order(3, 1), "price": Decimal("123456789012345678.90")},
    )
    poison = {
        b"does-not-fit": good[:5] + body.getvalue(),
        b"bad-magic": b"\x01" + good[1:],
        b"too-short": b"\x00\x00\x01",
        b"unknown-id": b"\x00" + (987654).to_bytes(4, "big") + good[5:],
        b"truncated": good[:12],
        b"not-avro": b"\x00" + good[1:5] + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
    }
    for key, payload in poison.items():
        producer.send(key=key, raw=payload, headers=[("origin", b"test")])
    producer.send(key=b"good-2", value=order(2, 1), schema=V1)
    producer.flush()
    config = job_config(stack, tmp_path, topic, dead_letter=dlq)

    query = start(config, spark, available_now=True)
    query.awaitTermination(600)
    assert query.exception() is None

    rows = {r["key"]: r for r in table_rows(config)}
    assert len(rows) == 8
    assert normalize(rows[b"good-1"]["value"]) == normalize(order(1, 1))
    assert normalize(rows[b"good-2"]["value"]) == normalize(order(2, 1))
    errors = {key: rows[key]["value_error"] for key in poison}
    assert errors == {
        b"bad-magic": "not in the Confluent wire format: first byte 0x01, expected 0x00",
        b"too-short": "value is 3 bytes, shorter than the 5-byte Confluent header",
        b"unknown-id": "unknown schema id 987654: the schema registry has no schema with this id",
        b"truncated": errors[b"truncated"],
        b"not-avro": errors[b"not-avro"],
        b"does-not-fit": errors[b"does-not-fit"],
    }
    schema_id = int.from_bytes(good[1:5], "big")
    for key in (b"truncated", b"not-avro", b"does-not-fit"):
        assert errors[key] == (
            f"Avro value could not be decoded with its writer schema id "
            f"{schema_id} (truncated, corrupt, or a value out of its type's range)"
        )
    for key, payload in poison.items():
        assert rows[key]["value"] is None
        assert rows[key]["value_raw"] == payload

    # The job's metrics count the records kept raw by reason, and the dead letters sent.
    table_label = {"table": config.table.identifier}
    assert {
        reason: sample("floe_job_records_raw_total", {**table_label, "reason": reason})
        for reason in RAW_REASONS
    } == {**dict.fromkeys(RAW_REASONS, 0), "not_framed": 2, "unknown_schema": 1, "undecodable": 3}
    assert sample("floe_job_rows_total", table_label) == 8
    assert sample("floe_job_dead_letters_total", table_label) == 6
    assert sample("floe_job_dead_letter_failures_total", table_label) == 0

    found = consume_to_end(stack, dlq)
    dead = {m.key(): m for m in found}
    assert set(dead) == set(poison) and len(found) == len(poison)
    for key, message in dead.items():
        headers = dict(message.headers())
        assert message.value() == poison[key]
        assert headers["origin"] == b"test"
        assert headers["floe.error"].decode() == errors[key]
        assert headers["floe.topic"].decode() == topic


def files(table, snapshot_id: int) -> list:
    """The data files of ``table``'s snapshot ``snapshot_id``."""
    return [task.file for task in table.scan(snapshot_id=snapshot_id).plan_files()]


def column(data_file, *path: str) -> list:
    """The values of the column at ``path`` in ``data_file``, in the file's order."""
    import pyarrow.parquet as pq

    rows = pq.read_table(data_file.file_path.removeprefix("file:")).to_pylist()
    values = []
    for row in rows:
        for name in path:
            row = row[name]
        values.append(row)
    return values


def test_data_files_keep_the_tables_sort_order_and_a_users_own(stack, spark, tmp_path, unique_name):
    """An append writes each file in floe's order, kafka.partition then kafka.offset, and says
    so (its sort order id), also when one Kafka partition's records alternate between two days'
    table partitions; once a user gives the table a sort order of their own, new files follow
    that one."""
    from pyiceberg.transforms import IdentityTransform

    topic = f"sorted-{unique_name}".replace("_", "-")
    # (fixed days: the topic keeps them, where the broker's retention would delete them a week on)
    create_topic(stack.bootstrap, topic, partitions=2, config={"retention.ms": "-1"})
    producer = AvroProducer(stack, topic)
    days = (
        int(datetime(2026, 11, 20, tzinfo=timezone.utc).timestamp() * 1000),
        int(datetime(2026, 11, 21, tzinfo=timezone.utc).timestamp() * 1000),
    )
    for i in range(200):
        producer.send(
            key=f"k{i}".encode(),
            value=order(i, 1),
            schema=V1,
            partition=i % 2,
            timestamp_ms=days[(i // 2) % 2] + i,
        )
    producer.flush()
    config = job_config(stack, tmp_path, topic)
    run_once(config, spark)

    table = load_table(config)
    floe_order = table.sort_order()
    assert [table.schema().find_column_name(f.source_id) for f in floe_order.fields] == [
        "kafka.partition",
        "kafka.offset",
    ]
    first = files(table, table.current_snapshot().snapshot_id)
    assert len(first) == 4  # two Kafka partitions × two days
    for data_file in first:
        assert data_file.sort_order_id == floe_order.order_id
        assert len(set(column(data_file, "kafka", "partition"))) == 1
        offsets = column(data_file, "kafka", "offset")
        assert offsets == sorted(offsets) and len(offsets) == 50
    assert len(table_rows(config)) == 200

    with table.update_sort_order() as update:
        update.desc("value.id", IdentityTransform())
    table = load_table(config)
    users = table.sort_order()
    assert users.order_id != floe_order.order_id
    for i in range(200, 260):
        producer.send(key=f"k{i}".encode(), value=order(i, 1), schema=V1, partition=0)
    producer.flush()
    run_once(config, spark)
    table = load_table(config)
    before = {f.file_path for f in first}
    added = [
        f for f in files(table, table.current_snapshot().snapshot_id) if f.file_path not in before
    ]
    assert added
    for data_file in added:
        assert data_file.sort_order_id == users.order_id
        ids = column(data_file, "value", "id")
        assert ids == sorted(ids, reverse=True)
    assert sorted(r["value"]["id"] for r in table_rows(config)) == list(range(260))


def test_a_small_batch_over_many_partitions_is_written_in_one_file_a_core(
    stack, spark, tmp_path, unique_name
):
    """A batch of a few records from each of many Kafka partitions is written by one task a
    core, not one a partition: the commit adds a file a core (the tests' session has two),
    each in floe's order, and is valid through the partitions' newest records."""
    topic = f"spread-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=12)
    producer = AvroProducer(stack, topic)
    for i in range(240):
        producer.send(key=f"k{i}".encode(), value=order(i, 1), schema=V1, partition=i % 12)
    producer.flush()
    config = job_config(stack, tmp_path, topic)
    run_once(config, spark)

    rows = table_rows(config)
    assert_exactly_once(rows, producer.sent)
    table = load_table(config)
    committed = last_commit(table, config.writer)
    assert committed.offsets == producer.next_offsets()
    assert committed.vtts == valid_through(rows)
    written = files(table, committed.snapshot_id)
    assert len(written) == 2, [f.file_path for f in written]
    for data_file in written:
        assert data_file.sort_order_id == table.sort_order().order_id
        positions = list(
            zip(column(data_file, "kafka", "partition"), column(data_file, "kafka", "offset"))
        )
        assert positions == sorted(positions) and len({p for p, _ in positions}) > 1


def test_the_ingest_timestamp_grows_per_partition_even_when_the_clock_goes_back(
    stack, spark, tmp_path, unique_name, monkeypatch
):
    """kafka.ingest_timestamp is when floe landed a record (its batch's time): beside the
    producer's kafka.timestamp, never before an earlier commit's in the partition, even when
    the job's next driver runs on a node whose clock is an hour behind."""
    from floe_sparkapp import batch_write

    topic = f"ingest-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = AvroProducer(stack, topic)
    for i in range(120):
        producer.send(key=f"k{i}".encode(), value=order(i, 1), schema=V1)
    producer.flush()
    config = job_config(stack, tmp_path, topic, max_records=40)
    before = datetime.now(timezone.utc)
    run_once(config, spark)
    after = datetime.now(timezone.utc)

    def landed() -> dict[int, list[datetime]]:
        found: dict[int, list] = {}
        for row in sorted(
            table_rows(config), key=lambda r: (r["kafka"]["partition"], r["kafka"]["offset"])
        ):
            found.setdefault(row["kafka"]["partition"], []).append(row["kafka"]["ingest_timestamp"])
        return found

    first = landed()
    times = [t for partition in first.values() for t in partition]
    assert len(times) == 120 and all(before <= t <= after for t in times)
    assert all(p == sorted(p) for p in first.values())
    assert len(set(times)) >= 3  # one time per batch: 120 records, 40 a commit
    table = load_table(config)
    last_commit_at = datetime.fromtimestamp(
        table.current_snapshot().timestamp_ms / 1000, timezone.utc
    )
    assert max(times) < last_commit_at

    behind = time.time_ns() - 3600 * 10**9
    monkeypatch.setattr(batch_write, "clock", lambda: behind)
    for i in range(120, 140):
        producer.send(key=f"k{i}".encode(), value=order(i, 1), schema=V1)
    producer.flush()
    run_once(config, spark)
    second = landed()
    for partition, stamps in second.items():
        assert stamps == sorted(stamps) and stamps[: len(first[partition])] == first[partition]
    new = {t for p, stamps in second.items() for t in stamps[len(first[p]) :]}
    assert new == {last_commit_at + timedelta(milliseconds=1)}
