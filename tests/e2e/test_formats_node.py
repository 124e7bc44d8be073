"""A Protobuf topic through the operator and the job on the node: the operator makes the table
from the subject (protoc in its image) and evolves it as new versions are registered, a breaking
version waits for approval as an Avro one does, and the driver decodes in the JVM."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
import requests
from confluent_kafka.schema_registry import Schema, SchemaReference
from kubernetes import client

from ..integration.jobkit import AvroProducer, create_topic
from ..integration.test_job_formats import (
    COMMON,
    V1,
    V2,
    V3,
    FramedProducer,
    framed,
    message_class,
    proto_order,
    python_view,
    table_view,
)
from .kube import admin_client, wait_until
from .test_operator import logs, orders_rows, orders_status, topic_body, topic_catalog

pytestmark = pytest.mark.e2e

IMPORTS = (("shop/common.proto", COMMON),)


def in_sync(status: dict) -> dict:
    """The SchemaInSync condition of a KafkaIcebergTopic's status (none yet: empty)."""
    return {c["type"]: c for c in status.get("conditions", [])}.get("SchemaInSync", {})


@pytest.mark.node
def test_a_protobuf_topic_lands_evolves_and_waits_for_approval_through_the_operator_on_the_node(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    custom = client.CustomObjectsApi(admin_client(stack))
    args = ("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders")
    kafka_topic = f"pb-{unique_name}".replace("_", "-")
    subject = f"{kafka_topic}-value"
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    producer = FramedProducer(stack, kafka_topic)
    common_subject = f"{kafka_topic}-shop.common"
    producer.register(common_subject, Schema(COMMON, "PROTOBUF"))
    references = [SchemaReference("shop/common.proto", common_subject, 1)]
    v1_id = producer.register(subject, Schema(V1, "PROTOBUF", references))
    v1 = message_class(V1, IMPORTS, "shop.Order")
    for i in range(40):
        producer.send(
            f"k{i}".encode(),
            framed(v1_id, proto_order(v1, i, 1).SerializeToString(), b"\x00"),
            proto_order(v1, i, 1),
        )
    producer.flush()

    body = topic_body(stack, shared, kafka_topic)
    body["spec"]["value"]["format"] = "protobuf"
    body["spec"]["value"]["message"] = "shop.Order"
    custom.create_namespaced_custom_object(*args[:4], body)
    catalog = topic_catalog(shared)

    def status() -> dict:
        return orders_status(stack, namespace)

    def schema_condition() -> dict:
        return in_sync(status())

    def value_fields() -> dict[str, str]:
        try:
            table = catalog.load_table("analytics.orders")
        except Exception:  # noqa: BLE001 - not made yet
            return {}
        return {
            f.name: str(f.field_type) for f in table.schema().find_field("value").field_type.fields
        }

    assert wait_until(lambda: len(orders_rows(catalog)) == 40, timeout=300, interval=2), (
        f"{status()}\n{logs(tmp_path, namespace)}"
    )
    rows = {r["key"]: r for r in orders_rows(catalog)}
    for sent in producer.sent.values():
        row = rows[sent["key"]]
        assert table_view(row["value"]) == python_view(sent["value"])
        assert row["kafka"]["schema_id"] == v1_id
    assert wait_until(lambda: status().get("offsets", {}).get("lag") == 0, timeout=60), status()
    conditions = {c["type"]: c["status"] for c in status()["conditions"]}
    assert conditions["TableReady"] == conditions["SchemaInSync"] == "True"
    assert status()["table"]["registryVersion"] == 1

    # An additive version (a field, and one in the nested Line): evolved with no manual step.
    v2_id = producer.register(subject, Schema(V2, "PROTOBUF", references))
    assert wait_until(lambda: "discount" in value_fields(), timeout=60), logs(tmp_path, namespace)
    assert wait_until(lambda: status()["table"].get("registryVersion") == 2, timeout=60), status()
    assert "gift" in str(value_fields()["lines"])

    # A breaking version (customer from string to int64): the table waits for approval.
    requests.put(
        f"{stack.registry_url}/config/{subject}", json={"compatibility": "NONE"}, timeout=10
    ).raise_for_status()
    v3_id = producer.register(subject, Schema(V3, "PROTOBUF", references))
    assert wait_until(lambda: schema_condition().get("reason") == "BreakingChange", timeout=60), (
        status()
    )
    assert schema_condition()["status"] == "False"
    assert schema_condition()["message"] == (
        "registry version 3: breaking schema change: value.customer: type changed from string "
        "to long; the table keeps its schema and those records land in value_raw until the "
        'annotation floe.dev/approve-schema-version: "3" approves the change'
    )
    assert value_fields()["customer"] == "string"

    custom.patch_namespaced_custom_object(
        *args, {"metadata": {"annotations": {"floe.dev/approve-schema-version": "3"}}}
    )
    assert wait_until(lambda: value_fields().get("customer") == "long", timeout=60), logs(
        tmp_path, namespace
    )
    assert value_fields()["customer_before_v3"] == "string"
    assert wait_until(lambda: schema_condition().get("status") == "True", timeout=60), status()

    # Records of every version land: v3's customer in the new column, v2's in the renamed one.
    v2, v3 = message_class(V2, IMPORTS, "shop.Order"), message_class(V3, IMPORTS, "shop.Order")
    producer.send(b"v2", framed(v2_id, proto_order(v2, 41, 2).SerializeToString(), b"\x00"))
    producer.send(
        b"v3", framed(v3_id, v3(id=99, customer=7, discount=0.5).SerializeToString(), b"\x00")
    )
    producer.flush()

    def row(key: bytes) -> dict | None:
        return next((r for r in orders_rows(catalog) if r["key"] == key), None)

    assert wait_until(lambda: row(b"v3") is not None and row(b"v2") is not None, timeout=180), logs(
        tmp_path, namespace
    )
    assert (
        row(b"v3")["value"]["id"],
        row(b"v3")["value"]["customer"],
        row(b"v3")["value"]["customer_before_v3"],
        row(b"v3")["value"]["discount"],
    ) == (99, 7, None, 0.5)
    assert row(b"v3")["kafka"]["schema_id"] == v3_id
    assert (
        row(b"v2")["value"]["customer"],
        row(b"v2")["value"]["customer_before_v3"],
        row(b"v2")["value"]["discount"],
    ) == (None, "c6", 41 / 4)
    assert len(orders_rows(catalog)) == 42


@pytest.mark.node
def test_plain_json_with_declared_columns_lands_through_the_operator_on_the_node(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    """Plain JSON without a registry: the operator makes the table from value.columns and
    evolves it when a column is declared; the job on the node converts each field to its
    column's type, a field that does not convert is null with a note."""
    custom = client.CustomObjectsApi(admin_client(stack))
    args = ("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders")
    kafka_topic = f"json-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=1)
    producer = AvroProducer(stack, kafka_topic)

    def send(*values: dict) -> None:
        for value in values:
            producer.send(key=None, raw=json.dumps(value).encode())
        producer.flush()

    send({"id": 1, "amount": "12.50", "note": "first"}, {"id": "two", "amount": 3})
    body = topic_body(stack, shared, kafka_topic)
    body["spec"]["value"] = {
        "format": "json",
        "columns": [{"name": "id", "type": "long"}, {"name": "amount", "type": "decimal(10, 2)"}],
    }
    custom.create_namespaced_custom_object(*args[:4], body)
    catalog = topic_catalog(shared)

    def status() -> dict:
        return orders_status(stack, namespace)

    def schema_condition() -> dict:
        return in_sync(status())

    def rows() -> list[dict]:  # in offset order (one partition)
        return sorted(orders_rows(catalog), key=lambda r: r["kafka"]["offset"])

    def values() -> list[dict]:
        return [r["value"] for r in rows()]

    assert wait_until(lambda: len(values()) == 2, timeout=300, interval=2), (
        f"{status()}\n{logs(tmp_path, namespace)}"
    )
    assert values() == [
        {"id": 1, "amount": Decimal("12.50")},
        {"id": None, "amount": Decimal("3.00")},
    ]
    assert rows()[1]["value_error"] == (
        "coercion: null in the row for id: 'two' is not a long (the full value is in value_raw)"
    )
    assert (schema_condition().get("status"), schema_condition().get("message")) == (
        "True",
        "table matches the declared value.columns",
    )

    # A declared column: the operator evolves the table, the restarted job fills it.
    custom.patch_namespaced_custom_object(
        *args,
        {
            "spec": {
                "value": {
                    "columns": [
                        *body["spec"]["value"]["columns"],
                        {"name": "note", "type": "string"},
                    ]
                }
            }
        },
    )
    send({"id": 3, "amount": 1, "note": "third"})
    assert wait_until(
        lambda: len(values()) == 3 and values()[2].get("note") == "third", timeout=300, interval=2
    ), f"{status()}\n{logs(tmp_path, namespace)}"
    assert values()[0]["note"] is None  # landed before the column was declared
    assert status()["observedGeneration"] == 2
