"""Upsert and CDC against append on the same records: ingest rows/s, then the cost of reading
the table after N commits, before and after compaction.

One topic of 4 partitions holds ``--records`` Avro records (about 100 bytes) updating
``--keys`` keys in turn, keyed by key (so a key's updates share a partition). The floe job
lands it twice, each table in a catalog of its own, ``--per-commit`` records a commit: once with
``table.mode: append`` (a row per record) and once with ``upsert`` (a row per key: each commit
deletes the rows of its keys, writing deletion vectors, and appends their new rows). A second
topic holds the same changes as a Debezium connector sends them (``mode: cdc``): each record
the envelope of an insert (a key's first) or an update (``before``, ``after``, ``source``,
``op``), keyed the same; the job lands it a third time, in ``table.mode: cdc``. For each table:
rows/s from start to caught up (JVM warm: the append run goes first and starts the session),
then a full read with PyIceberg and with Spark (best of three), the data and delete files, then
the ``compaction`` action and the same read again.

Usage: python bench/upsert_bench.py [--records N] [--keys K] [--per-commit M]
                                    [--modes append,upsert,cdc]
Needs the local stack (started if not running). Writes bench/results/upsert.json.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compaction_bench import produce  # noqa: E402 - the same ~100-byte order records
from decode_bench import SCHEMA  # noqa: E402
from workload import job_spec  # noqa: E402


def files(table) -> dict[str, int]:
    tasks = list(table.scan().plan_files())
    deletes = {d.file_path for task in tasks for d in task.delete_files}
    return {
        "data_files": len(tasks),
        "delete_files": len(deletes),
        "records_in_data_files": sum(t.file.record_count for t in tasks),
    }


def read_seconds(spark, config, catalog) -> dict[str, float]:
    """A full read of the table, best of three: PyIceberg to Arrow, Spark counting every row."""
    name = f"{config.table.catalog.name}.{config.table.identifier}"
    timings: dict[str, list[float]] = {"pyiceberg": [], "spark": []}
    rows = None
    for _ in range(3):
        table = catalog.load_table(config.table.identifier)
        started = time.monotonic()
        rows = table.scan().to_arrow().num_rows
        timings["pyiceberg"].append(time.monotonic() - started)
        started = time.monotonic()
        spark.table(name).selectExpr("sum(value.quantity)").collect()
        timings["spark"].append(time.monotonic() - started)
    return {"rows": rows, **{k: round(min(v), 3) for k, v in timings.items()}}


def land(spark, env, work: Path, topic: str, mode: str, per_commit: int) -> dict:
    from floe_sparkapp.catalog import load_catalog
    from floe_sparkapp.config import parse_config
    from floe_sparkapp.job import run
    from floe_sparkapp.maintenance import maintain
    from floe_sparkapp.session import spark_catalog_conf

    config = parse_config(
        job_spec(
            env,
            work,
            topic,
            mode,
            mode=mode,
            commit={"interval": "1s", "maxRecordsPerCommit": per_commit},
            maintenance={"compaction": {"minInputFiles": 2}},
        )
    )
    for key, value in spark_catalog_conf(config).items():
        spark.conf.set(key, value)
    catalog = load_catalog(config.table.catalog)
    started = time.monotonic()
    run(config, spark, available_now=True, timeout=7200)
    seconds = time.monotonic() - started
    table = catalog.load_table(config.table.identifier)
    commits = sum(1 for s in table.snapshots() if (s.summary or {}).get("floe.writer"))
    before = {**files(table), **read_seconds(spark, config, catalog)}
    started = time.monotonic()
    maintain(config, "compaction", spark)
    compaction_seconds = time.monotonic() - started
    after = {
        **files(catalog.load_table(config.table.identifier)),
        **read_seconds(spark, config, catalog),
    }
    return {
        "ingest_seconds": round(seconds, 1),
        "commits": commits,
        "compaction_seconds": round(compaction_seconds, 1),
        "before_compaction": before,
        "after_compaction": after,
    }


def envelope_schema() -> dict:
    """Debezium's envelope of a table whose rows are the order records."""
    row = {**SCHEMA, "name": "Value", "namespace": "shop.public.orders"}
    source = {
        "type": "record",
        "name": "Source",
        "namespace": "io.debezium.connector.postgresql",
        "fields": [
            {"name": "connector", "type": "string"},
            {"name": "db", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "ts_ms", "type": "long"},
            {"name": "lsn", "type": ["null", "long"], "default": None},
        ],
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": "shop.public.orders",
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "shop.public.orders.Value"], "default": None},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }


def produce_changes(env: dict[str, str], topic: str, records: int, keys: int) -> None:
    """The changes :func:`compaction_bench.produce` makes with ``keys``, as a Debezium
    connector sends them: a key's first record an insert (``c``), the others updates (``u``)
    with the row before; keyed and timestamped the same."""
    rows: dict[int, dict] = {}

    def change(i: int, key: int, row: dict) -> dict:
        before, rows[key] = rows.get(key), row
        return {
            "before": before,
            "after": row,
            "op": "u" if before else "c",
            "source": {
                "connector": "postgresql",
                "db": "shop",
                "table": "orders",
                "ts_ms": row["at"],
                "lsn": 1000 + 8 * i,
            },
            "ts_ms": row["at"],
        }

    produce(env, topic, records, keys, schema=envelope_schema(), change=change)


def local_session(app: str, driver_memory: str, shuffle_partitions: int):
    """The local stack's connection settings (the stack started if it is not running) and a
    Spark session on ``local[2]`` with the connector jars and Iceberg's SQL extensions."""
    from hack import stack as local_stack

    state, _ = local_stack.ensure_up()
    env = local_stack.connection_env(state)
    os.environ.update(env)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    from floe_sparkapp.session import SESSION_CONF

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.jars", env["FLOE_SPARK_JARS"])
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config(map=SESSION_CONF)
        .getOrCreate()
    )  # the job's own settings
    spark.sparkContext.setLogLevel("WARN")
    return env, spark


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--per-commit", type=int, default=25_000)
    parser.add_argument("--modes", default="append,upsert,cdc")
    args = parser.parse_args()
    modes = args.modes.split(",")

    env, spark = local_session("floe upsert bench", "2g", 4)
    work = Path(tempfile.mkdtemp(prefix="floe-upsert-bench-"))
    topic = f"bench-upsert-{uuid.uuid4().hex[:8]}"
    produce(env, topic, args.records, args.keys)
    if "cdc" in modes:
        produce_changes(env, f"{topic}-cdc", args.records, args.keys)
    results = {
        mode: land(
            spark, env, work, f"{topic}-cdc" if mode == "cdc" else topic, mode, args.per_commit
        )
        for mode in modes
    }
    for entry in results.values():
        entry["rows_per_second"] = round(args.records / entry["ingest_seconds"])
    if "append" in modes:
        for mode in [m for m in modes if m != "append"]:
            results[f"{mode}_vs_append"] = round(
                results[mode]["rows_per_second"] / results["append"]["rows_per_second"], 3
            )

    import pyspark

    out = {
        "command": " ".join(["python bench/upsert_bench.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "records": args.records,
        "keys": args.keys,
        "per_commit": args.per_commit,
        **results,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "spark": pyspark.__version__,
        },
    }
    path = ROOT / "bench" / "results" / "upsert.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
