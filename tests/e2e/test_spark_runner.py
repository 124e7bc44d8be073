"""The local SparkApplication runner runs what the operator renders, and reports like
spark-operator: the job lands rows, a killed driver is FAILED and resubmitted, nothing is lost."""

from __future__ import annotations

import base64
import os
import signal

import pytest
from kubernetes import client

from floe_operator.render import Topic, config_map, spark_application
from floe_operator.settings import OperatorSettings

from ..integration.jobkit import AvroProducer, assert_exactly_once, create_topic
from ..integration.test_job_roundtrip import produce_orders
from .kube import FLOE_CRD, SPARK_CRD, admin_client, install_crd, wait_until
from .test_operator import logs, orders_rows, topic_body, topic_catalog

pytestmark = pytest.mark.e2e

ARGS = ("sparkoperator.k8s.io", "v1beta2")


def state_of(custom, namespace, name):
    app = custom.get_namespaced_custom_object(*ARGS, namespace, "sparkapplications", name)
    return app.get("status", {})


def test_a_rendered_application_runs_and_a_killed_driver_is_resubmitted_without_loss(
        stack, runner, namespace, tmp_path, unique_name):
    admin = admin_client(stack)
    install_crd(admin, FLOE_CRD)
    install_crd(admin, SPARK_CRD)
    custom = client.CustomObjectsApi(admin)
    core = client.CoreV1Api(admin)
    kafka_topic = f"runner-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    producer = AvroProducer(stack, kafka_topic)
    produce_orders(producer, 0, 100)
    core.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="lake"),
        data={"floe.test-marker": base64.b64encode(b"mounted").decode()}))
    body = topic_body(stack, tmp_path, kafka_topic)
    body["spec"]["table"]["catalog"]["secretRef"] = {"name": "lake"}
    created = custom.create_namespaced_custom_object("floe.dev", "v1alpha1", namespace,
                                                     "kafkaicebergtopics", body)
    topic = Topic.from_body(created)
    core.create_namespaced_config_map(namespace, config_map(topic, OperatorSettings()))
    custom.create_namespaced_custom_object(*ARGS, namespace, "sparkapplications",
                                           spark_application(topic, OperatorSettings()))
    catalog = topic_catalog(tmp_path)  # read by the test without the driver's mounted Secret

    assert wait_until(lambda: state_of(custom, namespace, "floe-orders")
                      .get("applicationState", {}).get("state") == "RUNNING", timeout=60)
    assert wait_until(lambda: len(orders_rows(catalog)) >= 100, timeout=180), logs(tmp_path)

    pid = int(state_of(custom, namespace, "floe-orders")["sparkApplicationId"].split("-")[1])
    os.killpg(pid, signal.SIGKILL)
    assert wait_until(lambda: state_of(custom, namespace, "floe-orders")
                      .get("executionAttempts") == 2, timeout=60), logs(tmp_path)
    produce_orders(producer, 100, 50)
    assert wait_until(lambda: len(orders_rows(catalog)) >= 150, timeout=180), logs(tmp_path)
    status = state_of(custom, namespace, "floe-orders")
    assert status["applicationState"]["state"] == "RUNNING"
    assert status["submissionAttempts"] == 2
    assert_exactly_once(orders_rows(catalog), producer.sent)

    # Deleting the application stops its driver.
    driver = int(status["sparkApplicationId"].split("-")[1])
    custom.delete_namespaced_custom_object(*ARGS, namespace, "sparkapplications", "floe-orders")
    assert wait_until(lambda: not _alive(driver), timeout=30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False

