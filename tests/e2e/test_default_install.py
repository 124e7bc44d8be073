"""floe as a new user installs it: the chart with its default values (cluster-wide), the
resource in a namespace of its own, where nobody made the Spark drivers' account.

The operator makes the account and its RoleBinding to the chart's drivers' ClusterRole where the
resource is, owned by the resource, and the garbage collector removes both with it. The
images are the chart's defaults (the stack imports them under those names); the resource's
catalog is the stack's REST catalog server, so the operator needs no volume of the node."""

from __future__ import annotations

import subprocess
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ..integration.jobkit import AvroProducer, assert_exactly_once, create_topic
from ..integration.test_job_roundtrip import produce_orders
from .kube import ROOT, admin_client, wait_until
from .test_operator import logs, rest_catalog, topic_body, topic_catalog

pytestmark = pytest.mark.e2e

RELEASE = "floe-default"
RELEASE_NAMESPACE = "floe-default"


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["helm", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture
def default_install(stack):
    """The chart installed with no values at all; uninstalled afterwards."""
    helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait", "--ignore-not-found")
    installed = helm(
        "install",
        RELEASE,
        str(ROOT / "charts" / "floe-operator"),
        "--namespace",
        RELEASE_NAMESPACE,
        "--create-namespace",
        "--wait",
        "--timeout",
        "5m",
    )
    assert installed.returncode == 0, installed.stderr
    yield
    helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait")
    client.CoreV1Api(admin_client(stack)).delete_namespace(RELEASE_NAMESPACE)


def _read(read, name: str, namespace: str):
    try:
        return read(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


# The chart's defaults watch every namespace: no other test of the stack runs beside it.
@pytest.mark.node
@pytest.mark.alone("kubernetes")
def test_a_default_install_lands_a_topic_in_another_namespace_and_makes_its_drivers_account(
    stack, default_install, namespace, shared, tmp_path, unique_name
):
    admin = admin_client(stack)
    custom, core = client.CustomObjectsApi(admin), client.CoreV1Api(admin)
    rbac = client.RbacAuthorizationV1Api(admin)
    assert namespace != RELEASE_NAMESPACE
    assert _read(core.read_namespaced_service_account, "floe-spark", namespace) is None

    kafka_topic = f"default-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    producer = AvroProducer(stack, kafka_topic)
    produce_orders(producer, 0, 40)
    producer.flush()
    catalog_spec = rest_catalog(stack)
    identifier = f"analytics.default_{uuid.uuid4().hex[:8]}"
    body = topic_body(stack, shared, kafka_topic, catalog_spec)
    body["spec"]["table"]["identifier"] = identifier
    created = custom.create_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
    )
    uid = created["metadata"]["uid"]

    def status() -> dict:
        return custom.get_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
        ).get("status", {})

    def landed() -> bool:
        offsets = status().get("offsets", {})
        expected = {str(p): o for p, o in producer.next_offsets().items()}
        return offsets.get("committed") == expected and offsets.get("lag") == 0

    operator_log = lambda: (  # noqa: E731 - read only when a wait fails
        subprocess.run(
            [
                "kubectl",
                "logs",
                "-n",
                RELEASE_NAMESPACE,
                f"deployment/{RELEASE}-floe-operator",
                "--tail=80",
            ],
            capture_output=True,
            text=True,
        ).stdout
    )
    assert wait_until(landed, timeout=300, interval=1), (
        f"{status()}\n{operator_log()}\n{logs(tmp_path, namespace)}"
    )
    rows = topic_catalog(None, catalog_spec).load_table(identifier).scan().to_arrow().to_pylist()
    assert_exactly_once(rows, producer.sent)
    tested = helm("test", RELEASE, "--namespace", RELEASE_NAMESPACE)
    assert tested.returncode == 0 and "Succeeded" in tested.stdout, tested.stdout + tested.stderr

    account = core.read_namespaced_service_account("floe-spark", namespace)
    assert account.metadata.labels["app.kubernetes.io/managed-by"] == "floe"
    assert [(o.kind, o.uid) for o in account.metadata.owner_references] == [
        ("KafkaIcebergTopic", uid)
    ]
    binding = rbac.read_namespaced_role_binding("floe-spark", namespace)
    assert (binding.role_ref.kind, binding.role_ref.name) == (
        "ClusterRole",
        f"{RELEASE}-floe-operator-spark",
    )
    assert [(s.kind, s.name) for s in binding.subjects] == [("ServiceAccount", "floe-spark")]
    driver = core.list_namespaced_pod(namespace, label_selector="spark-role=driver").items
    assert [p.spec.service_account_name for p in driver] == ["floe-spark"]

    # Gone with the resource: the garbage collector removes what only it owned.
    custom.delete_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
    )
    assert wait_until(
        lambda: (
            _read(core.read_namespaced_service_account, "floe-spark", namespace) is None
            and _read(rbac.read_namespaced_role_binding, "floe-spark", namespace) is None
        ),
        timeout=300,
        interval=1,
    ), operator_log()
