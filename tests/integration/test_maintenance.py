"""Table maintenance against the real stack: the rows never change, the job never notices."""

from __future__ import annotations

import collections
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from floe_sparkapp.job import run, start
from floe_sparkapp.ledger import last_commit
from floe_sparkapp.maintenance import PROPERTY_PREFIX, maintain

from .jobkit import (
    AvroProducer,
    assert_exactly_once,
    create_topic,
    job_config,
    load_table,
    local_job_env,
    table_rows,
    wait_for_rows,
    with_maintenance,
)
from .test_job_roundtrip import V1, order

pytestmark = pytest.mark.integration

DAY_MS = 86_400_000
TWO_DAYS_AGO = int(time.time() * 1000) - 2 * DAY_MS  # a partition nobody writes any more


def produce_old(producer: AvroProducer, start_at: int, count: int, at_ms: int = TWO_DAYS_AGO):
    for i in range(start_at, start_at + count):
        producer.send(key=f"k{i}".encode(), value=order(i, 1), schema=V1, timestamp_ms=at_ms + i)
    producer.flush()


def multiset(rows: list[dict]) -> collections.Counter:
    """Every row, every column, as a comparable multiset."""
    return collections.Counter(repr(sorted(row.items())) for row in rows)


def data_files(config) -> list[str]:
    return [task.file.file_path for task in load_table(config).scan().plan_files()]


def config_with(
    stack,
    tmp_path,
    topic,
    catalog="sqlite",
    *,
    min_input_files=None,
    retain_last=None,
    max_snapshot_age_seconds=None,
    orphan_older_than_seconds=None,
):
    """A job config of 25 records a commit, with some maintenance settings changed (below
    what a resource allows, where a test needs it)."""
    config = job_config(stack, tmp_path, topic, max_records=25, catalog=catalog)
    expire = {
        **({"retain_last": retain_last} if retain_last is not None else {}),
        **(
            {"max_age": f"{max_snapshot_age_seconds}s"}
            if max_snapshot_age_seconds is not None
            else {}
        ),
    }
    actions = {
        "compaction": {"min_input_files": min_input_files} if min_input_files else {},
        "expire_snapshots": expire,
        "remove_orphans": (
            {"older_than": f"{orphan_older_than_seconds}s"}
            if orphan_older_than_seconds is not None
            else {}
        ),
    }
    return with_maintenance(config, **{a: changes for a, changes in actions.items() if changes})


@pytest.fixture
def topic(stack, unique_name):
    name = f"maint-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, name, partitions=2)
    return name


@pytest.mark.parametrize("catalog", ["sqlite", "postgresql", "rest"])
def test_compaction_merges_small_files_and_keeps_every_row(stack, spark, tmp_path, topic, catalog):
    producer = AvroProducer(stack, topic)
    produce_old(producer, 0, 300)
    config = config_with(stack, tmp_path, topic, catalog, min_input_files=2)
    run(config, spark, available_now=True, timeout=600)  # 25 records a commit: many small files
    before_rows, before_files = table_rows(config), data_files(config)
    assert len(before_files) >= 8

    result = maintain(config, "compaction", spark)

    after_files = data_files(config)
    assert result["rewritten_data_files_count"] == len(before_files)
    assert len(after_files) <= 2  # one per Kafka partition's sort range at most
    assert multiset(table_rows(config)) == multiset(before_rows)
    recorded = load_table(config).properties[PROPERTY_PREFIX + "compaction"]
    assert '"outcome":"Succeeded"' in recorded
    # The job's offsets survive the rewrite: a restart without checkpoint adds nothing.
    shutil.rmtree(config.checkpoint_location)
    run(config, spark, available_now=True, timeout=600)
    assert_exactly_once(table_rows(config), producer.sent)

    # Orphan removal on the catalog's warehouse (a local directory, or the REST catalog's on
    # S3): a file no snapshot holds goes, every file a snapshot holds stays.
    orphaned = config_with(stack, tmp_path, topic, catalog, orphan_older_than_seconds=1)
    table = load_table(config)
    planted = f"{table.location()}/data/planted-orphan.parquet"
    with table.io.new_output(planted).create() as out:
        out.write(b"PAR1 left behind by a failed writer PAR1")
    time.sleep(2)
    removed = maintain(orphaned, "remove-orphans", spark)
    assert removed["removedFiles"] == 1
    assert not table.io.new_input(planted).exists()
    assert all(table.io.new_input(path).exists() for path in data_files(config))
    assert_exactly_once(table_rows(config), producer.sent)


def test_compaction_leaves_the_partition_being_written_alone(stack, spark, tmp_path, topic):
    producer = AvroProducer(stack, topic)
    produce_old(producer, 0, 100, at_ms=int(time.time() * 1000))  # today's partition
    config = config_with(stack, tmp_path, topic, min_input_files=2)
    run(config, spark, available_now=True, timeout=600)
    before = sorted(data_files(config))

    result = maintain(config, "compaction", spark)

    assert result["rewritten_data_files_count"] == 0
    assert sorted(data_files(config)) == before


def test_compaction_while_the_job_commits_loses_and_duplicates_nothing(
    stack, spark, tmp_path, topic, monkeypatch
):
    from floe_sparkapp import maintenance

    monkeypatch.setattr(maintenance, "MAX_ATTEMPTS", 10)
    producer = AvroProducer(stack, topic)
    produce_old(producer, 0, 200)
    config = config_with(stack, tmp_path, topic, min_input_files=2)
    query = start(config, spark, query_name="streaming_during_compaction")
    wait_for_rows(config, 50)
    stop = threading.Event()

    def keep_producing():
        i = 200
        while not stop.is_set() and i < 1400:
            produce_old(producer, i, 40)  # into the partition being compacted
            i += 40
            time.sleep(0.5)

    thread = threading.Thread(target=keep_producing)
    thread.start()
    try:
        results = [maintain(config, "compaction", spark) for _ in range(3)]
    finally:
        stop.set()
        thread.join()
    rows = wait_for_rows(config, len(producer.sent), timeout=300, query=query)
    query.stop()
    assert query.exception() is None
    assert len(rows) >= len(producer.sent), f"{len(rows)} of {len(producer.sent)} rows landed"
    assert sum(r["rewritten_data_files_count"] for r in results) > 0
    assert_exactly_once(table_rows(config), producer.sent)


def test_aggressive_expiry_keeps_the_offsets_and_exactly_once_survives_a_lost_checkpoint(
    stack, spark, tmp_path, topic
):
    producer = AvroProducer(stack, topic)
    produce_old(producer, 0, 200)
    config = config_with(
        stack, tmp_path, topic, min_input_files=2, retain_last=1, max_snapshot_age_seconds=60
    )
    run(config, spark, available_now=True, timeout=600)
    maintain(config, "compaction", spark)  # main's head is now a snapshot floe did not write
    floe_snapshot = last_commit(load_table(config), config.writer).snapshot_id
    snapshots_before = len(load_table(config).snapshots())

    maintain(
        config,
        "expire-snapshots",
        spark,
        now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=30),
    )

    table = load_table(config)
    assert len(table.snapshots()) < snapshots_before
    assert last_commit(table, config.writer).snapshot_id == floe_snapshot
    shutil.rmtree(config.checkpoint_location)
    produce_old(producer, 200, 100)
    run(config, spark, available_now=True, timeout=600)
    assert_exactly_once(table_rows(config), producer.sent)


def test_the_job_expires_snapshots_as_it_commits_and_its_offsets_survive(
    stack, spark, tmp_path, topic
):
    """With a short interval the job keeps the table at about retainLast commits (those
    older than maxAge expire): the metadata every commit rewrites stays small, the manifest
    lists of expired snapshots are deleted, and the offsets stay."""
    from floe_sparkapp.ledger import offsets_tag

    producer = AvroProducer(stack, topic)
    config = config_with(stack, tmp_path, topic, retain_last=3, max_snapshot_age_seconds=3)
    assert config.snapshot_max_age_seconds == 3
    produce_old(producer, 0, 10)  # the job starts from the subject's registered schema
    query = start(config, spark, query_name="expiring_while_committing")
    try:
        for batch in range(12):
            if batch:
                produce_old(producer, batch * 10, 10)
            wait_for_rows(config, (batch + 1) * 10, query=query)
        time.sleep(config.snapshot_max_age_seconds + 1)  # all but the next one are due then
        produce_old(producer, 120, 10)
        wait_for_rows(config, 130, query=query)
    finally:
        query.stop()
    assert query.exception() is None

    table = load_table(config)
    kept = table.snapshots()
    # 13 commits; past retainLast, expiry waits for a tenth of it (at least one) more.
    assert 3 <= len(kept) <= 4, [(s.snapshot_id, s.timestamp_ms) for s in kept]
    newest = last_commit(table, config.writer).snapshot_id
    assert newest == table.current_snapshot().snapshot_id
    assert table.refs()[offsets_tag(config.writer)].snapshot_id == newest
    metadata = Path(table.metadata_location.removeprefix("file:")).parent
    assert sorted(p.name for p in metadata.glob("snap-*.avro")) == sorted(
        Path(s.manifest_list).name for s in kept
    )

    shutil.rmtree(config.checkpoint_location)  # the offsets come from the table
    produce_old(producer, 130, 10)
    run(config, spark, available_now=True, timeout=600)
    assert_exactly_once(table_rows(config), producer.sent)


@pytest.mark.faults
def test_offsets_survive_compaction_and_someone_elses_expiry_to_one_snapshot(
    stack, spark, tmp_path, topic
):
    """The newest floe snapshot is tagged: an expiry that keeps only main's head (a compaction
    on top of it) cannot take the offsets, and a lost checkpoint duplicates nothing."""
    from floe_sparkapp.ledger import offsets_tag

    producer = AvroProducer(stack, topic)
    produce_old(producer, 0, 200)
    config = config_with(stack, tmp_path, topic, min_input_files=2)
    run(config, spark, available_now=True, timeout=600)
    maintain(config, "compaction", spark)  # main's head is now a snapshot floe did not write
    floe_snapshot = last_commit(load_table(config), config.writer).snapshot_id
    assert load_table(config).refs()[offsets_tag(config.writer)].snapshot_id == floe_snapshot
    future = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
    spark.sql(
        f"CALL {config.table.catalog.name}.system.expire_snapshots(table => "
        f"'{config.table.catalog.name}.{config.table.identifier}', "
        f"older_than => TIMESTAMP '{future:%Y-%m-%d %H:%M:%S}', retain_last => 1)"
    ).collect()

    table = load_table(config)
    assert last_commit(table, config.writer, config.kafka.topic).snapshot_id == floe_snapshot
    shutil.rmtree(config.checkpoint_location)
    produce_old(producer, 200, 100)
    run(config, spark, available_now=True, timeout=600)
    assert_exactly_once(table_rows(config), producer.sent)


@pytest.mark.parametrize(
    "threshold, age",
    [
        (None, 4 * 86_400),  # the default, 3 days
        # The resource allows removeOrphans.olderThan down to 1h; Iceberg's remove_orphan_files
        # procedure refuses anything under 24 hours.
        pytest.param(3600, 2 * 3600, marks=pytest.mark.faults, id="under-a-day"),
    ],
)
def test_orphan_removal_deletes_only_old_unreferenced_files(
    stack, spark, tmp_path, topic, threshold, age
):
    producer = AvroProducer(stack, topic)
    produce_old(producer, 0, 50)
    config = config_with(
        stack, tmp_path, topic, **({"orphan_older_than_seconds": threshold} if threshold else {})
    )
    run(config, spark, available_now=True, timeout=600)
    referenced = data_files(config)
    data_dir = Path(referenced[0].removeprefix("file:")).parent
    old_orphan, fresh_orphan = data_dir / "old-orphan.parquet", data_dir / "fresh-orphan.parquet"
    for orphan in (old_orphan, fresh_orphan):
        orphan.write_bytes(b"PAR1 left behind by a failed writer PAR1")
    os.utime(old_orphan, (time.time() - age, time.time() - age))
    rows = table_rows(config)

    result = maintain(config, "remove-orphans", spark)

    assert (old_orphan.exists(), fresh_orphan.exists()) == (False, True)
    assert result["removedFiles"] == 1
    assert all(Path(path.removeprefix("file:")).exists() for path in referenced)
    assert multiset(table_rows(config)) == multiset(rows)


def test_manifest_rewrite_keeps_the_rows(stack, spark, tmp_path, topic):
    producer = AvroProducer(stack, topic)
    produce_old(producer, 0, 150)
    config = config_with(stack, tmp_path, topic)
    run(config, spark, available_now=True, timeout=600)
    rows = table_rows(config)
    manifests_before = len(load_table(config).current_snapshot().manifests(load_table(config).io))

    result = maintain(config, "rewrite-manifests", spark)

    table = load_table(config)
    assert result["rewritten_manifests_count"] == manifests_before
    assert len(table.current_snapshot().manifests(table.io)) < manifests_before
    assert multiset(table_rows(config)) == multiset(rows)


def test_compaction_of_an_upsert_table_applies_its_deletes(stack, spark, tmp_path, topic):
    producer = AvroProducer(stack, topic)
    config = job_config(stack, tmp_path, topic, max_records=25, mode="upsert")
    # Too few files for a rewrite by their number alone: the deletes are what is rewritten.
    config = with_maintenance(config, compaction={"min_input_files": 50})
    for i in range(200):  # 40 keys, each updated five times, in a partition nobody writes now
        producer.send(
            key=f"k{i % 40}".encode(),
            value={**order(i % 40, 1), "item": f"u{i}"},
            schema=V1,
            timestamp_ms=TWO_DAYS_AGO + i,
        )
    producer.flush()
    run(config, spark, available_now=True, timeout=600)  # 25 records a commit
    before = table_rows(config)
    assert sorted(r["value"]["item"] for r in before) == sorted(f"u{i}" for i in range(160, 200))
    assert any(task.delete_files for task in load_table(config).scan().plan_files())

    maintain(config, "compaction", spark)

    assert multiset(table_rows(config)) == multiset(before)
    tasks = list(load_table(config).scan().plan_files())
    assert tasks and not any(task.delete_files for task in tasks)  # rewritten without them


@pytest.mark.faults
def test_a_long_compaction_succeeds_beside_a_job_expiring_snapshots_every_second(
    stack, spark, tmp_path, topic
):
    """The job commits every second and expires what is older than 2 s beyond 3 snapshots,
    while a compaction of hundreds of files runs for longer than that: the compaction holds
    the snapshot it started from (a tag the job's expiry keeps, with all after it), so its
    commit finds the history it checks; the hold is gone afterwards and every row stays."""
    from floe_sparkapp.ledger import HOLD_PREFIX

    producer = AvroProducer(stack, topic)
    for i in range(2400):  # over 20 days: each batch writes a file per day and partition
        producer.send(
            key=f"k{i}".encode(),
            value=order(i, 1),
            schema=V1,
            timestamp_ms=TWO_DAYS_AGO - (i % 20) * DAY_MS,
        )
    producer.flush()
    config = config_with(
        stack, tmp_path, topic, min_input_files=2, retain_last=3, max_snapshot_age_seconds=2
    )
    config = config.model_copy(
        update={"commit": config.commit.model_copy(update={"max_records_per_commit": 300})}
    )
    run(config, spark, available_now=True, timeout=900)  # 8 commits, hundreds of files
    old_files = len(data_files(config))
    assert old_files >= 200

    stop = threading.Event()

    def keep_producing():  # today's partition, which compaction leaves alone
        i = 2400
        while not stop.is_set():
            producer.send(key=f"k{i}".encode(), value=order(i, 1), schema=V1)
            producer.flush()
            i += 1
            time.sleep(0.3)

    # The compaction runs as the CronJob runs it: its own Spark application beside the job's.
    # (Its own retention is not used by a compaction: the job's 2 s is below what a config
    # file may say.)
    config_file = tmp_path / "job.json"
    config_file.write_text(with_maintenance(config, expire_snapshots={"max_age": None}).to_json())
    env = local_job_env(stack, cores=1, memory="512m")
    thread = threading.Thread(target=keep_producing)
    query = start(config, spark, query_name="expiring_beside_compaction")
    thread.start()
    try:
        wait_for_rows(config, 2410, query=query)  # the job commits and expires meanwhile
        started = time.monotonic()
        compaction = subprocess.run(
            [
                sys.executable,
                "-m",
                "floe_sparkapp",
                "maintain",
                "--config",
                str(config_file),
                "--action",
                "compaction",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        took = time.monotonic() - started
    finally:
        stop.set()
        thread.join()
    try:
        wait_for_rows(config, len(producer.sent), query=query)
    finally:
        query.stop()
    assert query.exception() is None
    assert compaction.returncode == 0, compaction.stderr[-3000:]
    result = json.loads(load_table(config).properties[PROPERTY_PREFIX + "compaction"])
    assert result["outcome"] == "Succeeded" and result["attempts"] == 1, result
    # Every file group committed: none was refused for a history the job's expiry removed
    # (with partial progress, Iceberg counts only the groups whose commits succeeded).
    assert result["rewritten_data_files_count"] == old_files, (result, took)
    assert not [name for name in load_table(config).refs() if name.startswith(HOLD_PREFIX)]
    assert_exactly_once(table_rows(config), producer.sent)


@pytest.mark.faults
def test_orphan_removal_beside_a_running_compaction_keeps_the_files_it_has_written(
    stack, spark, tmp_path, topic
):
    """A compaction (or a manifest rewrite) runs for hours and commits its files at the end:
    while its hold is on the table, orphan removal deletes only files older than the snapshot
    it started from, so the compaction's commit never refers to files already removed.  An
    old orphan is removed as always."""
    from floe_sparkapp.catalog import load_catalog
    from floe_sparkapp.maintenance import holding, remove_orphans

    producer = AvroProducer(stack, topic)
    produce_old(producer, 0, 50)
    config = config_with(stack, tmp_path, topic, orphan_older_than_seconds=3600)
    run(config, spark, available_now=True, timeout=600)
    referenced = data_files(config)
    data_dir = Path(referenced[0].removeprefix("file:")).parent
    old_orphan, written = data_dir / "old-orphan.parquet", data_dir / "compacted.parquet"
    rows = table_rows(config)
    with holding(config, "compaction"):
        for orphan in (old_orphan, written):  # (the compaction's file: written since it began)
            orphan.write_bytes(b"PAR1 not committed yet PAR1")
        os.utime(old_orphan, (time.time() - 86_400, time.time() - 86_400))
        later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=3)  # hours into it
        table = load_catalog(config.catalog()).load_table(config.table.identifier)
        result = remove_orphans(spark, config, table, later)
    assert (old_orphan.exists(), written.exists()) == (False, True)
    assert result["removedFiles"] == 1
    assert multiset(table_rows(config)) == multiset(rows)
