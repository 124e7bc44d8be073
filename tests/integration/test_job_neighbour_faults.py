"""Exactly once under what the job's neighbours do: a catalog that applies a commit and loses
its reply, a table replaced or rolled back to its root while the job runs, an expiry that cuts
``main``'s ancestry, a producer that writes bytes no deserializer expects.

Each test makes its fault at the one place it happens (the catalog's answer to a commit, the
table's metadata, the topic's bytes) and asserts what a user sees: every produced record is one
row, every file the table refers to is there, and the table's offsets are the real ones."""

from __future__ import annotations

import shutil

import pytest

from floe_sparkapp.commit import BranchCommitter, last_commit, offsets_tag
from floe_sparkapp.job import start

from .jobkit import (
    AvroProducer, assert_exactly_once, create_topic, job_config, load_table, run_once,
    streaming, table_rows, wait_for_rows,
)
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


@pytest.mark.parametrize("catalog,mode", [("sqlite", "append"), ("rest", "append"),
                                          ("postgresql", "upsert")])
def test_a_commit_the_catalog_applied_but_reported_failed_lands_once_and_keeps_its_files(
        stack, spark, tmp_path, topic, monkeypatch, catalog, mode):
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
    assert last_commit(load_table(config), config.writer, topic).offsets == \
        producer.next_offsets()

    produce_orders(producer, 60, 30)  # and the job goes on from there
    run_once(config, spark)
    assert_exactly_once(table_rows(config), producer.sent)


def test_offsets_survive_compaction_manifest_rewrite_and_expiry_to_one_snapshot(
        stack, spark, tmp_path, topic):
    """Two maintenance commits on top of floe's last, then someone's expiry keeping one
    snapshot: ``main``'s ancestry no longer reaches a floe snapshot, and the offsets come from
    the writer's tag, for the job (a lost checkpoint duplicates nothing) and the status."""
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 90)
    config = job_config(stack, tmp_path, topic, max_records=30)  # several files per partition
    run_once(config, spark)
    floe_snapshot = last_commit(load_table(config), config.writer, topic).snapshot_id
    name = f"{config.table.catalog.name}.{config.table.identifier}"
    catalog = config.table.catalog.name
    spark.sql(f"CALL {catalog}.system.rewrite_data_files(table => '{name}', "
              "options => map('min-input-files', '2'))").collect()
    spark.sql(f"CALL {catalog}.system.rewrite_manifests('{name}')").collect()
    spark.sql(f"CALL {catalog}.system.expire_snapshots(table => '{name}', "
              "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)").collect()
    table = load_table(config)
    head = table.current_snapshot()
    assert head.snapshot_id != floe_snapshot and \
        table.snapshot_by_id(head.parent_snapshot_id) is None, "the ancestry is not cut"

    committed = last_commit(table, config.writer, topic)
    assert committed.snapshot_id == floe_snapshot and committed.from_tag
    assert committed.offsets == producer.next_offsets()

    shutil.rmtree(config.checkpoint_location)
    produce_orders(producer, 90, 30)
    run_once(config, spark)
    assert_exactly_once(table_rows(config), producer.sent)
    assert load_table(config).refs()[offsets_tag(config.writer)].snapshot_id == \
        load_table(config).current_snapshot().snapshot_id


def _root(table) -> int:
    snapshot = table.current_snapshot()
    while snapshot.parent_snapshot_id is not None:
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
    return snapshot.snapshot_id


@pytest.mark.parametrize("change", ["rolled back to its root", "dropped and created again"])
def test_a_table_emptied_under_the_running_job_is_filled_again_from_the_topic(
        stack, spark, tmp_path, topic, change):
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
            spark.sql(f"CALL {config.table.catalog.name}.system.rollback_to_snapshot("
                      f"'{config.table.identifier}', {_root(table)})")
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
    assert last_commit(load_table(config), config.writer, topic).offsets == \
        producer.next_offsets()


def test_a_schema_id_with_its_high_bit_set_is_kept_raw_and_does_not_wedge_the_topic(
        stack, spark, tmp_path, topic):
    """Five bytes from a misbehaving producer (``00 ff ff ff ff``: schema id -1 as the
    registry's deserializers read it) land raw with the reason; the records around them land
    decoded."""
    producer = AvroProducer(stack, topic)
    producer.send(key=b"good-1", value=order(1, 1), schema=V1, partition=0)
    poison = {b"minus-one": b"\x00\xff\xff\xff\xff", b"high-bit": b"\x00\x80\x00\x00\x01\x02"}
    for key, payload in poison.items():
        producer.send(key=key, raw=payload, partition=0)
    producer.send(key=b"good-2", value=order(2, 1), schema=V1, partition=0)
    producer.flush()
    config = job_config(stack, tmp_path, topic)
    query = start(config, spark, available_now=True)
    query.awaitTermination(600)
    assert query.exception() is None

    rows = {r["key"]: r for r in table_rows(config)}
    assert set(rows) == {b"good-1", b"good-2", *poison}
    assert rows[b"good-1"]["value"]["id"] == 1 and rows[b"good-2"]["value"]["id"] == 2
    assert rows[b"minus-one"]["value_error"] == (
        "unknown schema id -1: the schema registry has no schema with this id")
    assert rows[b"high-bit"]["value_error"] == (
        f"unknown schema id {0x80000001 - 2 ** 32}: the schema registry has no schema with "
        "this id")
    for key, payload in poison.items():
        assert rows[key]["value"] is None and rows[key]["value_raw"] == payload
