"""Warehouses on Google Cloud Storage and Azure (ADLS), through Iceberg's own FileIOs, against
the stack's emulators (fake-gcs-server, Azurite): the job lands a topic exactly once through a
SIGKILL in the middle of a commit, PyIceberg (the operator's reads) sees the job's offsets, and
maintenance compacts and removes orphans listed through the store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from floe_sparkapp.fileio import files_under
from floe_sparkapp.ledger import last_commit
from floe_sparkapp.maintenance import maintain

from .jobkit import (
    OBJECT_STORES,
    AvroProducer,
    assert_exactly_once,
    create_topic,
    job_config,
    load_table,
    local_job_env,
    run_once,
    table_rows,
    with_maintenance,
)
from .test_maintenance import multiset, produce_old

pytestmark = pytest.mark.integration


def listing(table, location: str) -> set[str]:
    """The objects under ``location``, listed through the table's own FileIO."""
    return {path for path, _ in files_under(table.io, location)}


def killed_during_a_commit(stack, config, tmp_path) -> str:
    """Runs the job as its own process and SIGKILLs it as soon as a commit after its first one
    has written a manifest (its files are written, the catalog not yet swapped): the object
    that told."""
    config_file = tmp_path / "job.json"
    config_file.write_text(config.to_json())
    log = (tmp_path / "job.log").open("w")
    job = subprocess.Popen(
        [sys.executable, "-m", "floe_sparkapp", "run", "--config", str(config_file)],
        env=local_job_env(stack),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        table = None
        while table is None or last_commit(table, config.writer).snapshot_id is None:
            assert job.poll() is None and time.monotonic() < deadline, (
                tmp_path / "job.log"
            ).read_text()[-3000:]
            time.sleep(0.2)
            try:
                table = load_table(config)
            except Exception:  # noqa: BLE001 - not made yet
                table = None
        metadata = f"{table.location()}/metadata"
        before = listing(table, metadata)
        while True:
            assert job.poll() is None and time.monotonic() < deadline, (
                tmp_path / "job.log"
            ).read_text()[-3000:]
            new = [path for path in listing(table, metadata) - before if path.endswith(".avro")]
            if new:
                os.killpg(job.pid, signal.SIGKILL)
                return new[0]
            time.sleep(0.02)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        log.close()


@pytest.mark.parametrize("store", OBJECT_STORES)
def test_a_warehouse_on_the_store_lands_exactly_once_through_a_sigkill_during_a_commit(
    stack, spark, tmp_path, unique_name, store
):
    topic = f"store-{store}-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = AvroProducer(stack, topic)
    produce_old(producer, 0, 400)  # a day nobody writes any more: compaction takes it
    config = job_config(stack, tmp_path, topic, catalog=store, interval=1, max_records=50)
    assert config.table.catalog.warehouse.startswith({"gcs": "gs://", "adls": "abfss://"}[store])

    killed_at = killed_during_a_commit(stack, config, tmp_path)
    run_once(config, spark)  # the job started again: it goes on from the table's offsets

    rows = table_rows(config)  # PyIceberg, as the operator reads the table
    assert_exactly_once(rows, producer.sent)
    table = load_table(config)
    assert "/metadata/" in killed_at
    assert last_commit(table, config.writer, topic).offsets == producer.next_offsets()

    # Maintenance on the store: compaction keeps every row; orphan removal lists the store
    # through the FileIO and deletes what no snapshot holds (the killed commit's files, and
    # one planted here), then finds nothing more.
    maintained = with_maintenance(
        config, compaction={"min_input_files": 2}, remove_orphans={"older_than": "1s"}
    )
    compacted = maintain(maintained, "compaction", spark)
    assert compacted["rewritten_data_files_count"] >= 2
    assert multiset(table_rows(config)) == multiset(rows)
    planted = f"{load_table(config).location()}/data/planted-orphan.parquet"
    with load_table(config).io.new_output(planted).create() as out:
        out.write(b"not referenced by any snapshot")
    time.sleep(2)
    removed = maintain(maintained, "remove-orphans", spark)
    assert removed["removedFiles"] >= 1
    table = load_table(config)
    assert not any(
        path.endswith("planted-orphan.parquet")
        for path in listing(table, f"{table.location()}/data")
    )
    assert maintain(maintained, "remove-orphans", spark)["removedFiles"] == 0
    assert multiset(table_rows(config)) == multiset(rows)
