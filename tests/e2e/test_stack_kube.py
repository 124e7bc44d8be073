"""The stack's kube-apiserver: objects, custom resources, RBAC and service-account identities."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from .kube import wait_until

pytestmark = pytest.mark.e2e


def api_client(stack, token: str | None = None) -> client.ApiClient:
    if token is None:
        return config.new_client_from_config(config_file=stack.env["KUBECONFIG"])
    configuration = client.Configuration()
    configuration.host = stack.env["FLOE_KUBE_SERVER"]
    configuration.ssl_ca_cert = stack.env["FLOE_KUBE_CA"]
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


def test_configmap_create_read_patch_delete(stack, namespace):
    core = client.CoreV1Api(api_client(stack))
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings"), data={"interval": "60s"}),
    )

    assert core.read_namespaced_config_map("settings", namespace).data == {"interval": "60s"}
    core.patch_namespaced_config_map("settings", namespace, {"data": {"interval": "10s"}})
    assert core.read_namespaced_config_map("settings", namespace).data == {"interval": "10s"}
    core.delete_namespaced_config_map("settings", namespace)
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("settings", namespace)
    assert missing.value.status == 404


WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.smoke.floe.dev"},
    "spec": {
        "group": "smoke.floe.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1},
                                    "color": {"type": "string", "default": "blue"},
                                },
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            }
        ],
    },
}


def test_custom_resource_lifecycle_and_validation(stack, namespace):
    admin = api_client(stack)
    extensions = client.ApiextensionsV1Api(admin)
    try:
        extensions.create_custom_resource_definition(WIDGET_CRD)
    except ApiException as error:
        assert error.status == 409  # already there from an earlier run: fine
    custom = client.CustomObjectsApi(admin)
    args = ("smoke.floe.dev", "v1", namespace, "widgets")
    deadline = time.monotonic() + 30
    while True:  # a new CRD takes a moment to be served
        try:
            custom.create_namespaced_custom_object(
                *args,
                {
                    "apiVersion": "smoke.floe.dev/v1",
                    "kind": "Widget",
                    "metadata": {"name": "w1"},
                    "spec": {"size": 3},
                },
            )
            break
        except ApiException as error:
            if error.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)

    widget = custom.get_namespaced_custom_object(*args, "w1")
    assert widget["spec"] == {"size": 3, "color": "blue"}  # the schema's default applied
    custom.patch_namespaced_custom_object(*args, "w1", {"spec": {"size": 5}})
    custom.patch_namespaced_custom_object_status(*args, "w1", {"status": {"phase": "Ready"}})
    widget = custom.get_namespaced_custom_object(*args, "w1")
    assert (widget["spec"]["size"], widget["status"]["phase"]) == (5, "Ready")

    with pytest.raises(ApiException) as invalid:
        custom.create_namespaced_custom_object(
            *args,
            {
                "apiVersion": "smoke.floe.dev/v1",
                "kind": "Widget",
                "metadata": {"name": "w2"},
                "spec": {"size": 0},
            },
        )
    assert invalid.value.status == 422
    assert "spec.size" in invalid.value.body

    custom.delete_namespaced_custom_object(*args, "w1")
    assert custom.list_namespaced_custom_object(*args)["items"] == []


def test_rbac_refuses_a_user_without_grants(stack, namespace):
    nobody = client.CoreV1Api(api_client(stack, stack.env["FLOE_KUBE_NOBODY_TOKEN"]))
    with pytest.raises(ApiException) as refused:
        nobody.list_namespaced_config_map(namespace)
    assert refused.value.status == 403
    assert json.loads(refused.value.body)["message"] == (
        f'configmaps is forbidden: User "nobody" cannot list resource "configmaps" '
        f'in API group "" in the namespace "{namespace}"'
    )

    with pytest.raises(ApiException) as unauthenticated:
        client.CoreV1Api(api_client(stack, "not-a-token")).list_namespaced_config_map(namespace)
    assert unauthenticated.value.status == 401


def test_service_account_tokens_authenticate_and_are_authorized_by_rbac(stack, namespace):
    admin = api_client(stack)
    core = client.CoreV1Api(admin)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    )
    token = core.create_namespaced_service_account_token(
        "reader", namespace, {"spec": {"audiences": [], "expirationSeconds": 600}}
    ).status.token
    as_reader = api_client(stack, token)

    review = client.AuthenticationV1Api(as_reader).create_self_subject_review({})
    assert review.status.user_info.username == f"system:serviceaccount:{namespace}:reader"
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(as_reader).list_namespaced_config_map(namespace)
    assert refused.value.status == 403

    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "configmap-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "configmap-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    deadline = time.monotonic() + 10
    while True:  # RBAC caches update within moments
        try:
            names = [
                c.metadata.name
                for c in client.CoreV1Api(as_reader).list_namespaced_config_map(namespace).items
            ]
            break
        except ApiException as error:
            if error.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    # Published by the real controller-manager, asynchronously: it may be busy deleting the
    # namespaces of earlier tests.
    assert wait_until(
        lambda: (
            "kube-root-ca.crt"
            in [
                c.metadata.name
                for c in client.CoreV1Api(as_reader).list_namespaced_config_map(namespace).items
            ]
        )
    ), names


def test_kubectl_and_helm_talk_to_the_api_server(stack, namespace):
    out = subprocess.run(
        ["kubectl", "get", "namespace", namespace, "-o", "name"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == f"namespace/{namespace}"
    helm = subprocess.run(
        ["helm", "list", "-n", namespace, "-o", "json"], capture_output=True, text=True, check=True
    )
    assert helm.stdout.strip() == "[]"
