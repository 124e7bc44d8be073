"""The operator killed at awkward moments converges: one child per resource, finalizer honoured."""

from __future__ import annotations

import pytest
from kubernetes import client

from .kube import SPARK_CRD, admin_client, install_crd, wait_until
from .test_operator import topic_body

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

APPS = ("sparkoperator.k8s.io", "v1beta2")


@pytest.fixture
def api(stack):
    install_crd(admin_client(stack), SPARK_CRD)
    return client.CustomObjectsApi(admin_client(stack))


def apps(api, namespace) -> list[dict]:
    return api.list_namespaced_custom_object(*APPS, namespace, "sparkapplications")["items"]


def topic(api, namespace) -> dict | None:
    try:
        return api.get_namespaced_custom_object("floe.dev", "v1alpha1", namespace,
                                                "kafkaicebergtopics", "orders")
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def create_topic_resource(api, stack, namespace, tmp_path):
    from ..integration.jobkit import create_topic

    name = f"{namespace}-t"
    create_topic(stack.bootstrap, name, partitions=1)
    api.create_namespaced_custom_object("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics",
                                        topic_body(stack, tmp_path, name))


def test_operator_killed_right_after_creating_the_child_converges_to_one_child(
        stack, api, operator_control, namespace, tmp_path):
    operator_control.start()
    create_topic_resource(api, stack, namespace, tmp_path)
    assert wait_until(lambda: len(apps(api, namespace)) == 1, timeout=60)
    operator_control.kill()  # possibly before it wrote the status

    operator_control.start()
    assert wait_until(lambda: (topic(api, namespace) or {}).get("status", {})
                      .get("sparkApplication", {}).get("name") == "floe-orders", timeout=60)
    assert [a["metadata"]["name"] for a in apps(api, namespace)] == ["floe-orders"]


def test_child_deleted_while_the_operator_is_down_is_recreated(
        stack, api, operator_control, namespace, tmp_path):
    operator_control.start()
    create_topic_resource(api, stack, namespace, tmp_path)
    assert wait_until(lambda: len(apps(api, namespace)) == 1, timeout=60)
    first = apps(api, namespace)[0]["metadata"]["uid"]
    operator_control.kill()
    api.delete_namespaced_custom_object(*APPS, namespace, "sparkapplications", "floe-orders")

    operator_control.start()
    assert wait_until(lambda: len(apps(api, namespace)) == 1
                      and apps(api, namespace)[0]["metadata"]["uid"] != first, timeout=60)
    assert len(apps(api, namespace)) == 1


def test_resource_deleted_while_the_operator_is_down_is_finalized_when_it_returns(
        stack, api, operator_control, namespace, tmp_path):
    operator_control.start()
    create_topic_resource(api, stack, namespace, tmp_path)
    assert wait_until(lambda: "floe.dev/finalizer" in
                      ((topic(api, namespace) or {}).get("metadata", {}).get("finalizers") or []),
                      timeout=60)
    assert wait_until(lambda: len(apps(api, namespace)) == 1, timeout=60)
    operator_control.kill()
    api.delete_namespaced_custom_object("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics",
                                        "orders")
    assert topic(api, namespace) is not None  # held by the finalizer while nobody handles it

    operator_control.start()
    assert wait_until(lambda: topic(api, namespace) is None, timeout=60)
    assert wait_until(lambda: apps(api, namespace) == [], timeout=60)
