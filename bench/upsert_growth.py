"""Upsert against append as the table grows: one batch of changes landed by the floe job into a
table that already holds 1M, 10M or 50M rows (issue 36's fourth item).

Each table is made by the job's own ``ready_table`` (an ``orders`` table of ~100-byte Avro
values, ``keyColumns: [id]`` for upsert), then filled by Spark with ``--sizes`` rows of history
shaped as floe lands them: the orders in the order they arrived (id = arrival), over the last
three days (day partitions), each data file holding the ids of a stretch of time (what a batch
or a compaction writes). Then one batch of ``--batch`` records is landed by the floe job into
it, in mode ``append`` (a row per record) and in mode ``upsert`` (each key's row replaced: a
``MERGE INTO`` writing deletion vectors), on the same topic, each mode in a table of its own.

Three patterns of keys, each a topic of its own, landed in turn into the mode's table (each
into the table as the one before left it, as batches follow each other):

- ``recent``: half updates of the newest orders, half new orders (what a table of orders
  meets: new ones arrive, recent ones change);
- ``uniform``: updates of orders drawn uniformly from the whole table;
- ``repeated``: updates of the newest tenth-of-a-batch orders, each about ten times in the
  batch (an order whose status changes within a commit interval: only its last record
  applies).

The figure is the batch's own time (the job's ``floe.batch`` line: read, decode, write, commit),
the JVM warm (a warm-up round lands first); ``upsert_vs_append`` is append's batch time over
upsert's. Also kept: the table's data and delete files before and after.

Usage: python bench/upsert_growth.py [--sizes 1000000,10000000,50000000] [--batch 500000]
Needs the local stack (started if not running). Writes bench/results/upsert_growth.json
(``--label`` names the run in it, e.g. before and after a change); with ``--record``,
``upsert_vs_append_50m_rows`` in results/latest.json (the lowest pattern's at 50M rows).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from consumers import BatchLog  # noqa: E402
from upsert_bench import files, local_session  # noqa: E402
from workload import SMALL, job_spec  # noqa: E402

PARTITIONS = 4
HISTORY_DAYS = 3
ROWS_PER_FILE = 1_000_000


def produce(env: dict[str, str], topic: str, keys: list[int]) -> None:
    """An order record per key, keyed by its id, in the given order, on 4 partitions."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=60)
    serialize = AvroSerializer(
        SchemaRegistryClient({"url": env["FLOE_SCHEMA_REGISTRY_URL"]}), json.dumps(SMALL)
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
    now = int(time.time() * 1000)
    for n, key in enumerate(keys):
        value = serialize(
            {
                "id": key,
                "customer": f"customer-{key % 977}",
                "item": f"update-{n}",
                "quantity": n % 50,
                "price": (n % 10_000) / 100,
                "status": "PAID",
                "at": now,
                "note": None if n % 4 else "gift wrap",
            },
            context,
        )
        while True:
            try:
                producer.produce(
                    topic, key=str(key).encode(), value=value, partition=key % PARTITIONS
                )
                break
            except BufferError:
                producer.poll(0.5)
    assert producer.flush(120) == 0


def fill(spark, name: str, rows: int) -> float:
    """``rows`` orders of history into table ``name`` (ids 0..rows-1 in arrival order over the
    last HISTORY_DAYS days); returns the seconds taken."""
    from pyspark.sql import functions as F

    schema = spark.table(name).schema
    now_ms = int(time.time() * 1000)
    span_ms = HISTORY_DAYS * 86_400_000
    start_ms = now_ms - span_ms
    ids = spark.range(0, rows, 1, max(1, rows // ROWS_PER_FILE))
    at = F.timestamp_millis(F.lit(start_ms) + (F.col("id") * F.lit(span_ms // rows)))
    columns = {
        "kafka": F.struct(
            F.lit("history").alias("topic"),
            (F.col("id") % PARTITIONS).cast("int").alias("partition"),
            (F.col("id") / PARTITIONS).cast("long").alias("offset"),
            at.alias("timestamp"),
            F.lit(0).alias("timestamp_type"),
            F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"),
            F.lit(1).alias("schema_id"),
            at.alias("ingest_timestamp"),
        ),
        "key": F.col("id").cast("string").cast("binary"),
        "value": F.struct(
            F.col("id").alias("id"),
            F.concat(F.lit("customer-"), F.col("id") % 977).alias("customer"),
            F.concat(F.lit("item-"), F.col("id") % 131).alias("item"),
            (F.col("id") % 50).cast("int").alias("quantity"),
            ((F.col("id") % 10_000) / 100).alias("price"),
            F.lit("NEW").alias("status"),
            at.alias("at"),
            F.when(F.col("id") % 4 == 0, F.lit("gift wrap")).alias("note"),
        ),
        "value_raw": F.lit(None).cast("binary"),
        "value_error": F.lit(None).cast("string"),
    }
    frame = ids.select(*[columns[f.name].alias(f.name) for f in schema.fields])
    started = time.monotonic()
    frame.writeTo(name).append()
    return time.monotonic() - started


def land(spark, config, log: BatchLog) -> dict:
    """The job lands the topic from its start into the table: its one batch's line."""
    from floe_sparkapp.job import run

    del log.batches[:]
    started = time.monotonic()
    run(config, spark, available_now=True, timeout=3600)
    seconds = time.monotonic() - started
    assert len(log.batches) == 1, f"expected one batch, got {log.batches}"
    line = log.batches[-1]
    return {
        "batch_seconds": line["seconds"],
        "write_seconds": line["write_seconds"],
        "passes": line["passes"],
        "stats_seconds": line["stats_seconds"],
        "commit_seconds": line["commit_seconds"],
        "rows": line["rows"],
        "input_rows": line["input_rows"],
        "run_seconds": round(seconds, 1),
    }


def round_of(spark, env, work: Path, log: BatchLog, rows: int, batch: int, seed: int) -> dict:
    """Both modes and every pattern into tables of ``rows`` rows."""
    from floe_sparkapp.catalog import load_catalog
    from floe_sparkapp.config import parse_config
    from floe_sparkapp.job import ready_table, registry_of
    from floe_sparkapp.session import spark_catalog_conf

    rng = random.Random(seed)
    half = batch // 2
    recent = list(range(rows - half, rows + half))
    rng.shuffle(recent)
    hot = batch // 10
    patterns = {
        "recent": recent,
        "uniform": rng.sample(range(rows), batch),
        "repeated": [rng.randrange(rows - hot, rows) for _ in range(batch)],
    }
    topics = {}
    for pattern, keys in patterns.items():
        topics[pattern] = f"bench-upsert-growth-{pattern}-{uuid.uuid4().hex[:8]}"
        produce(env, topics[pattern], keys)
    out: dict = {"rows": rows}
    for mode in ("append", "upsert"):
        # one table per mode, filled once: the patterns land in turn (each into the table
        # the one before left, as batches follow each other), each topic from its start
        name = f"{mode}{rows}"  # a writer name and a catalog name
        spec = job_spec(
            env,
            work,
            topics["recent"],
            name,
            mode=mode,
            # a few over the batch: Spark splits a trigger's limit over the
            # partitions rounding down
            commit={"interval": "1s", "maxRecordsPerCommit": batch + PARTITIONS},
        )
        if mode == "upsert":
            spec["table"]["keyColumns"] = ["id"]
        config = parse_config(spec)
        for key, value in spark_catalog_conf(config).items():
            spark.conf.set(key, value)
        ready_table(spark, config, registry_of(config))
        table = f"{config.table.catalog.name}.{config.table.identifier}"
        fill_seconds = fill(spark, table, rows)
        catalog = load_catalog(config.table.catalog)
        out.setdefault(mode, {})["fill_seconds"] = round(fill_seconds, 1)
        for pattern, topic in topics.items():
            checkpoint = str(work / f"checkpoint-{name}-{pattern}")
            config = parse_config(
                {
                    **spec,
                    "kafka": {**spec["kafka"], "topic": topic},
                    "checkpointLocation": checkpoint,
                }
            )
            before = files(catalog.load_table(config.table.identifier))
            landed = land(spark, config, log)
            after = files(catalog.load_table(config.table.identifier))
            out[mode][pattern] = {**landed, "before": before, "after": after}
            print(
                json.dumps(
                    {
                        "table_rows": rows,
                        "mode": mode,
                        "pattern": pattern,
                        **landed,
                        "before": before,
                        "after": after,
                    }
                ),
                flush=True,
            )
        shutil.rmtree(work / f"warehouse-{name}", ignore_errors=True)
        (work / f"{name}.db").unlink(missing_ok=True)
    for pattern in patterns:
        out[f"upsert_vs_append_{pattern}"] = round(
            out["append"][pattern]["batch_seconds"] / out["upsert"][pattern]["batch_seconds"], 3
        )
    return out


def record(entry: dict) -> None:
    """``upsert_vs_append_50m_rows`` in results/latest.json: at 50,000,000 rows, the lowest of
    the patterns' ratios (each pattern's beside it, and every size's), and the goal table in
    bench/README.md."""
    from run import record_latest

    ratios = {
        f"{s['rows']}_rows": {
            k.removeprefix("upsert_vs_append_"): v
            for k, v in s.items()
            if k.startswith("upsert_vs_append_")
        }
        for s in entry["sizes"]
    }
    largest = ratios.get("50000000_rows")
    if not largest:
        return
    record_latest(
        {
            "upsert_vs_append_50m_rows": min(largest.values()),
            "upsert_growth": {"batch": entry["batch"], "upsert_vs_append": ratios},
        },
        "upsert_growth",
        entry["command"],
        entry["date"],
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000000,10000000,50000000")
    parser.add_argument("--batch", type=int, default=500_000)
    parser.add_argument("--label", default="latest")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument(
        "--record",
        action="store_true",
        help="record upsert_vs_append_50m_rows in results/latest.json",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    # shuffles sized as the job sizes them on 2 cores
    env, spark = local_session("floe upsert growth", "4g", 2)
    log = BatchLog()
    logging.getLogger("floe.job").addHandler(log)
    logging.getLogger("floe.job").setLevel(logging.INFO)
    work = Path(tempfile.mkdtemp(prefix="floe-upsert-growth-"))
    try:
        warm = round_of(spark, env, work, log, 200_000, min(args.batch, 100_000), args.seed)
        print(json.dumps({"warm_up": warm}), flush=True)
        results = [
            round_of(spark, env, work, log, rows, args.batch, args.seed + i)
            for i, rows in enumerate(sizes)
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)

    import pyspark

    revision = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    path = ROOT / "bench" / "results" / "upsert_growth.json"
    recorded = json.loads(path.read_text()) if path.exists() else {}
    recorded[args.label] = {
        "command": " ".join(["python bench/upsert_growth.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "revision": revision,
        "batch": args.batch,
        "sizes": results,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "spark": pyspark.__version__,
        },
    }
    path.write_text(json.dumps(recorded, indent=2) + "\n")
    if args.record:
        record(recorded[args.label])
    print(json.dumps(recorded[args.label], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
