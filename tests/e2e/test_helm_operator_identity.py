"""The operator as the chart installs it: its ServiceAccount's token, its Deployment's settings.
The main flow passes under that identity (the RBAC is sufficient) and a request outside the
grant is refused (it is not more than needed)."""

from __future__ import annotations

import sys

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from ..integration.jobkit import AvroProducer, create_topic
from ..integration.test_job_roundtrip import produce_orders
from .conftest import _background, _stop, free_port
from .kube import ROOT, admin_client, install_crd, wait_until
from .test_helm_chart import CHART, CRDS, helm
from .test_operator import logs, topic_body

pytestmark = pytest.mark.e2e


def service_account_kubeconfig(stack, namespace: str, account: str, path) -> None:
    token = client.CoreV1Api(admin_client(stack)).create_namespaced_service_account_token(
        account, namespace, {"spec": {"audiences": [], "expirationSeconds": 3600}}).status.token
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "floe",
        "clusters": [{"name": "local", "cluster": {"server": stack.env["FLOE_KUBE_SERVER"],
                                                   "certificate-authority": stack.env["FLOE_KUBE_CA"]}}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "floe", "context": {"cluster": "local", "user": account,
                                                  "namespace": namespace}}]}))


def test_the_operator_under_the_charts_identity_lands_a_topic_and_nothing_more(
        stack, runner, namespace, tmp_path, unique_name):
    admin = admin_client(stack)
    for crd in CRDS:
        install_crd(admin, crd)
    # No replica: this test runs the Deployment's operator itself, on this machine, where the
    # test's catalog is (tests/e2e/test_node.py runs the chart's pod for real).
    helm("install", "floe", CHART, "-n", namespace, "--set", f"watch.namespaces={{{namespace}}}",
         "--set", "replicaCount=0")
    deployment = client.AppsV1Api(admin).read_namespaced_deployment("floe-floe-operator", namespace)
    pod = deployment.spec.template.spec
    kubeconfig = tmp_path / "operator-kubeconfig"
    service_account_kubeconfig(stack, namespace, pod.service_account_name, kubeconfig)

    # The Deployment's own settings, as the pod would get them; only the ports are moved, since
    # other tests' operators run on this machine too.
    env = {e.name: e.value for e in pod.containers[0].env if e.value is not None}
    env.update({"POD_ID": "floe-floe-operator-0", "KUBECONFIG": str(kubeconfig),
                "FLOE_LIVENESS": f"http://127.0.0.1:{free_port()}/healthz",
                "FLOE_METRICS_PORT": str(free_port())})
    assert env["FLOE_NAMESPACES"] == namespace and env["FLOE_PEERING"] == "floe"
    process, log = _background([sys.executable, "-m", "floe_operator"], tmp_path / "operator.log",
                               {k: v for k, v in env.items() if k != "HOME"})
    try:
        custom = client.CustomObjectsApi(admin)
        kafka_topic = f"sa-{unique_name}".replace("_", "-")
        create_topic(stack.bootstrap, kafka_topic, partitions=2)
        producer = AvroProducer(stack, kafka_topic)
        produce_orders(producer, 0, 50)
        custom.create_namespaced_custom_object("floe.dev", "v1alpha1", namespace,
                                               "kafkaicebergtopics",
                                               topic_body(stack, tmp_path, kafka_topic))
        expected = {str(p): o for p, o in producer.next_offsets().items()}

        def status() -> dict:
            return custom.get_namespaced_custom_object(
                "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders").get("status", {})

        def ready() -> bool:
            state = status()
            conditions = {c["type"]: c["status"] for c in state.get("conditions", [])}
            return (state.get("offsets", {}).get("committed") == expected
                    and conditions.get("Ready") == "True")

        assert wait_until(ready, timeout=240), f"{status()}\n{logs(tmp_path)}"
        events = client.CoreV1Api(admin).list_namespaced_event(
            namespace, field_selector="involvedObject.name=orders").items
        assert any(e.reason == "JobCreated" for e in events)  # Events are within the grant
        peering = custom.get_namespaced_custom_object("kopf.dev", "v1", namespace, "kopfpeerings",
                                                      "floe")
        assert "floe-floe-operator-0" in peering.get("status", {})
        operator_log = (tmp_path / "operator.log").read_text()
        assert "403" not in operator_log and "Forbidden" not in operator_log, operator_log[-3000:]
    finally:
        _stop(process, log)

    from kubernetes import config

    as_operator = config.new_client_from_config(config_file=str(kubeconfig))
    refused = [
        lambda: client.CoreV1Api(as_operator).list_namespaced_secret("kube-system"),
        lambda: client.CoreV1Api(as_operator).list_namespaced_secret(namespace),  # get only
        lambda: client.CoreV1Api(as_operator).delete_namespace(namespace),
        lambda: client.CustomObjectsApi(as_operator).list_namespaced_custom_object(
            "floe.dev", "v1alpha1", "default", "kafkaicebergtopics"),
        lambda: client.RbacAuthorizationV1Api(as_operator).create_namespaced_role(
            namespace, {"metadata": {"name": "more"}, "rules": []}),
        lambda: client.AppsV1Api(as_operator).list_namespaced_deployment(namespace),
    ]
    for request in refused:
        with pytest.raises(ApiException) as denied:
            request()
        assert denied.value.status == 403
    helm("uninstall", "floe", "-n", namespace)
    assert ROOT.exists()
