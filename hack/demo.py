"""`make demo`: an Avro topic landed in an Iceberg table on the local stack.

Starts the stack (if it is not up), registers an Avro schema and produces orders to a topic,
runs a Spark Structured Streaming query that decodes the Confluent-framed Avro values in the
JVM and appends them with their Kafka lineage to an Iceberg table in the SQL catalog, then
reads the table back with PyIceberg and prints it.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from floe_sparkapp.catalog import load_catalog, register_in
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


def land_with_spark(env: dict[str, str], catalog) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    spark = (SparkSession.builder.master("local[2]").appName("floe-demo")
             .config("spark.jars", env["FLOE_SPARK_JARS"])
             .config("spark.driver.memory", "1g")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.extensions",
                     "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register_in(spark, catalog)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS demo.analytics")
    spark.sql("""
        CREATE TABLE IF NOT EXISTS demo.analytics.orders (
          kafka STRUCT<topic: STRING, partition: INT, offset: BIGINT, timestamp: TIMESTAMP>,
          key BINARY,
          value STRUCT<order_id: BIGINT, customer: STRING, amount_cents: BIGINT, status: STRING>)
        USING iceberg PARTITIONED BY (days(kafka.timestamp))""")

    schema = json.dumps(ORDER_SCHEMA)
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", env["FLOE_KAFKA_BOOTSTRAP"])
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .select(
            F.struct(F.col("topic"), F.col("partition"), F.col("offset"),
                     F.col("timestamp")).alias("kafka"),
            F.col("key"),
            # Confluent framing: magic byte and 4-byte schema id, then the Avro body.
            from_avro(F.expr("substring(value, 6)"), schema).alias("value"),
        )
    )
    query = (stream.writeStream.format("iceberg").outputMode("append")
             .trigger(availableNow=True)
             .option("checkpointLocation", str(paths.RUN / "demo" / "checkpoint"))
             .toTable("demo.analytics.orders"))
    query.awaitTermination()
    spark.stop()
    say("Spark landed the topic in Iceberg table demo.analytics.orders")


def main() -> int:
    say("starting the local stack (first run provisions it: several minutes)")
    started = time.monotonic()
    state, _ = stack.ensure_up()
    env = stack.connection_env(state)
    os.environ.update(env)
    say(f"stack ready in {time.monotonic() - started:.0f}s")

    from floe_sparkapp.config import CatalogConfig

    demo_dir = paths.RUN / "demo"
    demo_dir.mkdir(parents=True, exist_ok=True)
    catalog = CatalogConfig(name="demo", uri=f"jdbc:sqlite:{demo_dir / 'catalog.db'}",
                            warehouse=f"file://{demo_dir / 'warehouse'}")
    produce(env)
    land_with_spark(env, catalog)

    table = load_catalog(catalog).load_table("analytics.orders")
    rows = table.scan().to_arrow().to_pylist()
    say(f"PyIceberg reads {len(rows)} rows from analytics.orders "
        f"(snapshot {table.current_snapshot().snapshot_id}); the latest {RECORDS}:")
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
