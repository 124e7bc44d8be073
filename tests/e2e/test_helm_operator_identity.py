"""The operator as the chart installs it, running as the chart's pod on the node under the
chart's ServiceAccount: the main flow passes under that identity (the RBAC is sufficient) and a
request outside the grant is refused (it is not more than needed)."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from hack.demo import node_values

from .kube import REFRESH_SECONDS, admin_client, install_crd, running_job_pods, wait_until
from .test_helm_chart import CHART, CRDS, helm
from .test_operator import declared_orders, logs, orders_status, topic_catalog

# a log line's own timestamp ("16:25:50,403") is not a refusal
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", re.MULTILINE)


def shows_a_refusal(printed: str) -> bool:
    """Whether the operator's log shows a request the API server refused (HTTP 403)."""
    text = TIMESTAMP.sub("", printed)
    return "Forbidden" in text or re.search(r"(?<![\d.:,])403(?![\d.:])", text) is not None


pytestmark = pytest.mark.e2e


def service_account_kubeconfig(stack, namespace: str, account: str, path) -> None:
    token = (
        client.CoreV1Api(admin_client(stack))
        .create_namespaced_service_account_token(
            account, namespace, {"spec": {"audiences": [], "expirationSeconds": 3600}}
        )
        .status.token
    )
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "floe",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {
                            "server": stack.env["FLOE_KUBE_SERVER"],
                            "certificate-authority": stack.env["FLOE_KUBE_CA"],
                        },
                    }
                ],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [
                    {
                        "name": "floe",
                        "context": {"cluster": "local", "user": account, "namespace": namespace},
                    }
                ],
            }
        )
    )


@pytest.mark.node
def test_the_operator_under_the_charts_identity_lands_a_topic_and_nothing_more(
    stack, namespace, shared, tmp_path, unique_name
):
    admin = admin_client(stack)
    core = client.CoreV1Api(admin)
    for crd in CRDS:
        install_crd(admin, crd)
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                **node_values(shared),
                "watch": {"namespaces": [namespace]},
                "extraEnv": [{"name": "FLOE_REFRESH_SECONDS", "value": str(REFRESH_SECONDS)}],
            }
        )
    )
    helm("install", "floe", CHART, "-n", namespace, "-f", str(values), "--wait", "--timeout", "5m")
    deployment = client.AppsV1Api(admin).read_namespaced_deployment("floe-floe-operator", namespace)
    assert deployment.status.ready_replicas == 1  # its probes pass
    pod = deployment.spec.template.spec
    [replica] = core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/instance=floe"
    ).items
    assert replica.spec.service_account_name == pod.service_account_name

    def operator_log() -> str:
        return subprocess.run(
            ["kubectl", "logs", "-n", namespace, "deploy/floe-floe-operator"],
            capture_output=True,
            text=True,
        ).stdout

    custom = client.CustomObjectsApi(admin)
    producer = declared_orders(stack, shared, namespace, f"sa-{unique_name}".replace("_", "-"), 50)
    expected = {str(p): o for p, o in producer.next_offsets().items()}

    def status() -> dict:
        return orders_status(stack, namespace)

    def ready() -> bool:
        state = status()
        conditions = {c["type"]: c["status"] for c in state.get("conditions", [])}
        return (
            state.get("offsets", {}).get("committed") == expected
            and conditions.get("Ready") == "True"
        )

    assert wait_until(ready, timeout=300, interval=1), (
        f"{status()}\n{operator_log()[-4000:]}\n{logs(tmp_path, namespace)}"
    )
    events = core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=orders"
    ).items
    assert any(e.reason == "JobCreated" for e in events)  # Events are within the grant

    def peers() -> dict:
        return custom.get_namespaced_custom_object(
            "kopf.dev", "v1", namespace, "kopfpeerings", "floe"
        ).get("status", {})

    # The replica keeps itself in the peering (kopf drops a record it sees expired, and writes
    # it again at its next keep-alive).
    assert wait_until(lambda: replica.metadata.name in peers(), timeout=90, interval=1), (
        f"{peers()}\n{operator_log()[-4000:]}"
    )
    # Deleted with deletionPolicy Delete: it waits for the job's pods, then drops the table.
    custom.patch_namespaced_custom_object(
        "floe.dev",
        "v1alpha1",
        namespace,
        "kafkaicebergtopics",
        "orders",
        {"spec": {"table": {"deletionPolicy": "Delete"}}},
    )
    assert topic_catalog(shared).table_exists("analytics.orders")
    custom.delete_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
    )

    def gone() -> bool:
        try:
            status()
            return False
        except ApiException as error:
            return error.status == 404

    assert wait_until(gone, timeout=180, interval=1), operator_log()[-4000:]
    assert not topic_catalog(shared).table_exists("analytics.orders")
    assert running_job_pods(admin, namespace, "floe-orders") == []
    printed = operator_log()
    assert not shows_a_refusal(printed), printed[-3000:]

    kubeconfig = tmp_path / "operator-kubeconfig"
    service_account_kubeconfig(stack, namespace, pod.service_account_name, kubeconfig)
    from kubernetes import config

    as_operator = config.new_client_from_config(config_file=str(kubeconfig))
    refused = [
        lambda: client.CoreV1Api(as_operator).list_namespaced_secret("kube-system"),
        lambda: client.CoreV1Api(as_operator).list_namespaced_secret(namespace),  # get only
        lambda: client.CoreV1Api(as_operator).delete_namespace(namespace),
        lambda: client.CustomObjectsApi(as_operator).list_namespaced_custom_object(
            "floe.dev", "v1alpha1", "default", "kafkaicebergtopics"
        ),
        lambda: client.RbacAuthorizationV1Api(as_operator).create_namespaced_role(
            namespace, {"metadata": {"name": "more"}, "rules": []}
        ),
        lambda: client.AppsV1Api(as_operator).list_namespaced_deployment(namespace),
    ]
    for request in refused:
        with pytest.raises(ApiException) as denied:
            request()
        assert denied.value.status == 403
    helm("uninstall", "floe", "-n", namespace)
