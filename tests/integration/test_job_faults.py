"""The fault matrix of the ingestion job: the table holds every produced record exactly once."""

from __future__ import annotations

import shutil
import threading
import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from floe_sparkapp.job import start
from floe_sparkapp.kafka_offsets import DataLossError
from floe_sparkapp.ledger import branch_prefix, offsets_tag

from .jobkit import (
    AvroProducer,
    assert_exactly_once,
    create_topic,
    job_config,
    load_table,
    local_job_env,
    recreate_topic,
    run_once,
    streaming,
    table_rows,
    wait_for_rows,
)
from .test_job_roundtrip import V1 as V1_SCHEMA
from .test_job_roundtrip import order, produce_orders

pytestmark = [pytest.mark.integration, pytest.mark.faults]


@pytest.fixture
def topic(stack, unique_name):
    name = f"faults-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, name, partitions=3)
    return name


def test_lost_checkpoint_restarts_from_the_table_offsets(stack, spark, tmp_path, topic):
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 100)
    config = job_config(stack, tmp_path, topic)
    run_once(config, spark)

    shutil.rmtree(config.checkpoint_location)
    produce_orders(producer, 100, 100)
    run_once(config, spark)

    assert_exactly_once(table_rows(config), producer.sent)


def test_a_first_batch_killed_while_writing_its_offsets_runs_again_on_restart(
    stack, spark, tmp_path, topic
):
    """A process killed between writing its first offset log file under its temporary name and
    renaming it: Spark refuses such a checkpoint at every start, unless the job clears it."""
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 100)
    config = job_config(stack, tmp_path, topic)
    offsets = tmp_path / "checkpoint" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / ".0.0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0.tmp").write_bytes(b"")
    (offsets / "..0.0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0.tmp.crc").write_bytes(b"")

    run_once(config, spark)

    assert_exactly_once(table_rows(config), producer.sent)
    assert not list(offsets.glob(".*.tmp"))


def test_replayed_batch_after_losing_the_last_commit_log_entry_is_a_no_op(
    stack, spark, tmp_path, topic
):
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 120)
    config = job_config(stack, tmp_path, topic, max_records=50)  # several batches
    run_once(config, spark)
    commits = sorted(
        (tmp_path / "checkpoint" / "commits").glob("[0-9]*"), key=lambda p: int(p.name)
    )
    # Spark replays the last batch, which the table has already committed.
    commits[-1].unlink()
    commits[-1].with_name(f".{commits[-1].name}.crc").unlink(missing_ok=True)

    produce_orders(producer, 120, 30)
    run_once(config, spark)

    assert_exactly_once(table_rows(config), producer.sent)


def test_aborted_transactions_never_land(stack, spark, tmp_path, topic):
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 20)
    transactional = Producer(
        {"bootstrap.servers": stack.bootstrap, "transactional.id": f"tx-{topic}"}
    )
    transactional.init_transactions(30)
    serialize = next(iter(producer.serializers.values()))
    from confluent_kafka.serialization import MessageField, SerializationContext

    context = SerializationContext(topic, MessageField.VALUE)
    committed_keys = set()
    for batch in range(6):
        transactional.begin_transaction()
        for i in range(10):
            key = f"tx{batch}-{i}".encode()
            transactional.produce(topic, key=key, value=serialize(order(1000 + i, 1), context))
            if batch % 2 == 0:
                committed_keys.add(key)
        if batch % 2 == 0:
            transactional.commit_transaction(30)
        else:
            transactional.flush(30)
            transactional.abort_transaction(30)
    produce_orders(producer, 20, 20)
    config = job_config(stack, tmp_path, topic)
    run_once(config, spark)

    rows = table_rows(config)
    keys = [r["key"] for r in rows]
    assert {k for k in keys if k.startswith(b"tx")} == committed_keys
    assert len(keys) == len(set(keys)) == 40 + len(committed_keys)


def test_a_second_writer_on_the_same_table_is_fenced(stack, spark, tmp_path, topic):
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 200)
    first = job_config(stack, tmp_path / "a", topic, catalog_dir=tmp_path)
    second = job_config(stack, tmp_path / "b", topic, catalog_dir=tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()

    one = start(first, spark, query_name="first_writer")
    wait_for_rows(first, 1)
    two = start(second, spark, query_name="zombie_writer")  # same writer, its own checkpoint
    stop = threading.Event()

    def keep_producing():
        i = 200
        while not stop.is_set() and i < 1200:
            produce_orders(producer, i, 50)
            i += 50
            time.sleep(0.5)

    thread = threading.Thread(target=keep_producing)
    thread.start()
    thread.join(timeout=120)  # both writers race while the records arrive (about 12 s)
    stop.set()
    thread.join()
    wait_for_rows(first, len(producer.sent), timeout=120)
    for query in (one, two):
        query.stop()
        assert query.exception() is None

    assert_exactly_once(table_rows(first), producer.sent)


def test_records_deleted_by_retention_fail_the_job_with_data_loss(stack, spark, tmp_path, topic):
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 60)
    config = job_config(stack, tmp_path, topic)
    run_once(config, spark)
    produce_orders(producer, 60, 60)
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    ends = producer.next_offsets()
    deleted = admin.delete_records([TopicPartition(topic, p, o) for p, o in ends.items()])
    for future in deleted.values():
        future.result(timeout=30)

    with pytest.raises(DataLossError) as lost:
        start(config, spark, available_now=True)

    message = str(lost.value)
    assert message.startswith(f"DataLoss: topic {topic}: Kafka retention deleted records")
    assert "records lost" in message
    assert len(table_rows(config)) == 60


@pytest.mark.parametrize("catalog", ["sqlite", "postgresql", "rest"])
def test_sigkilled_job_restarted_again_and_again_loses_and_duplicates_nothing(
    stack, tmp_path, topic, catalog
):
    import json
    import os
    import random
    import signal
    import subprocess
    import sys

    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 50)
    config = job_config(stack, tmp_path, topic, interval=2, max_records=300, catalog=catalog)
    config_file = tmp_path / "job.json"
    config_file.write_text(config.to_json())
    env = local_job_env(stack)
    command = [sys.executable, "-m", "floe_sparkapp", "run", "--config", str(config_file)]
    stop = threading.Event()

    def keep_producing():
        i = 50
        while not stop.is_set():
            produce_orders(producer, i, 20)
            i += 20
            time.sleep(0.3)

    thread = threading.Thread(target=keep_producing)
    thread.start()
    rng = random.Random(7)
    kills = 0
    log_file = (tmp_path / "job.log").open("w")

    def first_commits() -> int:
        return (tmp_path / "job.log").read_text().count('"event": "floe.started"')

    try:
        for n in range(10):
            committed = first_commits()
            job = subprocess.Popen(
                command, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
            )
            if n % 2 == 0:  # during start-up: before its first commit (about 10 s in)
                time.sleep(rng.uniform(2, 8))
            else:  # once it has committed a batch: mid-batch or between batches (2 s apart)
                deadline = time.monotonic() + 120
                while first_commits() == committed and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert first_commits() > committed, (tmp_path / "job.log").read_text()[-3000:]
                time.sleep(rng.uniform(0, 4))
            assert job.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            kills += 1
    finally:
        stop.set()
        thread.join()
        log_file.close()
    assert kills == 10

    final = subprocess.run(
        [*command, "--available-now"], env=env, capture_output=True, text=True, timeout=600
    )
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    batches = [
        json.loads(line[line.index("{") :])
        for line in (final.stdout + final.stderr).splitlines()
        if '"event": "floe.batch"' in line
    ]
    assert batches, "the last run committed nothing"
    assert_exactly_once(table_rows(config), producer.sent)
    # Killed batches left their branches; each start drops those of the runs before it.
    assert set(load_table(config).refs()) == {"main", offsets_tag(config.writer)}


def test_branches_left_by_interrupted_batches_are_dropped_when_the_job_starts(
    stack, spark, tmp_path, topic
):

    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 30)
    config = job_config(stack, tmp_path, topic)
    run_once(config, spark)
    table = load_table(config)
    main = table.current_snapshot().snapshot_id
    # What a batch killed between its branch and the fast-forward leaves (this writer's, and
    # an older floe's unnamed one), beside refs that are not this writer's to drop.
    left = [f"{branch_prefix(config.writer)}0123456789abcdef", "floe_0123456789abcdef"]
    others = [f"{branch_prefix('data/other')}0123456789abcdef", "audit"]
    with table.manage_snapshots() as refs:
        for name in left + others:
            refs.create_branch(main, name)

    produce_orders(producer, 30, 10)
    run_once(config, spark)

    assert set(load_table(config).refs()) == {"main", offsets_tag(config.writer), *others}
    assert_exactly_once(table_rows(config), producer.sent)


def test_an_append_failing_before_its_commit_deletes_its_files_and_lands_once_on_restart(
    stack, spark, tmp_path, topic, monkeypatch
):
    from floe_sparkapp.commit import BranchCommitter
    from floe_sparkapp.ledger import last_commit

    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 30)
    config = job_config(stack, tmp_path, topic)
    written = []

    def failing(self, staged, *args, **kwargs):
        written.extend(str(f.location()) for f in staged.files)
        raise RuntimeError("the catalog refused the commit")

    with monkeypatch.context() as patched:
        patched.setattr(BranchCommitter, "publish", failing)
        with pytest.raises(Exception, match="the catalog refused the commit"):
            run_once(config, spark)
    table = load_table(config)
    assert written and last_commit(table, config.writer, topic).offsets == {}
    assert not [f for f in written if table.io.new_input(f).exists()], "files left behind"

    run_once(config, spark)
    assert_exactly_once(table_rows(config), producer.sent)
    assert set(load_table(config).refs()) == {"main", offsets_tag(config.writer)}


@pytest.mark.alone("kafka")  # the broker every test shares restarts
def test_broker_restart_while_streaming(stack, spark, tmp_path, topic):
    from hack import stack as local_stack

    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 100)
    config = job_config(stack, tmp_path, topic, interval=1)
    query = start(config, spark)
    try:
        wait_for_rows(config, 100)
        local_stack.stop_component("kafka", kill=True)
        time.sleep(3)
        local_stack.start_component("kafka")
        produce_orders(producer, 100, 200)
        rows = wait_for_rows(config, 300, timeout=240)
    finally:
        query.stop()
    assert query.exception() is None
    assert_exactly_once(rows, producer.sent)


def _on_table_of(config, other, *, writer: str, checkpoint):
    """``config`` writing ``other``'s table, as ``writer``, with a checkpoint of its own."""
    import json

    from floe_sparkapp.config import parse_config

    data = json.loads(config.to_json())
    data["table"] = json.loads(other.to_json())["table"]
    data.update(writer=writer, checkpointLocation=str(checkpoint))
    return parse_config(data)


def test_an_old_name_reused_for_another_topic_starts_from_that_topics_offsets(
    stack, spark, tmp_path, topic, unique_name
):
    first = AvroProducer(stack, topic)
    produce_orders(first, 0, 30)
    old = job_config(stack, tmp_path, topic)
    run_once(old, spark)

    # The resource is deleted (its table kept) and its name reused for another Kafka topic.
    other_topic = f"reused-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, other_topic, partitions=3)
    second = AvroProducer(stack, other_topic)
    produce_orders(second, 100, 12)
    new = _on_table_of(
        job_config(stack, tmp_path / "new", other_topic, catalog_dir=tmp_path),
        old,
        writer=old.writer,
        checkpoint=tmp_path / "new-checkpoint",
    )
    run_once(new, spark)

    rows = table_rows(old)
    assert_exactly_once([r for r in rows if r["kafka"]["topic"] == other_topic], second.sent)
    assert_exactly_once([r for r in rows if r["kafka"]["topic"] == topic], first.sent)


def test_a_renamed_resource_goes_on_from_the_old_names_offsets(stack, spark, tmp_path, topic):
    from floe_sparkapp.ledger import hand_over_table

    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 30)
    old = job_config(stack, tmp_path, topic)
    run_once(old, spark)
    # What the operator does when the table's writer is gone and another resource names it.
    hand_over_table(load_table(old), "data/orders-renamed")
    produce_orders(producer, 30, 10)
    renamed = _on_table_of(
        old, old, writer="data/orders-renamed", checkpoint=tmp_path / "renamed-checkpoint"
    )
    run_once(renamed, spark)

    assert_exactly_once(table_rows(old), producer.sent)
    # The old name's tag is dropped by the new writer's first commit: only its own remains.
    assert set(load_table(old).refs()) == {"main", offsets_tag("data/orders-renamed")}


def test_a_second_resource_cannot_write_a_table_that_has_a_writer(stack, spark, tmp_path, topic):
    from floe_sparkapp.ledger import TableInUse

    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 10)
    first = job_config(stack, tmp_path, topic)
    run_once(first, spark)
    second = _on_table_of(
        first, first, writer="data/another", checkpoint=tmp_path / "another-checkpoint"
    )

    with pytest.raises(TableInUse) as refused:
        run_once(second, spark)
    assert str(refused.value).startswith(
        "the table is written by data/orders (its table property floe.writer)"
    )
    assert load_table(first).properties["floe.writer"] == "data/orders"
    assert_exactly_once(table_rows(first), producer.sent)


def _with_identifier(config, identifier: str):
    import json

    from floe_sparkapp.config import parse_config

    data = json.loads(config.to_json())
    data["table"]["identifier"] = identifier
    return parse_config(data)


def _ancestry(table) -> list[int]:
    ids, snapshot = [], table.current_snapshot()
    while snapshot is not None:
        ids.append(snapshot.snapshot_id)
        snapshot = (
            table.snapshot_by_id(snapshot.parent_snapshot_id)
            if snapshot.parent_snapshot_id is not None
            else None
        )
    return ids


def _rollback(spark, config, snapshot_id: int) -> None:
    spark.sql(
        f"CALL {config.table.catalog.name}.system.rollback_to_snapshot("
        f"'{config.table.identifier}', {snapshot_id})"
    )


@pytest.mark.parametrize("table_change", ["purged and created again", "a new identifier"])
def test_a_checkpoint_that_outlived_its_table_is_not_followed(
    stack, spark, tmp_path, topic, table_change
):
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 40)
    config = job_config(stack, tmp_path, topic)
    run_once(config, spark)

    # The resource is deleted and created again under its name: the checkpoint stays where
    # the name puts it, the table is another one.
    if table_change == "purged and created again":
        from floe_sparkapp.catalog import load_catalog

        load_catalog(config.table.catalog).purge_table(config.table.identifier)
        again = config
    else:
        again = _with_identifier(config, f"{config.table.identifier}_v2")
    produce_orders(producer, 40, 20)
    run_once(again, spark)

    assert_exactly_once(table_rows(again), producer.sent)


def test_a_rollback_of_main_between_batches_is_ingested_again(stack, spark, tmp_path, topic):
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 30)
    config = job_config(stack, tmp_path, topic, interval=1)
    run_once(config, spark)
    rolled_back_to = load_table(config).current_snapshot().snapshot_id
    with streaming(config, spark) as (failures, _):
        produce_orders(producer, 30, 30)
        assert len(wait_for_rows(config, 60)) == 60
        _rollback(spark, config, rolled_back_to)  # a user undoes the last batches
        produce_orders(producer, 60, 20)
        rows = wait_for_rows(config, 80, timeout=120)
    assert not failures, failures
    assert_exactly_once(rows, producer.sent)
    assert rolled_back_to in _ancestry(load_table(config))


def test_a_rollback_of_main_during_a_batch_is_not_undone(
    stack, spark, tmp_path, topic, monkeypatch
):
    from floe_sparkapp.commit import BranchCommitter

    producer = AvroProducer(stack, topic)
    config = job_config(stack, tmp_path, topic)
    produce_orders(producer, 0, 30)
    run_once(config, spark)
    first = load_table(config).current_snapshot().snapshot_id
    produce_orders(producer, 30, 30)
    run_once(config, spark)
    second = load_table(config).current_snapshot().snapshot_id

    publish = BranchCommitter.publish
    rolled_back = []

    def publish_after_a_rollback(self, staged, *args, **kwargs):
        if not rolled_back:  # the user's rollback lands while the batch is being written
            _rollback(spark, config, first)
            rolled_back.append(staged)
        return publish(self, staged, *args, **kwargs)

    monkeypatch.setattr(BranchCommitter, "publish", publish_after_a_rollback)
    produce_orders(producer, 60, 20)
    run_once(config, spark)

    assert rolled_back
    ancestry = _ancestry(load_table(config))
    assert first in ancestry and second not in ancestry, "the rollback was undone"
    assert_exactly_once(table_rows(config), producer.sent)


def test_a_dead_letter_topic_that_refuses_records_does_not_wedge_the_job(
    stack, spark, tmp_path, topic
):
    from floe_sparkapp.ledger import last_commit

    from .jobkit import consume_to_end

    dlq = f"{topic}.dlq"
    create_topic(stack.bootstrap, dlq, partitions=1, config={"max.message.bytes": "2000"})
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 20)
    producer.send(key=b"huge", raw=b"not avro " * 1000, partition=0)  # too large for the DLQ
    producer.flush()
    config = job_config(stack, tmp_path, topic, dead_letter=dlq)
    run_once(config, spark)  # retried a few times, then committed: it never wedges the job

    rows = table_rows(config)
    assert_exactly_once(rows, producer.sent)
    huge = next(r for r in rows if r["key"] == b"huge")
    assert huge["value_raw"] == b"not avro " * 1000 and huge["value_error"]
    failure = last_commit(load_table(config), config.writer, topic).dead_letter_error
    assert failure.startswith(
        f"1 undecodable record(s) not sent to dead-letter topic {dlq} "
        "after 3 attempts (they are in value_raw): "
    )
    assert "RecordTooLargeException" in failure

    # The next batch's undecodable record fits: it is delivered and the failure is cleared.
    producer.send(key=b"small", raw=b"not avro", partition=1)
    produce_orders(producer, 20, 5)
    run_once(config, spark)
    assert_exactly_once(table_rows(config), producer.sent)
    assert last_commit(load_table(config), config.writer, topic).dead_letter_error is None
    assert [m.key() for m in consume_to_end(stack, dlq)] == [b"small"]


def test_partitions_added_to_the_topic_land_exactly_once(stack, spark, tmp_path, topic):
    from confluent_kafka.admin import NewPartitions

    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 30)
    config = job_config(stack, tmp_path, topic, interval=1)
    query = start(config, spark)
    try:
        wait_for_rows(config, 30)
        admin = AdminClient({"bootstrap.servers": stack.bootstrap})
        for future in admin.create_partitions([NewPartitions(topic, 5)]).values():
            future.result(timeout=30)
        later = AvroProducer(stack, topic)  # knows the new partitions
        for i in range(30, 60):
            later.send(key=f"k{i}".encode(), value=order(i, 1), schema=V1_SCHEMA, partition=i % 5)
        later.flush()
        rows = wait_for_rows(config, 60, timeout=120)
    finally:
        query.stop()
    assert query.exception() is None
    sent = {**producer.sent, **later.sent}
    assert_exactly_once(rows, sent)
    assert {p for p, _ in sent} == {0, 1, 2, 3, 4}

    for i in range(60, 70):  # and after a restart, from the table's offsets
        later.send(key=f"k{i}".encode(), value=order(i, 1), schema=V1_SCHEMA, partition=4)
    later.flush()
    run_once(config, spark)
    assert_exactly_once(table_rows(config), {**producer.sent, **later.sent})


def test_a_topic_deleted_and_created_again_stops_the_job_with_data_loss(
    stack, spark, tmp_path, topic
):
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 30)
    config = job_config(stack, tmp_path, topic)
    run_once(config, spark)

    recreate_topic(stack.bootstrap, topic, partitions=3)
    produce_orders(AvroProducer(stack, topic), 100, 6)  # offsets from 0 again

    with pytest.raises(DataLossError) as lost:
        start(config, spark, available_now=True)
    message = str(lost.value)
    assert message.startswith(
        f"DataLoss: topic {topic} is not the topic table "
        f"{config.table.identifier}'s offsets were committed from: the "
        "topic was deleted and created again (topic ID "
    )
    assert "create the resource again with another table.identifier" in message
    assert_exactly_once(table_rows(config), producer.sent)  # nothing of the new topic mixed in


def test_a_topic_created_again_and_refilled_past_the_tables_offsets_stops_the_job(
    stack, spark, tmp_path, topic
):
    """The new topic's offsets reach beyond the table's, so the offsets alone look fine: the
    topic ID recorded with them tells the topics apart, and nothing of the new one is skipped
    or mixed in."""
    from floe_sparkapp.ledger import last_commit

    producer = AvroProducer(stack, topic)
    for i in range(30):
        producer.send(key=f"k{i}".encode(), value=order(i, 1), schema=V1_SCHEMA, partition=0)
    producer.flush()
    config = job_config(stack, tmp_path, topic)
    run_once(config, spark)
    assert last_commit(load_table(config), config.writer, topic).topic_id

    recreate_topic(stack.bootstrap, topic, partitions=3)
    again = AvroProducer(stack, topic)
    for i in range(100, 160):  # past offset 30 on every partition
        for partition in range(3):
            again.send(
                key=f"k{i}".encode(), value=order(i, 1), schema=V1_SCHEMA, partition=partition
            )
    again.flush()

    with pytest.raises(DataLossError) as lost:
        start(config, spark, available_now=True)
    assert "the topic was deleted and created again (topic ID" in str(lost.value)
    assert_exactly_once(table_rows(config), producer.sent)


def test_a_topic_deleted_and_created_again_while_the_job_runs_stops_it_with_data_loss(
    stack, spark, tmp_path, topic
):
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 30)
    config = job_config(stack, tmp_path, topic, interval=1)
    with streaming(config, spark) as (failures, thread):
        assert len(wait_for_rows(config, 30)) == 30
        recreate_topic(stack.bootstrap, topic, partitions=3)
        produce_orders(AvroProducer(stack, topic), 100, 6)  # offsets from 0 again
        thread.join(timeout=300)
    # Spark's Kafka source stops the query in its own words; the job says DataLoss (its exit
    # code tells the operator not to restart it).
    assert len(failures) == 1 and isinstance(failures[0], DataLossError), failures
    assert str(failures[0]).startswith(
        f"DataLoss: topic {topic}: Kafka's offsets are below "
        "the table's, so the topic was deleted and created again"
    )
    assert_exactly_once(table_rows(config), producer.sent)


def test_a_compacted_topic_with_offset_gaps_lands_what_compaction_kept(
    stack, spark, tmp_path, unique_name
):
    from confluent_kafka import Consumer
    from confluent_kafka.admin import NewTopic

    name = f"compacted-{unique_name}".replace("_", "-")
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    for future in admin.create_topics(
        [
            NewTopic(
                name,
                1,
                1,
                config={
                    "cleanup.policy": "compact",
                    "segment.ms": "200",
                    "min.cleanable.dirty.ratio": "0.001",
                    "min.compaction.lag.ms": "0",
                },
            )
        ]
    ).values():
        future.result(timeout=30)
    producer = AvroProducer(stack, name)
    for version in range(1, 5):  # each key written four times: compaction keeps the last
        for i in range(10):
            producer.send(key=f"k{i}".encode(), value=order(i * 10 + version, 1), schema=V1_SCHEMA)
        producer.flush()
        time.sleep(0.3)

    def kept() -> dict[tuple[int, int], bytes]:
        consumer = Consumer(
            {
                "bootstrap.servers": stack.bootstrap,
                "group.id": f"g-{name}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition(name, 0, 0)])
        found: dict[tuple[int, int], bytes] = {}
        while (message := consumer.poll(2.0)) is not None:
            found[(0, message.offset())] = message.key()
        consumer.close()
        return found

    deadline = time.monotonic() + 120
    while len(kept()) == len(producer.sent) and time.monotonic() < deadline:
        producer.send(key=b"roll", value=order(0, 1), schema=V1_SCHEMA)  # rolls the segment
        producer.flush()
        time.sleep(3)
    survivors = kept()
    assert len(survivors) < len(producer.sent), "the log cleaner compacted nothing"
    config = job_config(stack, tmp_path, name)
    run_once(config, spark)

    assert_exactly_once(table_rows(config), survivors)


def test_a_latest_job_that_lost_its_checkpoint_skips_nothing_after_its_first_start(
    stack, spark, tmp_path, topic, monkeypatch
):
    """``startingOffsets: latest`` applies to the job's very first start only: the history
    before it is skipped, but what came after is landed even when the job stopped before its
    first commit and lost its checkpoint (on every restart with a GCS or ADLS warehouse,
    whose checkpoint is on an emptyDir), and a partition added while the job was down is
    landed from its start."""
    import json

    from confluent_kafka.admin import NewPartitions

    from floe_sparkapp.config import parse_config
    from floe_sparkapp.ledger import last_commit
    from floe_sparkapp.table_writer import TableWriter

    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 30)  # history: skipped
    history = dict(producer.sent)
    data = json.loads(job_config(stack, tmp_path, topic).to_json())
    data["kafka"]["startingOffsets"] = "latest"
    config = parse_config(data)

    def crash(self, *args, **kwargs):
        raise RuntimeError("crashed before its first commit")

    with monkeypatch.context() as patched:  # the first start ends before any commit
        patched.setattr(TableWriter, "commit_batch", crash)
        with pytest.raises(Exception, match="crashed before its first commit"):
            run_once(config, spark)
    assert last_commit(load_table(config), config.writer, topic).offsets == {
        p: max(o for q, o in history if q == p) + 1 for p, _ in history
    }  # where it started

    produce_orders(producer, 30, 30)  # after the first start: each lands
    shutil.rmtree(config.checkpoint_location)
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    for future in admin.create_partitions([NewPartitions(topic, 4)]).values():
        future.result(timeout=30)
    later = AvroProducer(stack, topic)  # knows the new partition
    for i in range(60, 70):
        later.send(key=f"k{i}".encode(), value=order(i, 1), schema=V1_SCHEMA, partition=3)
    later.flush()
    run_once(config, spark)

    after = {k: v for k, v in {**producer.sent, **later.sent}.items() if k not in history}
    assert len(after) == 40
    assert_exactly_once(table_rows(config), after)


def test_a_commit_that_is_not_floes_during_a_batch_does_not_send_it_back(
    stack, spark, tmp_path, topic, monkeypatch
):
    """A compaction or an operation that commits while a batch writes its files (here: a
    snapshot that is not floe's, committed between every batch's files and its commit) no
    longer sends the batch back to be written again, which starved a busy job beside its
    maintenance: the files go on top, each batch is written once, every record lands once.
    (A floe commit or a roll back in between still sends it back: the tests of zombies and of
    roll backs during a batch.)"""
    from floe_sparkapp.commit import BranchCommitter
    from floe_sparkapp.ledger import OFFSETS, ancestors

    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 60)
    config = job_config(stack, tmp_path, topic, max_records=20)
    stage, publish = BranchCommitter.stage, BranchCommitter.publish
    staged: list[int] = []
    done: set[str] = set()

    def counted_stage(self, *args, **kwargs):
        staged.append(1)
        return stage(self, *args, **kwargs)

    def maintenance_first(self, files, base, properties, *args, **kwargs):
        if OFFSETS in properties and properties[OFFSETS] not in done:
            done.add(properties[OFFSETS])
            self._iceberg_table().newAppend().set("floe-test", "maintenance").commit()
        return publish(self, files, base, properties, *args, **kwargs)

    monkeypatch.setattr(BranchCommitter, "stage", counted_stage)
    monkeypatch.setattr(BranchCommitter, "publish", maintenance_first)
    run_once(config, spark)

    assert_exactly_once(table_rows(config), producer.sent)
    history = [s.summary for s in ancestors(load_table(config)) if s.summary is not None]
    commits = [s for s in history if s.get(OFFSETS) is not None]
    assert len(commits) >= 3 and len(done) == len(commits)
    assert sum(1 for s in history if s.get("floe-test") == "maintenance") == len(commits)
    assert len(staged) == len(commits)  # each batch written once


def test_a_topic_made_after_the_job_started_is_recorded_with_its_identity(
    stack, spark, tmp_path, unique_name
):
    """The job started before its topic existed: its first batch asks Kafka again which topic
    it reads, so its commits carry the topic's identity (and a topic created again later is
    told apart) instead of none for the whole run."""
    import json

    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from floe_sparkapp.kafka_offsets import topic_identity
    from floe_sparkapp.ledger import last_commit

    topic = f"faults-later-{unique_name}".replace("_", "-")
    SchemaRegistryClient({"url": stack.registry_url}).register_schema(
        f"{topic}-value", Schema(json.dumps(V1_SCHEMA), "AVRO")
    )
    config = job_config(stack, tmp_path, topic, interval=1)
    assert topic_identity(config) is None
    query = start(config, spark)
    try:
        try:
            create_topic(stack.bootstrap, topic, partitions=2)
        except Exception as error:  # noqa: BLE001 - the job's consumer may have made it first
            assert "TOPIC_ALREADY_EXISTS" in str(error), error
        producer = AvroProducer(stack, topic)
        produce_orders(producer, 0, 20)
        wait_for_rows(config, 20, timeout=180)
    finally:
        query.stop()
    assert query.exception() is None
    assert_exactly_once(table_rows(config), producer.sent)
    committed = last_commit(load_table(config), config.writer, topic)
    assert committed.topic_id is not None and committed.topic_id == topic_identity(config)


def test_brokers_that_do_not_say_the_topics_identity_only_lose_that_check(
    stack, spark, tmp_path, topic, monkeypatch, caplog
):
    """Brokers without topic IDs (before Kafka 3.1) answer DescribeCluster or DescribeTopics
    with an error: the job lands all the same, says in a warning what it cannot check, and
    does not crash in a loop."""
    from confluent_kafka import KafkaError, KafkaException

    def unsupported(self, *args, **kwargs):
        raise KafkaException(
            KafkaError(
                KafkaError._UNSUPPORTED_FEATURE, "DescribeClusterRequest is not supported by broker"
            )
        )

    monkeypatch.setattr(AdminClient, "describe_cluster", unsupported)
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 20)
    config = job_config(stack, tmp_path, topic)
    run_once(config, spark)
    assert_exactly_once(table_rows(config), producer.sent)
    assert "did not say which cluster and topic" in caplog.text
