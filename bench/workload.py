"""The benchmarks' data: Avro order records of about 100 bytes or about 1 KB, Confluent-framed
with the schema id the registry gave, produced to topics of 8 partitions.

Values come from a pool of distinct pre-encoded records, cycled, so producing 5 million of them
costs the producer and not the encoder; every record still has its own partition and offset.
"""

from __future__ import annotations

import io
import json
import random
import threading
import time
from pathlib import Path
from typing import Any

PARTITIONS = 8
POOL = 20_000

FIELDS = [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "item", "type": "string"},
    {"name": "quantity", "type": "int"},
    {"name": "price", "type": "double"},
    {
        "name": "status",
        "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]},
    },
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "note", "type": ["null", "string"], "default": None},
]
SMALL = {"type": "record", "name": "Order", "namespace": "bench", "fields": FIELDS}
LARGE = {
    "type": "record",
    "name": "Order",
    "namespace": "bench",
    "fields": [
        *FIELDS,
        {"name": "description", "type": "string"},
        {"name": "attributes", "type": {"type": "map", "values": "string"}},
    ],
}
WORDS = [
    "alpine",
    "cobalt",
    "ember",
    "fjord",
    "granite",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lagoon",
    "meadow",
    "nectar",
    "orchid",
    "prairie",
    "quartz",
    "river",
    "saffron",
    "tundra",
    "umber",
    "violet",
    "willow",
    "yarrow",
    "zephyr",
]


def job_spec(
    env: dict[str, str], work: Path, topic: str, name: str, *, mode: str = "append", **rest: Any
) -> dict[str, Any]:
    """A job's configuration (before ``parse_config``) for Avro records of ``topic``, landing
    in ``bench.orders`` of a SQLite catalog ``name`` under ``work``; ``rest`` adds or replaces
    top-level keys (``commit``, ``maintenance``)."""
    return {
        "writer": f"bench/{name}",
        "kafka": {"bootstrapServers": env["FLOE_KAFKA_BOOTSTRAP"], "topic": topic},
        "value": {
            "format": "avro",
            "schemaRegistry": {"url": env["FLOE_SCHEMA_REGISTRY_URL"], "subject": f"{topic}-value"},
        },
        "table": {
            "catalog": {
                "name": f"bench_{name}",
                "uri": f"jdbc:sqlite:{work / f'{name}.db'}",
                "warehouse": f"file://{work / f'warehouse-{name}'}",
            },
            "identifier": "bench.orders",
            "mode": mode,
        },
        "checkpointLocation": str(work / f"checkpoint-{name}"),
        **rest,
    }


def schema_for(size: int) -> dict[str, Any]:
    return SMALL if size <= 200 else LARGE


def order(i: int, size: int, rng: random.Random) -> dict[str, Any]:
    value: dict[str, Any] = {
        "id": i,
        "customer": f"customer-{rng.randrange(100_000):06d}@mail.example.com",
        "item": f"sku-{rng.randrange(5_000):05d}-{rng.choice(WORDS)}-{rng.choice(WORDS)}",
        "quantity": rng.randrange(1, 50),
        "price": round(rng.uniform(1, 500), 2),
        "status": rng.choice(("NEW", "PAID", "SHIPPED")),
        "at": 1_795_000_000_000 + i,
        "note": None if i % 4 else "gift wrap please, and a card saying happy birthday",
    }
    if size > 200:
        text = " ".join(rng.choice(WORDS) for _ in range(110))
        value["description"] = text[: size - 180]
        value["attributes"] = {f"attr{k}": rng.choice(WORDS) for k in range(8)}
    return value


def arrow_schema(size: int):
    """The decoded value as Arrow columns (what the Python baseline writes to Parquet)."""
    import pyarrow as pa

    fields = [
        ("id", pa.int64()),
        ("customer", pa.string()),
        ("item", pa.string()),
        ("quantity", pa.int32()),
        ("price", pa.float64()),
        ("status", pa.string()),
        ("at", pa.timestamp("ms", tz="UTC")),
        ("note", pa.string()),
    ]
    if size > 200:
        fields += [("description", pa.string()), ("attributes", pa.map_(pa.string(), pa.string()))]
    return pa.schema(fields)


def register(registry_url: str, subject: str, schema: dict[str, Any]) -> int:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    return client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))


def value_pool(schema_id: int, size: int, count: int = POOL) -> list[bytes]:
    """``count`` distinct Confluent-framed Avro values of about ``size`` bytes."""
    import fastavro

    parsed = fastavro.parse_schema(schema_for(size))
    header = b"\x00" + schema_id.to_bytes(4, "big")
    rng = random.Random(size)
    values = []
    for i in range(count):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, order(i, size, rng))
        values.append(header + buffer.getvalue())
    return values


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=60)


def _producer(bootstrap: str):
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 500_000,
            "compression.type": "lz4",
            "enable.idempotence": True,
        }
    )


def produce(
    bootstrap: str, topic: str, values: list[bytes], records: int, partitions: int = PARTITIONS
) -> float:
    """Produces ``records`` values round-robin over the partitions; returns the seconds taken."""
    producer = _producer(bootstrap)
    started = time.monotonic()
    pool = len(values)
    for i in range(records):
        while True:
            try:
                producer.produce(
                    topic, value=values[i % pool], key=b"k%d" % (i % 1000), partition=i % partitions
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0, "the producer could not deliver every record"
    return time.monotonic() - started


class SteadyProducer(threading.Thread):
    """Produces at a fixed rate (records per second) until stopped; each record's Kafka
    timestamp is the time it was produced, which the freshness benchmark measures from."""

    def __init__(self, bootstrap: str, topic: str, values: list[bytes], rate: int):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.values, self.rate = bootstrap, topic, values, rate
        self.sent = 0
        self._halt = threading.Event()

    def run(self) -> None:
        producer = _producer(self.bootstrap)
        started = time.monotonic()
        while not self._halt.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                producer.produce(
                    self.topic,
                    value=self.values[self.sent % len(self.values)],
                    key=b"k%d" % (self.sent % 1000),
                    partition=self.sent % PARTITIONS,
                )
                self.sent += 1
            producer.poll(0)
            time.sleep(0.01)
        assert producer.flush(60) == 0

    def stop(self) -> int:
        self._halt.set()
        self.join()
        return self.sent
