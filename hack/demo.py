"""`make demo`: an Avro topic landed in an Iceberg table on the local stack.

Starts the stack (if it is not up), registers an Avro schema and produces orders to a topic,
runs floe's Spark job (``python -m floe_sparkapp run``) on it, which creates the table from the
registry schema and commits the records exactly once with their Kafka lineage, then reads the
table back with PyIceberg and prints it.  Run it again: only the new records are added.
"""

from __future__ import annotations

import json
import os
import random
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


def land_with_the_job(env: dict[str, str], config_file) -> None:
    """Runs floe's Spark job as its own process, as a SparkApplication's driver would."""
    spark_args = (f"--master local[2] --driver-memory 1g --conf spark.ui.enabled=false "
                  f"--conf spark.ui.showConsoleProgress=false "
                  f"--jars {env['FLOE_SPARK_JARS']} pyspark-shell")
    command = [sys.executable, "-m", "floe_sparkapp", "run", "--config", str(config_file),
               "--available-now"]
    say("running: python -m floe_sparkapp run --config job.json --available-now")
    result = subprocess.run(command, env={**os.environ, "PYSPARK_SUBMIT_ARGS": spark_args},
                            capture_output=True, text=True)
    for line in (result.stdout + result.stderr).splitlines():
        if '"event": "floe.batch"' in line or "floe.job" in line and "created table" in line:
            print(f"    {line.split(' ', 3)[-1]}")
    if result.returncode != 0:
        print(result.stdout[-4000:], result.stderr[-4000:], sep="\n")
        raise SystemExit(f"the job failed with exit code {result.returncode}")


def main() -> int:
    say("starting the local stack (first run provisions it: several minutes)")
    started = time.monotonic()
    state, _ = stack.ensure_up()
    env = stack.connection_env(state)
    os.environ.update(env)
    say(f"stack ready in {time.monotonic() - started:.0f}s")

    demo_dir = paths.RUN / "demo"
    demo_dir.mkdir(parents=True, exist_ok=True)
    config = parse_config({
        "writer": "demo/orders",
        "kafka": {"bootstrapServers": env["FLOE_KAFKA_BOOTSTRAP"], "topic": TOPIC},
        "value": {"format": "avro", "schemaRegistry": {"url": env["FLOE_SCHEMA_REGISTRY_URL"],
                                                       "subject": f"{TOPIC}-value"}},
        "table": {"catalog": {"type": "sql", "name": "demo",
                              "uri": f"jdbc:sqlite:{demo_dir / 'catalog.db'}",
                              "warehouse": f"file://{demo_dir / 'warehouse'}"},
                  "identifier": "analytics.orders", "partitioning": "day"},
        "checkpointLocation": str(demo_dir / "checkpoint"),
    })
    config_file = demo_dir / "job.json"
    config_file.write_text(config.to_json())
    produce(env)
    land_with_the_job(env, config_file)

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
