"""Compaction of a streamed table: file count and average file size before and after, and
compaction throughput.

The table is written the way floe writes it: Avro records (about 100 bytes) on a Kafka topic
of 4 partitions, landed by the floe job with a small commit size, so each commit adds one small
file per partition, in a day partition nobody writes any more. Then the ``compaction`` action
(``rewrite_data_files`` with floe's settings) runs once, timed.

Usage: python bench/compaction_bench.py [--records N] [--per-commit M]
Needs the local stack (started if not running). Writes bench/results/compaction.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from decode_bench import SCHEMA  # noqa: E402 - the same ~100-byte order records
from workload import job_spec  # noqa: E402


def produce(
    env: dict[str, str],
    topic: str,
    records: int,
    keys: int | None = None,
    schema: dict | None = None,
    change: Callable[[int, int, dict], dict] | None = None,
) -> None:
    """``records`` orders on 4 partitions, timestamped two days ago (in a partition compaction
    may take); with ``keys``, updates of that many keys in turn, keyed by key (a key's updates
    share a partition), else each record a key of its own.  ``change(i, key, order)``: the
    value sent for the ``i``-th order instead of the order itself, in ``schema``."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])[topic].result()
    serialize = AvroSerializer(
        SchemaRegistryClient({"url": env["FLOE_SCHEMA_REGISTRY_URL"]}), json.dumps(schema or SCHEMA)
    )
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 10000,
            "compression.type": "lz4",
        }
    )
    two_days_ago = int(time.time() * 1000) - 2 * 86_400_000
    for i in range(records):
        key = i % keys if keys else i
        order = {
            "id": key,
            "customer": f"customer-{key % 977}",
            "item": f"update-{i}" if keys else f"item-{i % 131}",
            "quantity": i % 50,
            "price": (i % 10_000) / 100,
            "status": ("NEW", "PAID", "SHIPPED")[i % 3],
            "at": two_days_ago + i,
            "note": None if i % 4 else "gift wrap",
        }
        value = serialize(change(i, key, order) if change else order, context)
        while True:
            try:
                producer.produce(
                    topic, key=f"k{key}".encode(), value=value, timestamp=two_days_ago + i // 100
                )
                break
            except BufferError:
                producer.poll(0.5)
    assert producer.flush(120) == 0


def files_of(table) -> tuple[int, int]:
    tasks = list(table.scan().plan_files())
    return len(tasks), sum(task.file.file_size_in_bytes for task in tasks)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--per-commit", type=int, default=5_000)
    args = parser.parse_args()

    from hack import stack as local_stack

    state, _ = local_stack.ensure_up()
    env = local_stack.connection_env(state)
    os.environ.update(env)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYSPARK_SUBMIT_ARGS"] = (
        f"--master local[2] --driver-memory 2g "
        f"--conf spark.ui.enabled=false "
        f"--jars {env['FLOE_SPARK_JARS']} pyspark-shell"
    )

    from floe_sparkapp.catalog import load_catalog
    from floe_sparkapp.config import parse_config
    from floe_sparkapp.job import run
    from floe_sparkapp.maintenance import maintain
    from floe_sparkapp.session import build_session

    work = Path(tempfile.mkdtemp(prefix="floe-compaction-bench-"))
    topic = f"bench-compaction-{uuid.uuid4().hex[:8]}"
    produce(env, topic, args.records)
    config = parse_config(
        job_spec(
            env,
            work,
            topic,
            "compaction",
            commit={"interval": "1s", "maxRecordsPerCommit": args.per_commit},
            maintenance={"compaction": {"minInputFiles": 2}},
        )
    )
    spark = build_session(config)
    started = time.monotonic()
    run(config, spark, available_now=True, timeout=3600)
    ingest_seconds = time.monotonic() - started

    table = load_catalog(config.table.catalog).load_table(config.table.identifier)
    files_before, bytes_before = files_of(table)
    started = time.monotonic()
    result = maintain(config, "compaction", spark)
    compaction_seconds = time.monotonic() - started
    table = load_catalog(config.table.catalog).load_table(config.table.identifier)
    files_after, bytes_after = files_of(table)
    rows = table.scan().to_arrow().num_rows
    assert rows == args.records, (rows, args.records)

    import pyspark

    report = {
        "command": f"python bench/compaction_bench.py --records {args.records} "
        f"--per-commit {args.per_commit}",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "spark": pyspark.__version__,
        },
        "date": time.strftime("%Y-%m-%d"),
        "records": args.records,
        "records_per_commit": args.per_commit,
        "ingest_seconds": round(ingest_seconds, 1),
        "files_before": files_before,
        "avg_file_bytes_before": bytes_before // files_before,
        "files_after": files_after,
        "avg_file_bytes_after": bytes_after // files_after,
        "bytes_before": bytes_before,
        "bytes_after": bytes_after,
        "compaction_seconds": round(compaction_seconds, 2),
        "compaction_rows_per_second": round(rows / compaction_seconds),
        "compaction_input_mib_per_second": round(bytes_before / 2**20 / compaction_seconds, 2),
        "rewritten_data_files": result.get("rewritten_data_files_count"),
        "added_data_files": result.get("added_data_files_count"),
    }
    out = ROOT / "bench" / "results" / "compaction.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
