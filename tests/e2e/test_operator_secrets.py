"""Credentials reach the operator and the job only through Secret references, and never show up
on the status, in Events, in the children or in any log; the catalog is a JDBC catalog on
PostgreSQL whose password is one of them."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client

from ..integration.jobkit import AvroProducer, create_topic
from ..integration.test_job_roundtrip import produce_orders
from .kube import admin_client, wait_until
from .test_operator import logs, postgres_catalog, topic_body

pytestmark = pytest.mark.e2e


@pytest.mark.node
def test_secrets_stay_out_of_status_events_children_and_logs(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    admin = admin_client(stack)
    core, custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
    kafka_password = f"kafka-{uuid.uuid4().hex}"
    registry_password = f"registry-{uuid.uuid4().hex}"
    s3_secret = stack.env["FLOE_S3_SECRET_KEY"]
    # The catalog is a JDBC catalog on the stack's PostgreSQL; its password and the S3 keys go
    # to the Secret. The operator makes the table through it and the job commits through it.
    catalog = postgres_catalog(stack, f"{namespace}-{unique_name}")
    lake = {
        key: catalog["properties"].pop(key)
        for key in ("jdbc.password", "s3.access-key-id", "s3.secret-access-key")
    }
    catalog["secretRef"] = {"name": "lake"}
    secrets = {
        "kafka-auth": {
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule"
            f' required username="floe" password="{kafka_password}";'
        },
        "registry-auth": {"basic.auth.user.info": f"floe:{registry_password}"},
        "lake": lake,
    }
    for name, data in secrets.items():
        core.create_namespaced_secret(
            namespace, client.V1Secret(metadata=client.V1ObjectMeta(name=name), string_data=data)
        )

    kafka_topic = f"sec-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    producer = AvroProducer(stack, kafka_topic)
    produce_orders(producer, 0, 40)
    body = topic_body(stack, shared, kafka_topic)
    spec = body["spec"]
    spec["kafka"].update(
        {"properties": {"security.protocol": "PLAINTEXT"}, "authSecretRef": {"name": "kafka-auth"}}
    )
    spec["value"]["schemaRegistry"]["authSecretRef"] = {"name": "registry-auth"}
    spec["table"]["catalog"] = catalog
    custom.create_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
    )

    def resource() -> dict:
        return custom.get_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
        )

    expected = {str(p): o for p, o in producer.next_offsets().items()}

    def landed() -> bool:
        offsets = resource().get("status", {}).get("offsets", {})
        return offsets.get("committed") == expected and offsets.get("lag") == 0

    assert wait_until(landed, timeout=240), (
        f"{resource().get('status')}\n{logs(tmp_path, namespace)}"
    )

    seen = {
        "status": json.dumps(resource()),
        "events": json.dumps([e.message for e in core.list_namespaced_event(namespace).items]),
        "config map": json.dumps(
            core.read_namespaced_config_map("floe-orders-job", namespace).data
        ),
        "spark application": json.dumps(
            custom.get_namespaced_custom_object(
                "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications", "floe-orders"
            )
        ),
        "operator log": (tmp_path / "operator.log").read_text(errors="replace"),
        **{
            f"log of pod {pod.metadata.name}": core.read_namespaced_pod_log(
                pod.metadata.name, namespace, container=pod.spec.containers[0].name
            )
            for pod in core.list_namespaced_pod(namespace, label_selector="spark-role").items
        },
        "driver pod": json.dumps(
            client.ApiClient().sanitize_for_serialization(
                core.read_namespaced_pod("floe-orders-driver", namespace)
            )
        ),
    }
    assert "JobCreated" in seen["events"] or "created SparkApplication" in seen["events"]
    # The driver's and at least one executor's logs were read, and what they print is there.
    pod_logs = [text for where, text in seen.items() if where.startswith("log of pod")]
    assert len(pod_logs) >= 2, sorted(seen)
    assert any("floe" in text for text in pod_logs), pod_logs
    for where, text in seen.items():
        for secret in (
            kafka_password,
            registry_password,
            s3_secret,
            stack.env["FLOE_POSTGRES_PASSWORD"],
        ):
            assert secret not in text, f"a secret value appears in the {where}"
