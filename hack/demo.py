"""`make demo`: from `kubectl apply` of a KafkaIcebergTopic to rows in an Iceberg table.

Starts the stack (if it is not up), registers an Avro schema and produces orders to a topic,
installs the CRDs, starts floe's operator and the local SparkApplication runner (the stand-in
for spark-operator), applies examples/orders.yaml pointed at the local stack, waits until
`kubectl wait --for=condition=Ready` returns and the lag is 0, shows `kubectl get kit`, and
reads the table back with PyIceberg.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from floe_sparkapp.catalog import load_catalog
from floe_sparkapp.config import parse_config
from hack import stack
from hack.stack import paths

ORDER_SCHEMA = {
    "type": "record", "name": "Order", "namespace": "floe.demo",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount_cents", "type": "long"},
        {"name": "status", "type": {"type": "enum", "name": "Status",
                                    "symbols": ["NEW", "PAID", "SHIPPED"]}},
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
    producer = Producer({"bootstrap.servers": env["FLOE_KAFKA_BOOTSTRAP"],
                         "enable.idempotence": True})
    rng = random.Random()
    for _ in range(RECORDS):
        order = {"order_id": rng.randrange(10**9), "customer": rng.choice(["ada", "grace", "linus"]),
                 "amount_cents": rng.randrange(100, 100_000),
                 "status": rng.choice(["NEW", "PAID", "SHIPPED"])}
        producer.produce(TOPIC, key=str(order["order_id"]).encode(),
                         value=serialize(order, context), headers=[("source", b"demo")])
    producer.flush(30)
    say(f"produced {RECORDS} Avro records to topic '{TOPIC}' "
        f"(schema registered under '{TOPIC}-value')")


def start_background(name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen:
    log = (paths.RUN / "demo" / f"{name}.log").open("w")
    return subprocess.Popen(command, env={**os.environ, **env}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def kubectl(*args: str, check: bool = True) -> str:
    result = subprocess.run(["kubectl", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def local_resource(env: dict[str, str], demo_dir) -> str:
    """examples/orders.yaml with the local stack's addresses and an embedded SQLite catalog."""
    import yaml

    resource = yaml.safe_load((paths.REPO / "examples" / "orders.yaml").read_text())
    resource["metadata"]["namespace"] = "demo"
    spec = resource["spec"]
    spec["kafka"]["bootstrapServers"] = env["FLOE_KAFKA_BOOTSTRAP"]
    spec["value"]["schemaRegistry"]["url"] = env["FLOE_SCHEMA_REGISTRY_URL"]
    spec["table"]["catalog"] = {"type": "sql", "name": "demo",
                                "uri": f"jdbc:sqlite:{demo_dir / 'catalog.db'}",
                                "warehouse": f"file://{demo_dir / 'warehouse'}"}
    spec["commit"]["interval"] = "5s"
    spec["spark"] = {"checkpointLocation": str(demo_dir / "checkpoint")}
    path = demo_dir / "orders.yaml"
    path.write_text(yaml.safe_dump(resource, sort_keys=False))
    return str(path)


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(2)
    return False


def main() -> int:
    say("starting the local stack (first run provisions it: several minutes)")
    started = time.monotonic()
    state, _ = stack.ensure_up()
    env = stack.connection_env(state)
    os.environ.update(env)
    say(f"stack ready in {time.monotonic() - started:.0f}s")

    demo_dir = paths.RUN / "demo"
    if demo_dir.exists():
        shutil.rmtree(demo_dir)
    demo_dir.mkdir(parents=True)
    produce(env)

    say("installing the CRDs, starting floe's operator and the local SparkApplication runner")
    kubectl("apply", "-f", str(paths.REPO / "crds"))
    kubectl("wait", "--for=condition=Established", "crd/kafkaicebergtopics.floe.dev",
            "crd/sparkapplications.sparkoperator.k8s.io")
    kubectl("delete", "namespace", "demo", "--ignore-not-found", "--wait=true")
    kubectl("create", "namespace", "demo")
    processes = [
        start_background("runner", [sys.executable, str(paths.HACK / "spark-operator" / "runner.py")],
                         {"FLOE_RUNNER_DIR": str(demo_dir / "runner")}),
        start_background("operator", [sys.executable, "-m", "floe_operator"],
                         {"FLOE_LIVENESS": "http://127.0.0.1:0/healthz", "FLOE_METRICS_PORT": "0"}),
    ]
    try:
        manifest = local_resource(env, demo_dir)
        say(f"kubectl apply -f {manifest}   (examples/orders.yaml, pointed at the local stack)")
        print(kubectl("apply", "-f", manifest), end="")
        say("kubectl wait --for=condition=Ready kit/orders")
        if not wait_for(lambda: "condition met" in kubectl(
                "wait", "--for=condition=Ready", "-n", "demo", "kit/orders", "--timeout=10s",
                check=False), timeout=300):
            raise SystemExit("the topic did not become Ready; see the logs in "
                             f"{demo_dir}/operator.log and {demo_dir}/runner")
        wait_for(lambda: kubectl("get", "kit", "orders", "-n", "demo", "-o",
                                 "jsonpath={.status.offsets.lag}") == "0", timeout=180)
        say("kubectl get kit -n demo")
        print(kubectl("get", "kit", "-n", "demo"), end="")
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            process.wait(timeout=60)

    config = parse_config(json.loads(kubectl(
        "get", "configmap", "floe-orders-job", "-n", "demo", "-o", "json"))["data"]["job.json"])
    table = load_catalog(config.table.catalog).load_table("analytics.orders")
    rows = table.scan().to_arrow().to_pylist()
    summary = table.current_snapshot().summary
    say(f"PyIceberg reads {len(rows)} rows from analytics.orders; snapshot "
        f"{table.current_snapshot().snapshot_id} says floe.offsets={summary.get('floe.offsets')}")
    say(f"the latest {RECORDS}:")
    rows.sort(key=lambda r: (r["kafka"]["timestamp"], r["kafka"]["partition"], r["kafka"]["offset"]))
    print(f"{'partition':>9} {'offset':>6}  {'order_id':>10} {'customer':<8} {'amount':>9} status")
    for row in rows[-RECORDS:]:
        value = row["value"]
        print(f"{row['kafka']['partition']:>9} {row['kafka']['offset']:>6}  {value['order_id']:>10} "
              f"{value['customer']:<8} {value['amount_cents'] / 100:>9.2f} {value['status']}")
    say("the stack keeps running: `make stack-down` stops it, `make stack-env` prints its settings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
