"""The stack's Kafka broker: plain produce/consume and transactions with read_committed."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=30)


def consume_all(
    bootstrap: str, topic: str, expected: int, *, isolation: str, timeout: float = 30
) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"smoke-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    records = []
    deadline = time.monotonic() + timeout
    idle_polls = 0
    while time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None:
            idle_polls += 1
            if len(records) >= expected and idle_polls >= 3:
                break
            continue
        if message.error():
            raise KafkaException(message.error())
        idle_polls = 0
        records.append(message)
    consumer.close()
    return records


def test_produce_and_consume(stack, unique_name):
    topic = f"smoke-{unique_name}"
    create_topic(stack.bootstrap, topic, partitions=3)
    producer = Producer({"bootstrap.servers": stack.bootstrap, "enable.idempotence": True})
    sent = {f"key-{i}".encode(): f"value-{i}".encode() for i in range(30)}
    for key, value in sent.items():
        producer.produce(topic, key=key, value=value, headers=[("origin", b"smoke")])
    assert producer.flush(30) == 0

    records = consume_all(stack.bootstrap, topic, len(sent), isolation="read_uncommitted")

    assert {m.key(): m.value() for m in records} == sent
    assert {m.partition() for m in records} == {0, 1, 2}
    assert all(m.headers() == [("origin", b"smoke")] for m in records)


def test_read_committed_hides_aborted_transactions(stack, unique_name):
    topic = f"smoke-tx-{unique_name}"
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = Producer(
        {"bootstrap.servers": stack.bootstrap, "transactional.id": f"smoke-{unique_name}"}
    )
    producer.init_transactions(30)
    for batch in range(4):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, key=f"{batch}-{i}".encode(), value=f"batch-{batch}".encode())
        if batch % 2 == 0:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # the records reach the log before the abort
            producer.abort_transaction(30)

    committed = consume_all(stack.bootstrap, topic, 10, isolation="read_committed")
    everything = consume_all(stack.bootstrap, topic, 20, isolation="read_uncommitted")

    assert sorted(m.value() for m in committed) == [b"batch-0"] * 5 + [b"batch-2"] * 5
    # The aborted records are in the log; only the read_committed consumer skips them.
    assert sorted({m.value() for m in everything}) == [
        b"batch-0",
        b"batch-1",
        b"batch-2",
        b"batch-3",
    ]
