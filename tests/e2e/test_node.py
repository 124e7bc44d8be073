"""floe as users run it, on the stack's real node: the operator installed with Helm and running
as a pod from the image built from images/operator, kubeflow spark-operator running each job as
a driver pod and executor pods from the image built from images/spark.

The catalog is SQLite and the warehouse a directory, both on the node's shared host directory,
which every pod mounts at the same path (the resource's spark.volumes, the chart's
extraVolumes): a single-node cluster's stand-in for a network catalog and an object store, as
kind's extraMounts are.  The resources are examples/orders.yaml, adapted as `make demo` does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from hack.demo import (
    NAMESPACE,
    RELEASE,
    RELEASE_NAMESPACE,
    node_resource,
    node_spark,
    node_values,
    uninstall,
)

from ..integration.jobkit import AvroProducer, assert_exactly_once, create_topic
from ..integration.test_job_roundtrip import produce_orders
from .kube import FAILOVER_BACKOFF_SECONDS, REFRESH_SECONDS, ROOT, admin_client, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.node]


def kubectl(*args: str, check: bool = True) -> str:
    done = subprocess.run(["kubectl", *args], capture_output=True, text=True, timeout=300)
    assert not check or done.returncode == 0, f"kubectl {' '.join(args)}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def shared(stack) -> Iterator[Path]:
    """A directory of the node's shared one, for this module's catalogs and warehouses."""
    path = Path(stack.env["FLOE_NODE_SHARED"]) / f"test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    path.chmod(0o777)
    yield path
    shutil.rmtree(path)


@pytest.fixture(scope="module")
def floe(stack, tmp_path_factory):
    """floe installed with its Helm chart, serving the node's job namespace (a previous demo's
    installation is removed first)."""
    uninstall(lambda *args: kubectl(*args, check=False))
    values = tmp_path_factory.mktemp("helm") / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                **node_values(Path(stack.env["FLOE_NODE_SHARED"])),
                "extraEnv": [
                    {"name": "FLOE_REFRESH_SECONDS", "value": str(REFRESH_SECONDS)},
                    {
                        "name": "FLOE_FAILOVER_BACKOFF_SECONDS",
                        "value": str(FAILOVER_BACKOFF_SECONDS),
                    },
                ],
            }
        )
    )
    installed = subprocess.run(
        [
            "helm",
            "install",
            RELEASE,
            str(ROOT / "charts" / "floe-operator"),
            "--namespace",
            RELEASE_NAMESPACE,
            "--create-namespace",
            "-f",
            str(values),
            "--wait",
            "--timeout",
            "5m",
        ],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr
    apps = client.AppsV1Api(admin_client(stack))
    deployment = apps.read_namespaced_deployment(f"{RELEASE}-floe-operator", RELEASE_NAMESPACE)
    assert deployment.status.ready_replicas == 1  # its readiness probe passes
    yield
    uninstall(kubectl)


def apply(stack, shared: Path, name: str, kafka_topic: str, tmp_path: Path, **spec_changes) -> None:
    body = node_resource(stack.env, shared, name, kafka_topic)
    body["spec"].update(spec_changes)
    manifest = tmp_path / f"{name}.yaml"
    manifest.write_text(yaml.safe_dump(body))
    kubectl("apply", "-f", str(manifest))


class Topic:
    """One KafkaIcebergTopic on the node, seen as a user sees it."""

    def __init__(self, stack, shared: Path, name: str):
        self.name, self.shared = name, shared
        api = admin_client(stack)
        self.custom, self.core = client.CustomObjectsApi(api), client.CoreV1Api(api)

    def status(self) -> dict:
        return self.custom.get_namespaced_custom_object(
            "floe.dev", "v1alpha1", NAMESPACE, "kafkaicebergtopics", self.name
        ).get("status", {})

    def landed(self, producer: AvroProducer) -> bool:
        offsets = self.status().get("offsets", {})
        expected = {str(p): o for p, o in producer.next_offsets().items()}
        return offsets.get("committed") == expected and offsets.get("lag") == 0

    def rows(self) -> list[dict]:
        from floe_sparkapp.catalog import load_catalog
        from floe_sparkapp.contract import CatalogSpec

        catalog = load_catalog(
            CatalogSpec(
                name="lake",
                uri=f"jdbc:sqlite:{self.shared / self.name}.db",
                warehouse=f"file://{self.shared / self.name}",
            )
        )
        return catalog.load_table("analytics.orders").scan().to_arrow().to_pylist()

    def pods(self, role: str) -> list[client.V1Pod]:
        return [
            pod
            for pod in self.core.list_namespaced_pod(
                NAMESPACE,
                label_selector=f"spark-role={role},sparkoperator.k8s.io/app-name=floe-{self.name}",
            ).items
            if pod.status.phase == "Running"
        ]

    def driver_uid(self) -> str | None:
        """The running driver pod's UID: a new one is a new driver."""
        drivers = self.pods("driver")
        return drivers[0].metadata.uid if drivers else None

    def diagnostics(self) -> str:
        return "\n".join(
            [
                str(self.status()),
                kubectl(
                    "get", "pods,sparkapplications", "-n", NAMESPACE, "-o", "wide", check=False
                ),
                kubectl(
                    "logs", "-n", NAMESPACE, f"floe-{self.name}-driver", "--tail=60", check=False
                ),
                kubectl(
                    "logs",
                    "-n",
                    RELEASE_NAMESPACE,
                    f"deploy/{RELEASE}-floe-operator",
                    "--tail=40",
                    check=False,
                ),
            ]
        )


def landed_topic(
    stack,
    shared: Path,
    tmp_path: Path,
    name: str,
    kafka_topic: str,
    records: int,
    partitions: int = 2,
    **spec_changes,
) -> tuple[Topic, AvroProducer]:
    """A Kafka topic of ``records`` orders declared as a KafkaIcebergTopic, once it landed."""
    create_topic(stack.bootstrap, kafka_topic, partitions=partitions)
    producer = AvroProducer(stack, kafka_topic)
    produce_orders(producer, 0, records)
    apply(stack, shared, name, kafka_topic, tmp_path, **spec_changes)
    topic = Topic(stack, shared, name)
    assert wait_until(lambda: topic.landed(producer), timeout=600, interval=1), topic.diagnostics()
    return topic, producer


def tasks_by_executor(driver: client.V1Pod) -> dict[str, int]:
    """The tasks each executor of the job has run, from its driver's Spark REST API."""
    base = f"http://{driver.status.pod_ip}:4040/api/v1/applications"
    with urllib.request.urlopen(base, timeout=10) as response:
        app = json.load(response)[0]["id"]
    with urllib.request.urlopen(f"{base}/{app}/allexecutors", timeout=10) as response:
        return {e["id"]: e["totalTasks"] for e in json.load(response) if e["id"] != "driver"}


def test_a_topic_lands_exactly_once_in_driver_and_executor_pods(
    stack, floe, shared, tmp_path, unique_name
):
    """Scaled out to two executors, the job lands a topic of four partitions exactly once with
    tasks on both."""
    kafka_topic = f"node-{unique_name}".replace("_", "-")
    spark = node_spark(shared, short_lived=True)
    spark["executor"] = {"instances": 2}
    topic, producer = landed_topic(
        stack, shared, tmp_path, "orders", kafka_topic, 400, partitions=4, spark=spark
    )
    produce_orders(producer, 400, 400)  # a batch once both executors are surely there
    assert wait_until(lambda: topic.landed(producer), timeout=300, interval=1), topic.diagnostics()
    kubectl("wait", "--for=condition=Ready", "-n", NAMESPACE, "kit/orders", "--timeout=120s")
    assert_exactly_once(topic.rows(), producer.sent)
    status = topic.status()
    assert status["phase"] == "Running"
    assert status["sparkApplication"]["state"] == "RUNNING"
    assert status["offsets"]["lag"] == 0
    assert status["landedThrough"] <= time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    assert len(topic.pods("driver")) == 1, topic.diagnostics()
    assert len(topic.pods("executor")) == 2, topic.diagnostics()
    tasks = tasks_by_executor(topic.pods("driver")[0])
    assert len(tasks) == 2 and all(tasks.values()), tasks
    # The driver's pod is owned by its SparkApplication, which is owned by the topic.
    driver = topic.pods("driver")[0]
    assert [o.kind for o in driver.metadata.owner_references] == ["SparkApplication"]


def produce_while(producer: AvroProducer, start_at: int, count: int) -> threading.Thread:
    """Produces orders in the background, a few a second, while a fault happens."""

    def run() -> None:
        for i in range(start_at, start_at + count, 10):
            produce_orders(producer, i, 10)
            time.sleep(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.faults
def test_driver_and_operator_pods_deleted_and_a_spec_change_lose_and_duplicate_nothing(
    stack, floe, shared, tmp_path, unique_name
):
    kafka_topic = f"node-faults-{unique_name}".replace("_", "-")[:200]
    topic, producer = landed_topic(stack, shared, tmp_path, "faults", kafka_topic, 100)

    # The driver pod deleted while records arrive: spark-operator starts another.
    first_driver = topic.driver_uid()
    producing = produce_while(producer, 100, 300)
    assert wait_until(lambda: len(producer.sent) > 150, timeout=30)
    kubectl("delete", "pod", "-n", NAMESPACE, "floe-faults-driver", "--wait=false")
    producing.join()
    assert wait_until(
        lambda: topic.driver_uid() not in (None, first_driver), timeout=300, interval=1
    ), topic.diagnostics()
    assert wait_until(lambda: topic.landed(producer), timeout=600, interval=1), topic.diagnostics()
    assert_exactly_once(topic.rows(), producer.sent)

    # The operator's pod deleted: its Deployment starts another, which converges.
    apps = client.AppsV1Api(admin_client(stack))
    selector = f"app.kubernetes.io/instance={RELEASE}"
    old = {
        p.metadata.uid
        for p in topic.core.list_namespaced_pod(RELEASE_NAMESPACE, label_selector=selector).items
    }
    kubectl("delete", "pod", "-n", RELEASE_NAMESPACE, "-l", selector, "--wait=false")
    produce_orders(producer, 400, 50)

    def replaced() -> bool:
        ready = apps.read_namespaced_deployment(
            f"{RELEASE}-floe-operator", RELEASE_NAMESPACE
        ).status.ready_replicas
        pods = {
            p.metadata.uid
            for p in topic.core.list_namespaced_pod(
                RELEASE_NAMESPACE, label_selector=selector
            ).items
        }
        return ready == 1 and not pods & old

    assert wait_until(replaced, timeout=180, interval=1), topic.diagnostics()
    assert wait_until(lambda: topic.landed(producer), timeout=300, interval=1), topic.diagnostics()
    assert_exactly_once(topic.rows(), producer.sent)

    # A spec change (the commit interval) rolls the job: a new driver, nothing lost or doubled.
    rolled_from = topic.driver_uid()
    apply(stack, shared, "faults", kafka_topic, tmp_path, commit={"interval": "3s"})
    producing = produce_while(producer, 450, 200)
    producing.join()
    assert wait_until(
        lambda: topic.status().get("observedGeneration") == 2, timeout=120, interval=1
    ), topic.diagnostics()
    assert wait_until(
        lambda: topic.driver_uid() not in (None, rolled_from), timeout=300, interval=1
    ), topic.diagnostics()
    assert wait_until(lambda: topic.landed(producer), timeout=600, interval=1), topic.diagnostics()
    assert_exactly_once(topic.rows(), producer.sent)
