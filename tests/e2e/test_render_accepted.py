"""What the operator renders is accepted by the API server as written, and owned by the topic."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from floe_operator.render import Topic, config_map, spark_application
from floe_operator.settings import OperatorSettings

from .kube import FLOE_CRD, SPARK_CRD, admin_client, install_crd, wait_until
from .test_crd_validation import VALID

pytestmark = pytest.mark.e2e


def test_rendered_children_are_accepted_strictly_and_collected_with_their_topic(stack, namespace):
    admin = admin_client(stack)
    install_crd(admin, FLOE_CRD)
    install_crd(admin, SPARK_CRD)
    custom = client.CustomObjectsApi(admin)
    core = client.CoreV1Api(admin)
    body = copy.deepcopy(VALID)
    body["spec"]["kafka"]["authSecretRef"] = {"name": "kafka-auth"}
    body["spec"]["table"]["catalog"]["secretRef"] = {"name": "lake"}
    created = custom.create_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
    )
    topic = Topic.from_body(created)
    settings = OperatorSettings()

    core.create_namespaced_config_map(
        namespace, config_map(topic, settings), field_validation="Strict"
    )
    app = spark_application(topic, settings)
    custom.create_namespaced_custom_object(
        "sparkoperator.k8s.io",
        "v1beta2",
        namespace,
        "sparkapplications",
        app,
        field_validation="Strict",
    )

    stored = custom.get_namespaced_custom_object(
        "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications", "floe-orders"
    )
    assert stored["spec"] == app["spec"]  # nothing pruned: every rendered field is known

    misspelt = copy.deepcopy(app)
    misspelt["metadata"]["name"] = "floe-misspelt"
    misspelt["spec"]["executor"]["instance"] = 2
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(
            "sparkoperator.k8s.io",
            "v1beta2",
            namespace,
            "sparkapplications",
            misspelt,
            field_validation="Strict",
        )
    assert refused.value.status == 400
    assert json.loads(refused.value.body)["message"].endswith(
        'strict decoding error: unknown field "spec.executor.instance"'
    )

    # Deleting the topic collects its children (the controller-manager's garbage collector).
    custom.delete_namespaced_custom_object(
        "floe.dev",
        "v1alpha1",
        namespace,
        "kafkaicebergtopics",
        "orders",
        propagation_policy="Foreground",
    )

    def children_gone() -> bool:
        apps = custom.list_namespaced_custom_object(
            "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications"
        )["items"]
        maps = core.list_namespaced_config_map(namespace, label_selector="floe.dev/topic").items
        return not apps and not maps

    assert wait_until(children_gone, timeout=60)
