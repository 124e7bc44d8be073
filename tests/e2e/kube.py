"""Helpers for tests against the local kube-apiserver."""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from hack.stack.cluster import spark_operator_chart

from ..waits import waits

ROOT = Path(__file__).resolve().parents[2]
FLOE_CRD = ROOT / "crds" / "floe.dev_kafkaicebergtopics.yaml"
OPERATION_CRD = ROOT / "crds" / "floe.dev_kafkaicebergoperations.yaml"
# The operators under test wait this long before a first failover (FLOE_FAILOVER_BACKOFF_SECONDS;
# 10 by default), doubling: the backoff is asserted, in less of the suite's time.
FAILOVER_BACKOFF_SECONDS = 3
# The operators under test refresh a resource's status this often (FLOE_REFRESH_SECONDS; 10 by
# default): a test waiting for the status to show a commit waits a fifth as long.
REFRESH_SECONDS = 2
# How long a deletion waits for spark-operator to take up an application
# (FLOE_SUBMIT_WAIT_SECONDS; 30 by default) where none serves the namespace, as for the tests
# not marked `node`: nothing will ever take it up there. Node tests keep the default.
UNSERVED_SUBMIT_WAIT_SECONDS = 2
# The tests' operators place every job's pods as an operator admin would, once for the cluster
# (FLOE_SPARK_POD, the chart's spark.pod): a label and a toleration each pod carries.
SPARK_POD_DEFAULTS = {
    "podLabels": {"floe.dev/test-suite": "e2e"},
    "tolerations": [{"key": "floe.dev/dedicated", "operator": "Exists", "effect": "NoSchedule"}],
}
# kubeflow spark-operator's own CRD, from the module the stack builds it from.
SPARK_CRD = Path(spark_operator_chart()) / "crds" / "sparkoperator.k8s.io_sparkapplications.yaml"


def admin_client(stack) -> client.ApiClient:
    return config.new_client_from_config(config_file=stack.env["KUBECONFIG"])


def install_crd(api_client: client.ApiClient, path: Path) -> None:
    """Creates or replaces a CRD and waits until it is served."""
    extensions = client.ApiextensionsV1Api(api_client)
    crd = yaml.safe_load(path.read_text())
    name = crd["metadata"]["name"]
    try:
        extensions.create_custom_resource_definition(crd)
    except ApiException as error:
        assert error.status == 409, error
        # The suite's groups install it side by side: replaced only where it differs, and
        # again when another test replaced it meanwhile (409).
        for _ in range(10):
            served = api_client.sanitize_for_serialization(
                extensions.read_custom_resource_definition(name)
            )
            if _same_crd(served["spec"], crd["spec"]):
                break
            crd["metadata"]["resourceVersion"] = served["metadata"]["resourceVersion"]
            try:
                extensions.replace_custom_resource_definition(name, crd)
                break
            except ApiException as conflict:
                assert conflict.status == 409, conflict
    deadline = time.monotonic() + 30
    while True:
        status = extensions.read_custom_resource_definition(name).status
        if any(c.type == "Established" and c.status == "True" for c in status.conditions or []):
            return
        assert time.monotonic() < deadline, f"CRD {name} not established"
        time.sleep(0.3)


def _same_crd(served: dict, wanted: dict) -> bool:
    """Whether the served CRD's spec is the file's (the API server adds defaults: compared on
    the file's fields alone)."""
    if isinstance(wanted, dict):
        return isinstance(served, dict) and all(
            _same_crd(served.get(key), value) for key, value in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(served, list)
            and len(served) == len(wanted)
            and all(_same_crd(a, b) for a, b in zip(served, wanted))
        )
    return served == wanted


def delete_namespace_without_operator(api_client: client.ApiClient, namespace: str) -> None:
    """Deletes a namespace once no operator watches it: the finalizers of the topics left in it
    are dropped first, or the namespace would stay Terminating in the stack for good."""
    drop_topic_finalizers(api_client, namespace)
    client.CoreV1Api(api_client).delete_namespace(namespace)


def drop_topic_finalizers(api_client: client.ApiClient, namespace: str) -> None:
    """Drops the finalizers of the topics and operations in ``namespace`` (an operator that ran
    in it, as the chart installs one, may have put them back while it was being deleted)."""
    custom = client.CustomObjectsApi(api_client)
    for plural in ("kafkaicebergtopics", "kafkaicebergoperations"):
        try:
            found = custom.list_namespaced_custom_object("floe.dev", "v1alpha1", namespace, plural)[
                "items"
            ]
        except ApiException as error:
            if error.status != 404:  # 404: the CRD was never installed
                raise
            found = []
        for item in found:
            if not item["metadata"].get("finalizers"):
                continue
            try:
                custom.patch_namespaced_custom_object(
                    "floe.dev",
                    "v1alpha1",
                    namespace,
                    plural,
                    item["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                )
            except ApiException as error:
                if error.status != 404:  # 404: gone meanwhile
                    raise


def wait_until(predicate, timeout: float = 60, interval: float = 0.5) -> bool:
    """Polls ``predicate`` every ``interval`` seconds until it is true (True) or ``timeout``
    has passed (False); the wait is recorded under the caller's line (tests/waits.py)."""
    started = time.monotonic()
    deadline = started + timeout
    came_true = False
    while time.monotonic() < deadline:
        if predicate():
            came_true = True
            break
        time.sleep(interval)
    waits.record(1, time.monotonic() - started, came_true)
    return came_true


def running_job_pods(api_client: client.ApiClient, namespace: str, app: str) -> list[str]:
    """The pods of a SparkApplication (driver and executors) that have not ended."""
    found = (
        client.CoreV1Api(api_client)
        .list_namespaced_pod(namespace, label_selector=f"sparkoperator.k8s.io/app-name={app}")
        .items
    )
    return [p.metadata.name for p in found if p.status.phase not in ("Succeeded", "Failed")]
