"""Exactly once under what the job's neighbours do: a catalog that applies a commit and loses
its reply, a table replaced or rolled back to its root while the job runs, an expiry that cuts
``main``'s ancestry, a producer that writes bytes no deserializer expects.

Each test makes its fault at the one place it happens (the catalog's answer to a commit, the
table's metadata, the topic's bytes) and asserts what a user sees: every produced record is one
row, every file the table refers to is there, and the table's offsets are the real ones."""

from __future__ import annotations

import json
import shutil

import pytest
from confluent_kafka.schema_registry import Schema

from floe_sparkapp.commit import BranchCommitter
from floe_sparkapp.job import start
from floe_sparkapp.ledger import last_commit, offsets_tag

from .jobkit import (
    AvroProducer,
    assert_exactly_once,
    create_topic,
    job_config,
    load_table,
    local_job_env,
    run_once,
    streaming,
    table_rows,
    wait_for_rows,
)
from .test_job_formats import FramedProducer, framed
from .test_job_roundtrip import V1, order, produce_orders

pytestmark = [pytest.mark.integration, pytest.mark.faults]


@pytest.fixture
def topic(stack, unique_name):
    name = f"neighbours-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, name, partitions=3)
    return name


def _files_exist(config) -> None:
    """Every data file ``main`` refers to exists (a scan reads them all)."""
    table = load_table(config)
    tasks = list(table.scan().plan_files())
    missing = [t.file.file_path for t in tasks if not table.io.new_input(t.file.file_path).exists()]
    assert not missing, f"main refers to {len(missing)} missing data file(s), e.g. {missing[:3]}"


# What catalogs answer when a commit's reply is lost: Iceberg's JDBC catalog retries the UPDATE
# after the dropped connection, finds the table already changed and reports a conflict; a REST
# catalog's client times out and reports that it cannot tell.
LOST_REPLY = {
    "sqlite": "org.apache.iceberg.exceptions.CommitFailedException: Failed to update table "
    "analytics.t from catalog c",
    "postgresql": "org.apache.iceberg.exceptions.CommitFailedException: Failed to update table "
    "analytics.t from catalog c",
    "rest": "org.apache.iceberg.exceptions.CommitStateUnknownException: Read timed out",
}


@pytest.mark.parametrize(
    "catalog,mode", [("sqlite", "append"), ("rest", "append"), ("postgresql", "upsert")]
)
def test_a_commit_the_catalog_applied_but_reported_failed_lands_once_and_keeps_its_files(
    stack, spark, tmp_path, topic, monkeypatch, catalog, mode
):
    """The first batch's commit fails before it reaches the catalog (the connection refused);
    the next is applied and its reply lost.  The job looks before it discards anything: the
    batch lands once, no file it refers to is deleted, and the offsets are the table's."""
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 60)
    config = job_config(stack, tmp_path, topic, catalog=catalog, mode=mode)
    real = BranchCommitter._commit_metadata
    faults: list[str] = []

    def unreliable(self, operations, base, metadata):
        if not faults:
            faults.append("refused")
            raise RuntimeError("java.net.ConnectException: Connection refused")
        real(self, operations, base, metadata)
        if len(faults) == 1:
            faults.append("reply lost")
            raise RuntimeError(LOST_REPLY[catalog])

    with monkeypatch.context() as patched:
        patched.setattr(BranchCommitter, "_commit_metadata", unreliable)
        run_once(config, spark)
    assert faults == ["refused", "reply lost"]
    _files_exist(config)
    rows = table_rows(config)
    assert_exactly_once(rows, producer.sent)
    assert last_commit(load_table(config), config.writer, topic).offsets == producer.next_offsets()

    produce_orders(producer, 60, 30)  # and the job goes on from there
    run_once(config, spark)
    assert_exactly_once(table_rows(config), producer.sent)


@pytest.mark.holds("toxiproxy")
@pytest.mark.parametrize("neighbour", ["rest_catalog", "registry", "s3"])
def test_a_neighbour_down_in_the_middle_of_a_batch_lands_the_batch_once(
    stack, spark, tmp_path, topic, monkeypatch, neighbour
):
    """The REST catalog, the registry or the object store refuses every connection for 10 s,
    from the moment a batch has read the table's offsets and starts decoding: the batch waits
    for it within the job, lands once, and every file it refers to is there."""
    import threading

    from floe_sparkapp.table_writer import TableWriter

    from ..faultproxy import FaultProxy
    from .nemesis import faulty_config

    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 60)
    config = faulty_config(stack, job_config(stack, tmp_path, topic, catalog="rest"), "rest")
    proxy = FaultProxy(stack.env["FLOE_TOXIPROXY_URL"])
    proxy.reset()
    decode = TableWriter._decode
    outages: list[threading.Timer] = []

    def down_then_decode(self, *args, **kwargs):
        if not outages:
            proxy.enable(neighbour, False)
            outages.append(threading.Timer(10, proxy.enable, args=(neighbour, True)))
            outages[0].start()
        return decode(self, *args, **kwargs)

    try:
        with monkeypatch.context() as patched:
            patched.setattr(TableWriter, "_decode", down_then_decode)
            run_once(config, spark)
    finally:
        for timer in outages:
            timer.join()
        proxy.reset()
    assert outages
    _files_exist(config)
    assert_exactly_once(table_rows(config), producer.sent)
    assert last_commit(load_table(config), config.writer, topic).offsets == producer.next_offsets()


def test_a_batch_that_ends_on_a_transaction_marker_commits_past_it(stack, spark, tmp_path, topic):
    """The topic ends on a transaction's commit marker, which no batch sees as a row: the
    table's offsets are Kafka's end offsets (nothing left to read), a run with nothing new
    commits nothing, and the next records land once."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.serialization import MessageField, SerializationContext

    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 10)
    serialize = next(iter(producer.serializers.values()))
    transactional = Producer(
        {"bootstrap.servers": stack.bootstrap, "transactional.id": f"tx-{topic}"}
    )
    transactional.init_transactions(30)
    transactional.begin_transaction()
    context = SerializationContext(topic, MessageField.VALUE)
    for i in range(10, 15):
        transactional.produce(
            topic, key=f"tx{i}".encode(), partition=0, value=serialize(order(i, 1), context)
        )
    transactional.commit_transaction(30)
    config = job_config(stack, tmp_path, topic, max_records=4)  # batches of 4 offsets
    run_once(config, spark)

    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": "ends"})
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(3)
    }
    consumer.close()
    committed = last_commit(load_table(config), config.writer, topic).offsets
    assert {p: o for p, o in committed.items() if o} == {p: o for p, o in ends.items() if o}
    keys = sorted(r["key"] for r in table_rows(config))
    assert keys == sorted(
        [f"k{i}".encode() for i in range(10)] + [f"tx{i}".encode() for i in range(10, 15)]
    )
    snapshots = len(load_table(config).snapshots())
    run_once(config, spark)
    assert len(load_table(config).snapshots()) == snapshots

    produce_orders(producer, 15, 5)
    run_once(config, spark)
    keys = [r["key"] for r in table_rows(config)]
    assert sorted(keys) == sorted(
        [f"k{i}".encode() for i in (*range(10), *range(15, 20))]
        + [f"tx{i}".encode() for i in range(10, 15)]
    )


def ran_a_batch(log) -> bool:
    text = log.read_text()
    return '"event": "floe.batch"' in text or '"event": "floe.progress"' in text


def test_two_drivers_on_one_checkpoint_land_each_record_once(stack, tmp_path, topic):
    """Two drivers of one job run at once on the same checkpoint and table (a failover that
    started a new driver before the old one died) while records arrive: whichever of them
    commits a record, and whatever the other then fails with, a driver started alone
    afterwards leaves every record landed once."""
    import os
    import signal
    import subprocess
    import sys
    import time

    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 40)
    config = job_config(stack, tmp_path, topic, interval=1, max_records=50)
    config_file = tmp_path / "job.json"
    config_file.write_text(config.to_json())
    env = local_job_env(stack, cores=1, memory="640m")
    command = [sys.executable, "-m", "floe_sparkapp", "run", "--config", str(config_file)]
    logs = [(tmp_path / f"driver-{n}.log").open("w") for n in range(2)]
    drivers = []
    try:
        for n, log in enumerate(logs):  # the second once the first has committed a batch
            drivers.append(
                subprocess.Popen(
                    command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            )
            deadline = time.monotonic() + 120
            while (
                n == 0
                and time.monotonic() < deadline
                and '"event": "floe.batch"' not in (tmp_path / "driver-0.log").read_text()
            ):
                time.sleep(1)
        # Half a minute of records, both drivers up, and more until the second has run a batch
        # (on a busy machine its session may take longer than the half minute to start).
        i, deadline = 40, time.monotonic() + 240
        while i < 300 or (
            not ran_a_batch(tmp_path / "driver-1.log") and time.monotonic() < deadline
        ):
            produce_orders(producer, i, 20)
            i += 20
            time.sleep(2)
            # A second driver that lost the race for its very first batch (Spark's
            # CONCURRENT_STREAM_LOG_UPDATE before it wrote anything) is started again, as a
            # failover would: the test is about both drivers writing.
            if drivers[1].poll() is not None and not ran_a_batch(tmp_path / "driver-1.log"):
                logs[1].write("--- started again ---\n")
                logs[1].flush()
                drivers[1] = subprocess.Popen(
                    command,
                    env=env,
                    stdout=logs[1],
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
    finally:
        for driver in drivers:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        for log in logs:
            log.close()
    first, second = ((tmp_path / f"driver-{n}.log").read_text() for n in range(2))
    assert '"event": "floe.batch"' in first, first[-3000:]
    # The second ran batches too (the one whose offsets the first logged before it ends with
    # Spark's CONCURRENT_STREAM_LOG_UPDATE after its write: a floe.batch, no floe.progress)
    assert ran_a_batch(tmp_path / "driver-1.log"), second[-3000:]

    final = subprocess.run(
        [*command, "--available-now"], env=env, capture_output=True, text=True, timeout=600
    )
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    assert_exactly_once(table_rows(config), producer.sent)


def compacted_and_cut(spark, config) -> tuple[str, str]:
    """A compaction and a manifest rewrite on top of ``main``, then an expiry keeping one
    snapshot: ``main``'s ancestry is cut below its head.  Returns the catalog and the table's
    name in it."""
    name = f"{config.table.catalog.name}.{config.table.identifier}"
    catalog = config.table.catalog.name
    spark.sql(
        f"CALL {catalog}.system.rewrite_data_files(table => '{name}', "
        "options => map('min-input-files', '2'))"
    ).collect()
    spark.sql(f"CALL {catalog}.system.rewrite_manifests('{name}')").collect()
    spark.sql(
        f"CALL {catalog}.system.expire_snapshots(table => '{name}', "
        "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)"
    ).collect()
    return catalog, name


def test_offsets_survive_compaction_manifest_rewrite_and_expiry_to_one_snapshot(
    stack, spark, tmp_path, topic
):
    """Two maintenance commits on top of floe's last, then someone's expiry keeping one
    snapshot: ``main``'s ancestry no longer reaches a floe snapshot, and the offsets come from
    the writer's tag, for the job (a lost checkpoint duplicates nothing) and the status."""
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 90)
    config = job_config(stack, tmp_path, topic, max_records=30)  # several files per partition
    run_once(config, spark)
    floe_snapshot = last_commit(load_table(config), config.writer, topic).snapshot_id
    _catalog, _name = compacted_and_cut(spark, config)
    table = load_table(config)
    head = table.current_snapshot()
    assert (
        head.snapshot_id != floe_snapshot and table.snapshot_by_id(head.parent_snapshot_id) is None
    ), "the ancestry is not cut"

    committed = last_commit(table, config.writer, topic)
    assert committed.snapshot_id == floe_snapshot and committed.from_tag
    assert committed.offsets == producer.next_offsets()

    shutil.rmtree(config.checkpoint_location)
    produce_orders(producer, 90, 30)
    run_once(config, spark)
    assert_exactly_once(table_rows(config), producer.sent)
    assert (
        load_table(config).refs()[offsets_tag(config.writer)].snapshot_id
        == load_table(config).current_snapshot().snapshot_id
    )


@pytest.mark.faults
def test_main_rolled_back_to_a_cut_maintenance_snapshot_below_the_writers_tag_lands_nothing_twice(
    stack, spark, tmp_path, topic
):
    """``main`` rolled back to a manifest rewrite whose parent (a compaction) expired, the
    writer's tag on a later commit ``main`` no longer has: neither the ancestry nor the tag
    says what landed, the rows do.  A lost checkpoint then lands the later records again,
    once, and the ones the rows hold not at all."""
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 90)
    config = job_config(stack, tmp_path, topic, max_records=30)
    run_once(config, spark)
    catalog, name = compacted_and_cut(spark, config)
    rewritten = load_table(config).current_snapshot().snapshot_id
    held = producer.next_offsets()
    produce_orders(producer, 90, 30)
    run_once(config, spark)  # a floe commit on top: the writer's tag moves there
    spark.sql(f"CALL {catalog}.system.rollback_to_snapshot('{name}', {rewritten})").collect()
    table = load_table(config)
    assert table.current_snapshot().snapshot_id == rewritten
    assert table.snapshot_by_id(table.current_snapshot().parent_snapshot_id) is None
    assert table.refs()[offsets_tag(config.writer)].snapshot_id != rewritten

    committed = last_commit(table, config.writer, topic)
    assert committed.offsets == held and committed.from_rows

    shutil.rmtree(config.checkpoint_location)
    run_once(config, spark)
    assert_exactly_once(table_rows(config), producer.sent)


def _root(table) -> int:
    snapshot = table.current_snapshot()
    while snapshot.parent_snapshot_id is not None:
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
    return snapshot.snapshot_id


@pytest.mark.parametrize("change", ["rolled back to its root", "dropped and created again"])
def test_a_table_emptied_under_the_running_job_is_filled_again_from_the_topic(
    stack, spark, tmp_path, topic, change
):
    """``main`` rolled back to the table's empty root snapshot, or the table dropped and
    created again (as the operator does within a refresh), while the job runs: the next batch
    does not commit its own end offsets over a table that lacks what came before; the job
    starts again from the table's truth and every record lands once."""
    from floe_sparkapp.catalog import load_catalog
    from floe_sparkapp.layout import ensure_table
    from floe_sparkapp.schemas import table_struct

    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 30)
    config = job_config(stack, tmp_path, topic, interval=1)
    with streaming(config, spark) as (failures, _):
        assert len(wait_for_rows(config, 30)) == 30
        table = load_table(config)
        if change == "rolled back to its root":
            spark.sql(
                f"CALL {config.table.catalog.name}.system.rollback_to_snapshot("
                f"'{config.table.identifier}', {_root(table)})"
            )
        else:
            from floe_sparkapp.registry import Registry

            catalog = load_catalog(config.table.catalog)
            catalog.purge_table(config.table.identifier)
            value = table_struct(Registry(config.value.schema_registry).latest()).struct
            ensure_table(catalog, config.table, value)
        assert not list(load_table(config).scan().plan_files())  # the table is empty
        produce_orders(producer, 30, 20)
        rows = wait_for_rows(config, 50, timeout=120)
    assert not failures, failures
    assert_exactly_once(rows, producer.sent)
    assert last_commit(load_table(config), config.writer, topic).offsets == producer.next_offsets()


def test_a_misbehaving_producers_avro_bytes_each_land_as_a_row_and_do_not_wedge_the_topic(
    stack, spark, tmp_path, topic
):
    """Five bytes from a misbehaving producer (``00 ff ff ff ff``: schema id -1 as the
    registry's deserializers read it) land raw with the reason; so do an int written with more
    than 32 bits (Avro's decoder would drop the high bits and read 0) and a string that is not
    UTF-8 (Avro's decoder would keep the bytes). Bytes after a complete value are ignored, as
    the registry's deserializers do, and kept with a note. The records around them land
    decoded."""
    producer = AvroProducer(stack, topic)
    producer.send(key=b"good-1", value=order(1, 1), schema=V1, partition=0)
    poison = {b"minus-one": b"\x00\xff\xff\xff\xff", b"high-bit": b"\x00\x80\x00\x00\x01\x02"}
    for key, payload in poison.items():
        producer.send(key=key, raw=payload, partition=0)
    producer.send(key=b"good-2", value=order(2, 1), schema=V1, partition=0)
    producer.flush()
    good = {
        key: value["payload"]
        for value in producer.sent.values()
        if (key := value["key"]) in (b"good-1", b"good-2")
    }
    schema_id = int.from_bytes(good[b"good-1"][1:5], "big")
    assert good[b"good-1"].endswith(b"\x02")  # its last field, quantity 1
    malformed = {
        b"wide-int": good[b"good-1"][:-1] + b"\x80\x80\x80\x80\x20",  # 2**32: read as 0
        b"not-utf8": good[b"good-1"].replace(b"item-1", b"item\xff1"),
        b"trailing": good[b"good-2"] + b"\x02\x04",
    }
    for key, payload in malformed.items():
        producer.send(key=key, raw=payload, partition=0)
    producer.flush()
    config = job_config(stack, tmp_path, topic)
    query = start(config, spark, available_now=True)
    query.awaitTermination(600)
    assert query.exception() is None

    rows = {r["key"]: r for r in table_rows(config)}
    assert set(rows) == {b"good-1", b"good-2", *poison, *malformed}
    assert rows[b"good-1"]["value"]["id"] == 1 and rows[b"good-2"]["value"]["id"] == 2
    assert rows[b"minus-one"]["value_error"] == (
        "unknown schema id -1: the schema registry has no schema with this id"
    )
    assert rows[b"high-bit"]["value_error"] == (
        f"unknown schema id {0x80000001 - 2**32}: the schema registry has no schema with this id"
    )
    what = f"Avro value of writer schema id {schema_id}"
    assert rows[b"wide-int"]["value_error"] == (
        f"{what} is malformed: field quantity is an int written with more than 32 bits, which "
        "Avro's decoder reads as another number"
    )
    assert rows[b"not-utf8"]["value_error"] == (
        f"{what} is malformed: field item is not UTF-8 (byte 0xff at 4 cannot start a character)"
    )
    for key, payload in {
        **poison,
        b"wide-int": malformed[b"wide-int"],
        b"not-utf8": malformed[b"not-utf8"],
    }.items():
        assert rows[key]["value"] is None and rows[key]["value_raw"] == payload
    trailing = rows[b"trailing"]
    assert trailing["value"] == rows[b"good-2"]["value"]
    assert trailing["value_raw"] == malformed[b"trailing"]
    assert trailing["value_error"] == (
        f"2 byte(s) follow the {what} and were not read; the full value is in value_raw"
    )


@pytest.mark.parametrize("mode", ["upsert", "cdc"])
def test_a_rollback_of_main_during_an_upsert_or_cdc_batch_is_not_undone(
    stack, spark, tmp_path, topic, monkeypatch, mode
):
    """A user rolls ``main`` back while a batch merges on its branch: the batch does not move
    ``main`` over the rollback; it is merged again on the rolled-back table with the records
    the rollback took away, and the table is the last change per key."""
    from .test_job_cdc import ROW_V1, Database, envelope
    from .test_job_faults import _ancestry, _rollback

    producer = AvroProducer(stack, topic)
    config = job_config(stack, tmp_path, topic, mode=mode)
    db, schema = Database(blank={"email": None}), envelope(ROW_V1)

    def changes(round_: int) -> None:
        for i in range(20):
            row_id = (round_ * 7 + i) % 25
            if mode == "cdc":
                op = "u" if row_id in db.rows else "c"
                producer.send(
                    key=f'{{"id":{row_id}}}'.encode(),
                    schema=schema,
                    value=db.change(op, row_id, name=f"round {round_} change {i}"),
                )
            else:
                db.rows[row_id] = {**order(row_id, 1), "item": f"round {round_} change {i}"}
                producer.send(key=f"k{row_id}".encode(), value=db.rows[row_id], schema=V1)
        producer.flush()

    changes(0)
    run_once(config, spark)
    first = load_table(config).current_snapshot().snapshot_id
    changes(1)
    run_once(config, spark)
    second = load_table(config).current_snapshot().snapshot_id

    merge = BranchCommitter._merge
    rolled_back = []

    def merge_after_a_rollback(self, branch, *args, **kwargs):
        if not rolled_back:  # the user's rollback lands while the batch is on its branch
            _rollback(spark, config, first)
            rolled_back.append(branch)
        return merge(self, branch, *args, **kwargs)

    monkeypatch.setattr(BranchCommitter, "_merge", merge_after_a_rollback)
    changes(2)
    run_once(config, spark)

    assert rolled_back
    ancestry = _ancestry(load_table(config))
    assert first in ancestry and second not in ancestry, "the rollback was undone"
    rows = table_rows(config)
    if mode == "cdc":
        assert {r["value"]["id"]: r["value"] for r in rows} == db.rows
    else:
        assert {int(r["key"][1:]): r["value"]["item"] for r in rows} == {
            k: v["item"] for k, v in db.rows.items()
        }
    assert len(rows) == len(db.rows)


def test_a_batch_run_again_after_its_dead_letters_were_sent_sends_each_once(
    stack, spark, tmp_path, topic, monkeypatch
):
    """The driver dies after a batch sent its undecodable records to the dead-letter topic and
    before the batch committed: the batch runs again and sends only what is not there yet. A
    dead letter of another writer with the same coordinates is not taken for this one's."""
    from confluent_kafka import Producer

    from .jobkit import consume_to_end

    dlq = f"{topic}.dlq"
    create_topic(stack.bootstrap, dlq, partitions=2)
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 10)
    config = job_config(stack, tmp_path, topic, dead_letter=dlq)
    run_once(config, spark)  # a commit: what the next batch reads the dead letters back from

    bad = {f"bad-{i}".encode(): f"not avro {i}".encode() for i in range(4)}
    for i, (key, payload) in enumerate(bad.items()):
        producer.send(key=key, raw=payload, partition=i % 3)
    produce_orders(producer, 10, 5)
    positions = {value["key"]: position for position, value in producer.sent.items()}
    other = Producer({"bootstrap.servers": stack.bootstrap})
    partition, offset = positions[b"bad-0"]
    other.produce(
        dlq,
        key=b"bad-0",
        value=b"another writer's",
        headers=[
            ("floe.writer", b"elsewhere/orders"),
            ("floe.topic", topic.encode()),
            ("floe.partition", str(partition).encode()),
            ("floe.offset", str(offset).encode()),
        ],
    )
    assert other.flush(30) == 0

    def killed(*args, **kwargs):
        raise RuntimeError("killed after the dead letters were sent")

    with monkeypatch.context() as patched:
        patched.setattr(BranchCommitter, "append", killed)
        with pytest.raises(Exception, match="killed after the dead letters were sent"):
            run_once(config, spark)
    assert len(consume_to_end(stack, dlq)) == len(bad) + 1
    run_once(config, spark)

    assert_exactly_once(table_rows(config), producer.sent)
    dead = [
        m
        for m in consume_to_end(stack, dlq)
        if dict(m.headers())["floe.writer"] == config.writer.encode()
    ]
    assert sorted(m.key() for m in dead) == sorted(bad)
    for message in dead:
        headers = dict(message.headers())
        assert message.value() == bad[message.key()]
        assert (int(headers["floe.partition"]), int(headers["floe.offset"])) == positions[
            message.key()
        ]


READING = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "price": {"type": "number"},
        "scores": {"type": "array", "items": {"type": "number"}},
    },
}


def test_a_misbehaving_producers_json_bytes_each_land_as_a_row(stack, spark, tmp_path, topic):
    """JSON values, framed with a JSON Schema or plain, that Spark's JSON reader would take as
    something else than was written: text that is not UTF-8 (read as U+FFFD), a number past a
    double's range (read as infinity), NaN (not JSON) land raw with the reason; a document
    followed by more is read as the registry's deserializer reads it, and kept with a note;
    white space after it is nothing."""
    producer = FramedProducer(stack, topic)
    writer = producer.register(f"{topic}-value", Schema(json.dumps(READING), "JSON"))

    def doc(i: int, **fields) -> bytes:
        return json.dumps(
            {"id": i, "name": f"n{i}", "price": i / 4, "scores": [i], **fields}
        ).encode()

    payloads = {
        "good": framed(writer, doc(1)),
        "white-space-after": framed(writer, doc(2) + b" \n"),
        "more-after": framed(writer, doc(3) + b' {"id": 99}'),
        "not-utf8": framed(writer, doc(4, name="?").replace(b'"?"', b'"\xff"')),
        "past-double": framed(writer, doc(5, price=0).replace(b'"price": 0', b'"price": 1e400')),
        "past-double-in-array": framed(writer, doc(6, scores=[1, 0]).replace(b"0]", b"-1e999]")),
        "nan": framed(writer, doc(7, price=0).replace(b'"price": 0', b'"price": NaN')),
        "plain": doc(8),
        "plain-more-after": doc(9) + b"garbage",
        "plain-not-utf8": doc(10, name="?").replace(b'"?"', b'"\xc3("'),
        "plain-past-double": doc(11, price=0).replace(b'"price": 0', b'"price": -1e400'),
    }
    for key, payload in payloads.items():
        producer.send(key.encode(), payload)
    producer.flush()
    config = job_config(stack, tmp_path, topic, fmt="json")
    query = start(config, spark, available_now=True)
    query.awaitTermination(600)
    assert query.exception() is None

    rows = {r["key"].decode(): r for r in table_rows(config)}
    assert set(rows) == set(payloads)
    for key, i in {
        "good": 1,
        "white-space-after": 2,
        "more-after": 3,
        "plain": 8,
        "plain-more-after": 9,
    }.items():
        assert rows[key]["value"] == {
            "id": i,
            "name": f"n{i}",
            "price": i / 4,
            "scores": [float(i)],
        }, (key, rows[key]["value_error"])
    for key in ("good", "white-space-after", "plain"):
        assert rows[key]["value_raw"] is None and rows[key]["value_error"] is None, key
    assert rows["more-after"]["value_error"] == (
        f"more follows the JSON value of writer schema id {writer} and was not read; the full "
        "value is in value_raw"
    )
    assert rows["plain-more-after"]["value_error"] == (
        "more follows the JSON value and was not read; the full value is in value_raw"
    )
    what = f"JSON value of writer schema id {writer} is malformed: "
    not_utf8 = payloads["not-utf8"][5:].index(b"\xff")
    plain_not_utf8 = payloads["plain-not-utf8"].index(b"\xc3(") + 1
    assert {
        key: rows[key]["value_error"]
        for key in (
            "not-utf8",
            "past-double",
            "past-double-in-array",
            "nan",
            "plain-not-utf8",
            "plain-past-double",
        )
    } == {
        "not-utf8": f"{what}it is not UTF-8, as JSON must be (byte 0xff at {not_utf8} cannot "
        "start a character)",
        "past-double": f"{what}field price is a number past its type's range",
        "past-double-in-array": f"{what}field scores[] is a number past its type's range",
        "nan": f"JSON value of writer schema id {writer} is not a JSON document of its "
        "schema's shape",
        "plain-not-utf8": "JSON value is malformed: it is not UTF-8, as JSON must be (byte "
        f"0x28 at {plain_not_utf8} does not continue a character)",
        "plain-past-double": "JSON value is malformed: field price is a number past its "
        "type's range",
    }
    for key, payload in payloads.items():
        if key not in ("good", "white-space-after", "plain"):
            assert rows[key]["value_raw"] == payload, key
        if rows[key]["value_error"] and "malformed" in rows[key]["value_error"]:
            assert rows[key]["value"] is None, key
