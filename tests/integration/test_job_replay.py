"""Replay in the job (``python -m floe_sparkapp operate``): a table's rows produced to another
topic through a transactional producer, each once; floe landing that topic makes the same
rows."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer

from floe_sparkapp.config import parse_config
from floe_sparkapp.contract import OperationRequest
from floe_sparkapp.operations import OperationRefused, operate

from .jobkit import (
    AvroProducer,
    consume_to_end,
    create_topic,
    job_config,
    killed_after_first,
    run_once,
    table_rows,
)
from .test_job_roundtrip import V1, normalize, order

pytestmark = pytest.mark.integration


def request(uid: str, **replay) -> OperationRequest:
    return OperationRequest.model_validate(
        {"uid": uid, "name": uid, "type": "Replay", "replay": replay}
    )


def committed_records(stack, topic: str) -> list:
    """What a read_committed consumer reads of ``topic``. Once no transaction is open in it
    (each partition's last stable offset is its end: every commit's markers are written), each
    partition is read to that end, instead of until nothing has come for 10 s; where one stays
    open for 30 s, as before."""
    if _no_open_transaction(stack, topic, timeout=30):
        return consume_to_end(stack, topic, isolation="read_committed")
    consumer = Consumer(
        {
            "bootstrap.servers": stack.bootstrap,
            "group.id": f"read-{topic}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    found, idle = [], 0
    while idle < 10:
        message = consumer.poll(1.0)
        if message is None:
            idle += 1
            continue
        if message.error() is None:
            found.append(message)
            idle = 0
    consumer.close()
    return found


def _no_open_transaction(stack, topic: str, timeout: float) -> bool:
    """Whether each partition's last stable offset (a read_committed consumer's end) is its
    high watermark (a read_uncommitted one's) within ``timeout``."""
    from confluent_kafka import TopicPartition

    readers = [
        Consumer(
            {
                "bootstrap.servers": stack.bootstrap,
                "group.id": f"ends-{topic}",
                "isolation.level": level,
            }
        )
        for level in ("read_committed", "read_uncommitted")
    ]
    try:
        partitions = readers[0].list_topics(topic, timeout=10).topics[topic].partitions
        deadline = time.monotonic() + timeout
        while True:
            stable, end = [
                [
                    reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in sorted(partitions)
                ]
                for reader in readers
            ]
            if stable == end:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
    finally:
        for reader in readers:
            reader.close()


def as_landed(rows: list[dict]) -> dict[int, list[tuple]]:
    """Per partition, in offset order, what each row holds but its offset."""
    found: dict[int, list[tuple]] = {}
    for row in sorted(rows, key=lambda r: (r["kafka"]["partition"], r["kafka"]["offset"])):
        kafka = row["kafka"]
        found.setdefault(kafka["partition"], []).append(
            (
                row["key"],
                normalize(row["value"]),
                row["value_raw"],
                row["value_error"],
                kafka["timestamp"],
                kafka["timestamp_type"],
                kafka["headers"],
                kafka["schema_id"],
            )
        )
    return found


def test_a_replay_produces_the_table_once_and_landing_it_again_makes_the_same_rows(
    stack, spark, tmp_path, unique_name
):
    """A table with decoded rows, a raw one, a tombstone and headers is replayed (four records a
    transaction); the first attempt dies after its first transaction and the second goes on
    after it. The topic holds each row once (read committed), and floe landing it makes the
    same rows, partition by partition, in order."""
    from floe_sparkapp import replay

    source = f"replay-{unique_name}".replace("_", "-")
    target = f"{source}-copy"
    create_topic(stack.bootstrap, source, partitions=2)
    create_topic(stack.bootstrap, target, partitions=2)
    producer = AvroProducer(stack, source)
    # A minute ago (not now: the timestamps are carried over), never days ago: the broker's
    # retention would delete the records it replays
    minute_ago = int(time.time() * 1000) - 60_000
    for i in range(20):
        producer.send(
            key=f"k{i}".encode(),
            value=order(i, 1),
            schema=V1,
            headers=[("trace", f"t{i}".encode())] if i % 3 else None,
            timestamp_ms=minute_ago + i,
        )
    producer.send(key=b"junk", raw=b"not avro", partition=0)
    producer.send(key=b"gone", partition=1)  # a tombstone
    producer.flush()
    config = job_config(stack, tmp_path, source)
    run_once(config, spark)
    assert len(table_rows(config)) == 22

    with killed_after_first(replay.Replay, "_commit"):
        operate(config, request("copy", topic=target, recordsPerTransaction=4), spark)
    outcome = operate(config, request("copy", topic=target, recordsPerTransaction=4), spark)
    assert outcome["records"] == 22
    assert outcome["producedThisAttempt"] == 22 - 4  # the first transaction's stayed
    assert sum(r["to"] - r["from"] for r in outcome["partitions"].values()) == 22

    produced = committed_records(stack, target)
    (tmp_path / "copy").mkdir()
    assert len(produced) == 22  # each row once, however often the replay ran
    copy = parse_config(
        {
            **json.loads(
                job_config(stack, tmp_path / "copy", target, writer="data/copy").to_json()
            ),
            "value": {
                "format": "avro",
                "schemaRegistry": {"url": stack.registry_url, "subject": f"{source}-value"},
            },
        }
    )
    run_once(copy, spark)
    assert as_landed(table_rows(copy)) == as_landed(table_rows(config))

    with pytest.raises(OperationRefused, match="does not exist: create it"):
        operate(config, request("nowhere", topic=f"{source}-none"), spark)
    create_topic(stack.bootstrap, f"{source}-narrow", partitions=1)
    with pytest.raises(
        OperationRefused, match="has 1 partitions and the rows come from partitions up to 1"
    ):
        operate(config, request("narrow", topic=f"{source}-narrow"), spark)
    with pytest.raises(OperationRefused, match="is the topic the table lands"):
        operate(config, request("self", topic=source), spark)


def test_old_rows_are_refused_where_the_topics_retention_deletes_them_or_stamped_now(
    stack, spark, tmp_path, unique_name
):
    """Rows 30 days old, replayed to a topic that keeps records 7 days: with their timestamps
    the replay is refused (the broker would delete them) and produces nothing; stamped now,
    each row is in the topic once, recent, its timestamp in header floe.original-timestamp."""
    source = f"replay-old-{unique_name}".replace("_", "-")
    target = f"{source}-week"
    # the source keeps its old records until the job has landed them
    create_topic(stack.bootstrap, source, partitions=2, config={"retention.ms": "-1"})
    create_topic(
        stack.bootstrap, target, partitions=2, config={"retention.ms": str(7 * 86_400_000)}
    )
    producer = AvroProducer(stack, source)
    month_ago = int(time.time() * 1000) - 30 * 86_400_000
    for i in range(10):
        producer.send(
            key=f"k{i}".encode(), value=order(i, 1), schema=V1, timestamp_ms=month_ago + i
        )
    producer.flush()
    config = job_config(stack, tmp_path, source)
    run_once(config, spark)
    assert len(table_rows(config)) == 10

    with pytest.raises(
        OperationRefused,
        match=r"\(retention\.ms 604800000\), and 10 of the rows "
        r"to replay are older.* Set replay\.timestamps: "
        "now",
    ):
        operate(config, request("old-kept", topic=target), spark)
    outcome = operate(config, request("old-now", topic=target, timestamps="now"), spark)
    assert outcome["records"] == outcome["producedThisAttempt"] == 10

    produced = committed_records(stack, target)
    assert len(produced) == 10  # each row once, none from the refused replay
    hour_ago = int(time.time() * 1000) - 3_600_000
    assert all(m.timestamp()[1] > hour_ago for m in produced)
    assert {
        m.key(): int(dict(m.headers())["floe.original-timestamp"].decode()) for m in produced
    } == {f"k{i}".encode(): month_ago + i for i in range(10)}
