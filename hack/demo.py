"""`make demo`: from `kubectl apply` of a KafkaIcebergTopic to rows in an Iceberg table.

Starts the stack and its node (if they are not up), registers an Avro schema and produces
orders to a topic, installs floe with its Helm chart (the operator runs as a pod from the image
built from images/operator), applies examples/orders.yaml pointed at the local stack, waits until
`kubectl wait --for=condition=Ready` returns and the lag is 0, shows `kubectl get kit` and the
pods (floe's operator, spark-operator, the job's driver and executor), and reads the table back
with PyIceberg.  floe stays installed; the next demo starts it over.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from floe_sparkapp.catalog import load_catalog
from floe_sparkapp.config import parse_config
from hack import stack
from hack.stack import paths
from hack.stack.cluster import JOB_NAMESPACES

ORDER_SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "floe.demo",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount_cents", "type": "long"},
        {
            "name": "status",
            "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]},
        },
    ],
}
TOPIC = "orders"
RECORDS = 20


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def produce(env: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": env["FLOE_KAFKA_BOOTSTRAP"]})
    if TOPIC not in admin.list_topics(timeout=10).topics:
        for future in admin.create_topics([NewTopic(TOPIC, 3, 1)]).values():
            future.result(timeout=30)
    registry = SchemaRegistryClient({"url": env["FLOE_SCHEMA_REGISTRY_URL"]})
    serialize = AvroSerializer(registry, json.dumps(ORDER_SCHEMA))
    context = SerializationContext(TOPIC, MessageField.VALUE)
    producer = Producer(
        {"bootstrap.servers": env["FLOE_KAFKA_BOOTSTRAP"], "enable.idempotence": True}
    )
    rng = random.Random()
    for _ in range(RECORDS):
        order = {
            "order_id": rng.randrange(10**9),
            "customer": rng.choice(["ada", "grace", "linus"]),
            "amount_cents": rng.randrange(100, 100_000),
            "status": rng.choice(["NEW", "PAID", "SHIPPED"]),
        }
        producer.produce(
            TOPIC,
            key=str(order["order_id"]).encode(),
            value=serialize(order, context),
            headers=[("source", b"demo")],
        )
    producer.flush(30)
    say(
        f"produced {RECORDS} Avro records to topic '{TOPIC}' "
        f"(schema registered under '{TOPIC}-value')"
    )


def kubectl(*args: str, check: bool = True) -> str:
    result = subprocess.run(["kubectl", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout


NAMESPACE = JOB_NAMESPACES[0]  # where the node's spark-operator runs applications
RELEASE, RELEASE_NAMESPACE = "floe", "floe-system"
SPARK_UID = 185  # the Spark image's user; the operator runs as it too, to share the directory


def node_values(shared: Path) -> dict:
    """Helm values of floe on the local node: serving the job namespace, with the node's shared
    directory mounted (a file catalog there is read by the operator and the Spark pods alike,
    so the operator runs as the Spark image's user)."""
    return {
        "watch": {"namespaces": [NAMESPACE]},
        "podSecurityContext": {
            "runAsUser": SPARK_UID,
            "runAsGroup": SPARK_UID,
            "fsGroup": SPARK_UID,
        },
        "extraVolumes": [
            {"name": "shared", "hostPath": {"path": str(shared), "type": "Directory"}}
        ],
        "extraVolumeMounts": [{"name": "shared", "mountPath": str(shared)}],
    }


def node_resource(env: dict[str, str], directory: Path, name: str, kafka_topic: str) -> dict:
    """examples/orders.yaml with the local stack's addresses, a SQLite catalog and a warehouse
    in ``directory`` (under the node's shared directory), mounted in the Spark pods."""
    resource = yaml.safe_load((paths.REPO / "examples" / "orders.yaml").read_text())
    resource["metadata"] = {"name": name, "namespace": NAMESPACE}
    spec = resource["spec"]
    spec["kafka"].update(bootstrapServers=env["FLOE_KAFKA_BOOTSTRAP"], topic=kafka_topic)
    spec["value"]["schemaRegistry"].update(
        url=env["FLOE_SCHEMA_REGISTRY_URL"], subject=f"{kafka_topic}-value"
    )
    spec["table"]["catalog"] = {
        "type": "sql",
        "name": "lake",
        "uri": f"jdbc:sqlite:{directory / name}.db",
        "warehouse": f"file://{directory / name}",
    }
    spec["deadLetter"]["topic"] = f"{kafka_topic}.dlq"
    spec["commit"]["interval"] = "5s"
    spec["spark"] = node_spark(directory)
    return resource


def node_spark(directory: Path, *, short_lived: bool = False) -> dict:
    """A resource's spark settings on the local node: ``directory`` (under the node's shared
    directory, where the catalog and warehouse are) mounted in the driver and executor pods.

    ``short_lived``: the driver's and executors' JVMs compile with the client compiler alone
    (``-XX:TieredStopAtLevel=1``), for jobs that live a minute, as most tests' do: on two cores
    a start to its first commit takes seconds less (bench/README.md#job-starts). A job that
    runs for days wants the JVM's default, as the demo's and the chart's own tests' do."""
    conf = {  # the node has two cores: driver and executor ask for a quarter core each
        "spark.kubernetes.driver.request.cores": "250m",
        "spark.kubernetes.executor.request.cores": "250m",
    }
    if short_lived:
        conf.update(
            {
                "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
                "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1",
            }
        )
    return {
        "volumes": [{"name": "shared", "hostPath": {"path": str(directory), "type": "Directory"}}],
        "volumeMounts": [{"name": "shared", "mountPath": str(directory)}],
        "conf": conf,
    }


def uninstall(kubectl_run) -> None:
    """Removes floe from the node: the topics first (their finalizers need the operator), then
    the release and its namespace."""
    kubectl_run("delete", "kit", "--all", "-n", NAMESPACE, "--timeout=120s")
    subprocess.run(
        [
            "helm",
            "uninstall",
            RELEASE,
            "--namespace",
            RELEASE_NAMESPACE,
            "--wait",
            "--ignore-not-found",
        ],
        capture_output=True,
    )
    kubectl_run(
        "delete",
        "namespace",
        RELEASE_NAMESPACE,
        "--ignore-not-found",
        "--wait=true",
        "--timeout=180s",
    )


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(2)
    return False


def main() -> int:
    say("starting the local stack and its node (first run provisions it: long)")
    started = time.monotonic()
    state, _ = stack.ensure_up()
    env = stack.connection_env(state)
    os.environ.update(env)
    say(f"stack ready in {time.monotonic() - started:.0f}s")

    uninstall(lambda *args: kubectl(*args, check=False))  # a previous demo's
    demo_dir = Path(env["FLOE_NODE_SHARED"]) / "demo"
    if demo_dir.exists():
        shutil.rmtree(demo_dir)
    demo_dir.mkdir()
    demo_dir.chmod(0o777)
    produce(env)

    values = paths.RUN / "demo-values.yaml"
    values.write_text(yaml.safe_dump(node_values(Path(env["FLOE_NODE_SHARED"]))))
    say(
        f"helm install {RELEASE} charts/floe-operator --namespace {RELEASE_NAMESPACE} "
        "--create-namespace -f demo-values.yaml --wait"
    )
    helm = subprocess.run(
        [
            "helm",
            "install",
            RELEASE,
            str(paths.REPO / "charts" / "floe-operator"),
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
    if helm.returncode != 0:
        raise SystemExit(f"helm install failed: {helm.stderr}")

    manifest = demo_dir / "orders.yaml"
    manifest.write_text(
        yaml.safe_dump(node_resource(env, demo_dir, "orders", TOPIC), sort_keys=False)
    )
    say(f"kubectl apply -f {manifest}   (examples/orders.yaml, pointed at the local stack)")
    print(kubectl("apply", "-f", str(manifest)), end="")
    say(f"kubectl wait --for=condition=Ready -n {NAMESPACE} kit/orders")
    if not wait_for(
        lambda: (
            "condition met"
            in kubectl(
                "wait",
                "--for=condition=Ready",
                "-n",
                NAMESPACE,
                "kit/orders",
                "--timeout=10s",
                check=False,
            )
        ),
        timeout=600,
    ):
        raise SystemExit(
            "the topic did not become Ready: kubectl describe kit orders -n "
            f"{NAMESPACE}; kubectl logs -n {NAMESPACE} floe-orders-driver"
        )
    wait_for(
        lambda: (
            kubectl("get", "kit", "orders", "-n", NAMESPACE, "-o", "jsonpath={.status.offsets.lag}")
            == "0"
        ),
        timeout=300,
    )
    say(f"kubectl get kit -n {NAMESPACE}")
    print(kubectl("get", "kit", "-n", NAMESPACE), end="")
    say("kubectl get pods -A   (floe's operator, spark-operator, the job's driver and executor)")
    print(kubectl("get", "pods", "-A"), end="")

    config = parse_config(
        json.loads(kubectl("get", "configmap", "floe-orders-job", "-n", NAMESPACE, "-o", "json"))[
            "data"
        ]["job.json"]
    )
    table = load_catalog(config.catalog()).load_table("analytics.orders")
    rows = table.scan().to_arrow().to_pylist()
    summary = table.current_snapshot().summary
    say(
        f"PyIceberg reads {len(rows)} rows from analytics.orders; snapshot "
        f"{table.current_snapshot().snapshot_id} says floe.offsets={summary.get('floe.offsets')}"
    )
    say(f"the latest {RECORDS}:")
    rows.sort(
        key=lambda r: (r["kafka"]["timestamp"], r["kafka"]["partition"], r["kafka"]["offset"])
    )
    print(f"{'partition':>9} {'offset':>6}  {'order_id':>10} {'customer':<8} {'amount':>9} status")
    for row in rows[-RECORDS:]:
        value = row["value"]
        print(
            f"{row['kafka']['partition']:>9} {row['kafka']['offset']:>6}  {value['order_id']:>10} "
            f"{value['customer']:<8} {value['amount_cents'] / 100:>9.2f} {value['status']}"
        )
    say(
        "floe keeps running on the node: `make stack-env` prints the settings (KUBECONFIG among "
        "them), `make stack-down` stops everything"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
