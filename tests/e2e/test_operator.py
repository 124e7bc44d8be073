"""The operator, as a real process on the real API server, with the local Spark runner."""

from __future__ import annotations

import subprocess

import pytest
from kubernetes import client

from ..integration.jobkit import AvroProducer, create_topic
from ..integration.test_job_roundtrip import V1, order
from .kube import SPARK_CRD, admin_client, install_crd, wait_until

pytestmark = pytest.mark.e2e


def topic_body(stack, tmp_path, kafka_topic: str) -> dict:
    return {
        "apiVersion": "floe.dev/v1alpha1", "kind": "KafkaIcebergTopic",
        "metadata": {"name": "orders"},
        "spec": {
            "kafka": {"bootstrapServers": stack.bootstrap, "topic": kafka_topic},
            "value": {"format": "avro", "schemaRegistry": {"url": stack.registry_url,
                                                           "subject": f"{kafka_topic}-value"}},
            "table": {"catalog": {"name": "op", "uri": f"jdbc:sqlite:{tmp_path / 'c.db'}",
                                  "warehouse": f"file://{tmp_path / 'wh'}"},
                      "identifier": "analytics.orders"},
            "commit": {"interval": "2s"},
            "spark": {"checkpointLocation": str(tmp_path / "checkpoint")},
        },
    }


def logs(tmp_path) -> str:
    files = [tmp_path / "operator.log", tmp_path / "runner.log",
             *sorted((tmp_path / "runner").rglob("driver.log"))]
    return "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-4000:]
                     for p in files if p.exists())


def test_a_topic_lands_and_its_status_shows_it(stack, operator, runner, namespace, tmp_path,
                                                unique_name):
    custom = client.CustomObjectsApi(admin_client(stack))
    kafka_topic = f"op-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    producer = AvroProducer(stack, kafka_topic)
    for i in range(120):
        producer.send(key=f"k{i}".encode(), value=order(i, 1), schema=V1)
    producer.flush()

    custom.create_namespaced_custom_object("floe.dev", "v1alpha1", namespace,
                                           "kafkaicebergtopics",
                                           topic_body(stack, tmp_path, kafka_topic))

    def current_status() -> dict:
        return custom.get_namespaced_custom_object("floe.dev", "v1alpha1", namespace,
                                                   "kafkaicebergtopics", "orders").get("status", {})

    expected = {str(p): o for p, o in producer.next_offsets().items()}

    def landed() -> bool:
        state = current_status()
        return (state.get("offsets", {}).get("committed") == expected
                and state.get("offsets", {}).get("lag") == 0)

    assert wait_until(landed, timeout=240), f"{current_status()}\n{logs(tmp_path)}"
    waited = subprocess.run(["kubectl", "wait", "--for=condition=Ready", "-n", namespace,
                             "kit/orders", "--timeout=60s"], capture_output=True, text=True)
    assert waited.returncode == 0, waited.stderr
    state = current_status()
    conditions = {c["type"]: c for c in state["conditions"]}
    assert set(conditions) == {"Ready", "JobRunning", "TableReady", "SchemaInSync"}
    assert conditions["Ready"]["status"] == "True"
    assert conditions["SchemaInSync"]["status"] == "True"
    assert state["phase"] == "Running"
    assert state["observedGeneration"] == 1
    assert state["sparkApplication"]["name"] == "floe-orders"
    assert state["sparkApplication"]["state"] == "RUNNING"
    assert int(state["table"]["snapshotId"]) > 0
    assert state["table"]["registryVersion"] == 1
    assert state["freshnessSeconds"] >= 0
    printed = subprocess.run(["kubectl", "get", "kit", "-n", namespace], capture_output=True,
                             text=True, check=True).stdout
    header, row = printed.splitlines()[:2]
    assert header.split() == ["NAME", "READY", "PHASE", "LAG", "FRESHNESS", "AGE"]
    assert row.split()[:4] == ["orders", "True", "Running", "0"]


def test_an_invalid_spec_is_reported_and_nothing_is_created(stack, operator, namespace, tmp_path,
                                                             unique_name):
    install_crd(admin_client(stack), SPARK_CRD)
    custom = client.CustomObjectsApi(admin_client(stack))
    body = topic_body(stack, tmp_path, "whatever")
    del body["spec"]["spark"]
    body["spec"]["table"]["catalog"] = {"type": "glue"}  # no warehouse: no checkpoint root

    custom.create_namespaced_custom_object("floe.dev", "v1alpha1", namespace,
                                           "kafkaicebergtopics", body)

    def reported():
        state = custom.get_namespaced_custom_object("floe.dev", "v1alpha1", namespace,
                                                    "kafkaicebergtopics", "orders").get("status", {})
        ready = {c["type"]: c for c in state.get("conditions", [])}.get("Ready", {})
        return ready.get("reason") == "InvalidSpec" and ready

    ready = None
    assert wait_until(lambda: bool(reported()), timeout=60), logs(tmp_path)
    ready = reported()
    assert ready["status"] == "False"
    assert ready["message"] == ("spec.spark.checkpointLocation is required when the catalog has "
                                "no warehouse and the operator has no checkpoint root")
    apps = custom.list_namespaced_custom_object("sparkoperator.k8s.io", "v1beta2", namespace,
                                                "sparkapplications")["items"]
    assert apps == []
