"""A Protobuf topic through the operator and the job on the node: the operator makes the table
from the subject (protoc in its image), the driver decodes in its Python workers."""

from __future__ import annotations

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference
from kubernetes import client

from ..integration.jobkit import create_topic
from ..integration.test_job_formats import (COMMON, V1, FramedProducer, framed, message_class,
                                            proto_order, python_view, table_view)
from .kube import admin_client, wait_until
from .test_operator import logs, orders_rows, topic_body, topic_catalog

pytestmark = pytest.mark.e2e


@pytest.mark.node
def test_a_protobuf_topic_lands_through_the_operator_on_the_node(
        stack, operator, drivers, namespace, shared, tmp_path, unique_name):
    custom = client.CustomObjectsApi(admin_client(stack))
    kafka_topic = f"pb-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    producer = FramedProducer(stack, kafka_topic)
    common_subject = f"{kafka_topic}-shop.common"
    producer.register(common_subject, Schema(COMMON, "PROTOBUF"))
    schema_id = producer.register(f"{kafka_topic}-value", Schema(
        V1, "PROTOBUF", [SchemaReference("shop/common.proto", common_subject, 1)]))
    order = message_class(V1, (("shop/common.proto", COMMON),), "shop.Order")
    for i in range(40):
        producer.send(f"k{i}".encode(), framed(schema_id, proto_order(order, i, 1)
                                               .SerializeToString(), b"\x00"),
                      proto_order(order, i, 1))
    producer.flush()

    body = topic_body(stack, shared, kafka_topic)
    body["spec"]["value"]["format"] = "protobuf"
    body["spec"]["value"]["message"] = "shop.Order"
    custom.create_namespaced_custom_object("floe.dev", "v1alpha1", namespace,
                                           "kafkaicebergtopics", body)

    def status() -> dict:
        return custom.get_namespaced_custom_object("floe.dev", "v1alpha1", namespace,
                                                   "kafkaicebergtopics", "orders").get("status", {})

    assert wait_until(lambda: len(orders_rows(topic_catalog(shared))) == 40, timeout=300), (
        f"{status()}\n{logs(tmp_path, namespace)}")
    rows = {r["key"]: r for r in orders_rows(topic_catalog(shared))}
    for sent in producer.sent.values():
        row = rows[sent["key"]]
        assert table_view(row["value"]) == python_view(sent["value"])
        assert row["kafka"]["schema_id"] == schema_id
    assert wait_until(lambda: status().get("offsets", {}).get("lag") == 0, timeout=60), status()
    conditions = {c["type"]: c["status"] for c in status()["conditions"]}
    assert conditions["TableReady"] == conditions["SchemaInSync"] == "True"
    assert status()["table"]["registryVersion"] == 1
