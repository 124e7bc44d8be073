"""The stack can restart one component in place, as the fault-injection tests will need."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from hack import stack as local_stack

from .test_stack_kafka import consume_all, create_topic

# The broker every test shares is killed and restarted.
pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.alone("kafka")]


def test_killed_kafka_broker_restarts_with_its_data(stack, unique_name):
    topic = f"restart-{unique_name}"
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": stack.bootstrap, "enable.idempotence": True})
    for i in range(50):
        producer.produce(topic, value=f"before-{i}".encode())
    assert producer.flush(30) == 0

    local_stack.stop_component("kafka", kill=True)
    local_stack.start_component("kafka")

    for i in range(50):
        producer.produce(topic, value=f"after-{i}".encode())
    assert producer.flush(60) == 0
    values = sorted(
        m.value().decode()
        for m in consume_all(stack.bootstrap, topic, 100, isolation="read_committed")
    )
    assert values == sorted([f"before-{i}" for i in range(50)] + [f"after-{i}" for i in range(50)])
