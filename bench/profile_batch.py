"""Where a floe micro-batch spends its time: each phase of the batch writer timed on its own,
in one warm Spark session, on the same records as the ingestion benchmark.

Phases, each run ``--repeat`` times after a warm-up run, the best kept:

* ``kafka_read``:      Spark's Kafka source into the ``noop`` sink (what the noop baseline does);
* ``cache_and_stats``: the batch persisted and the writer's one pass for offsets, timestamps
                       and writer schema ids (``BatchWriter._stats``): the Kafka read included;
* ``decode``:          the cached batch decoded into table rows (``TableWriter._decode``), into
                       ``noop``;
* ``write_table``:     the decoded rows appended to the floe table (Iceberg, zstd Parquet,
                       sorted by partition and offset), without the commit protocol;
* ``raw_parquet``:     the cached Kafka rows into plain zstd Parquet files (a reference);
* ``pass_counts_cpu_seconds``: the JVM's CPU for the batch's write as the job makes it, with
                       each kind of the single pass's counts alone (:func:`pass_counts`);
* ``stages``:          the batch read from Kafka (not the cache, as the job reads it) through
                       each step of the job's decoding in turn, into ``noop``, then written as
                       the job writes it: the JVM's CPU and the wall clock of each, best of
                       ``--repeat`` (:func:`stages`), and what each step adds a record.

Usage: python bench/profile_batch.py [--records 1000000] [--sizes 100,1000] [--repeat 2]
                                    [--only stages]
Needs the local stack (started if not running). Writes bench/results/profile.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

import consumers  # noqa: E402
import workload  # noqa: E402
from benchkit import machine, versions  # noqa: E402

RESULT = BENCH / "results" / "profile.json"


def best(run: Callable[[], Any], repeat: int) -> float:
    run()  # warm-up: JIT, first table load
    times = []
    for _ in range(repeat):
        started = time.monotonic()
        run()
        times.append(time.monotonic() - started)
    return min(times)


def profile(
    spark,
    env: dict[str, str],
    size: int,
    records: int,
    repeat: int,
    work: Path,
    only: str | None = None,
) -> dict[str, Any]:
    from floe_sparkapp import job

    topic = f"bench-profile-{size}-{uuid.uuid4().hex[:6]}"
    workload.create_topic(env["FLOE_KAFKA_BOOTSTRAP"], topic)
    schema_id = workload.register(
        env["FLOE_SCHEMA_REGISTRY_URL"], f"{topic}-value", workload.schema_for(size)
    )
    workload.produce(
        env["FLOE_KAFKA_BOOTSTRAP"], topic, workload.value_pool(schema_id, size), records
    )
    (work / topic).mkdir(parents=True)
    args = argparse.Namespace(
        mode="floe-avro",
        topic=topic,
        work=str(work / topic),
        interval=60,
        max_records_per_commit=records,
        expire=False,
    )
    config = consumers.floe_config(args, "avro")
    for key, value in job.spark_catalog_conf(config).items():
        spark.conf.set(key, value)
    registry = job.registry_of(config)
    table = job.prepare_table(config, registry)
    writer = job.BatchWriter(config, spark, registry)

    def kafka():
        return (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", env["FLOE_KAFKA_BOOTSTRAP"])
            .option("subscribe", topic)
            .option("includeHeaders", "true")
            .option("kafka.isolation.level", "read_committed")
            .load()
        )

    def noop(df) -> None:
        df.write.format("noop").mode("overwrite").save()

    def cache_and_stats() -> None:
        cached = kafka().persist()
        writer._stats(cached)
        cached.unpersist(blocking=True)

    if only == "stages":
        return {
            "records": records,
            "stages": stages(spark, writer.tables[0], table, kafka, records, repeat),
        }
    seconds = {
        "kafka_read": best(lambda: noop(kafka()), repeat),
        "cache_and_stats": best(cache_and_stats, repeat),
    }
    batch = kafka().persist()
    stats = writer._stats(batch)
    ids = sorted({i for r in stats for i in (r["schema_ids"] or [])})
    rows = writer.tables[0]._decode(batch, table, ids)
    seconds["decode"] = best(lambda: noop(rows), repeat)
    seconds["write_table"] = best(
        lambda: rows.writeTo(writer.tables[0].table_name).append(), repeat
    )
    seconds["raw_parquet"] = best(
        lambda: (
            batch.write.mode("overwrite")
            .option("compression", "zstd")
            .parquet(str(work / topic / "parquet"))
        ),
        repeat,
    )
    cpu = pass_counts(
        spark,
        writer.tables[0],
        table,
        batch,
        ids,
        sorted(int(r["partition"]) for r in stats),
        repeat,
    )
    batch.unpersist()
    return {
        "records": records,
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "rows_per_second": {k: round(records / v) for k, v in seconds.items()},
        "pass_counts_cpu_seconds": cpu,
    }


def stages(
    spark, writer, table, kafka: Callable[[], Any], records: int, repeat: int
) -> dict[str, Any]:
    """Each step of the job's decoding on top of the one before, the batch read from Kafka
    each time, into ``noop``; then the write as the job makes it (staged, then discarded): the
    JVM's CPU seconds and the wall seconds of each (best of ``repeat`` after a warm-up), and
    the CPU microseconds each step adds a record."""
    from pyspark.sql import functions as F

    from floe_sparkapp import decode
    from floe_sparkapp.decode.writers import _read as read

    frame = decode.frame
    pid = consumers.jvm_pid(spark)
    ids = sorted(
        int(r[0])
        for r in frame(kafka()).select("_schema_id").distinct().collect()
        if r[0] is not None
    )
    plans = writer._plans(table, ids, "value")
    writers = {p.schema_id: p.writer for p in plans.values() if p.writer is not None}
    value_type = writer.committer.spark_schema(writer.committer.load())["value"].dataType

    def unchecked(df):  # each writer's from_avro alone, without floe's check of the bytes
        this = F.col("_schema_id")
        return df.select(
            "*",
            *[
                F.when(this == F.lit(i), read(F.col("value"), w)).alias(f"_decoded_{i}")
                for i, w in writers.items()
            ],
        )

    steps: dict[str, Callable[[], Any]] = {
        "read": kafka,
        "framed": lambda: frame(kafka()),
        "from_avro": lambda: unchecked(frame(kafka())),
        "checked": lambda: decode.decode_writers(frame(kafka()), writers),
        "decoded": lambda: decode.decode_framed(frame(kafka()), plans, value_type),
        "table_rows": lambda: writer._decode(frame(kafka()), table, ids),
    }

    def noop(df) -> None:
        df.write.format("noop").mode("overwrite").save()

    def write() -> None:
        staged = writer.committer.stage(writer._decode(frame(kafka()), table, ids))
        writer.committer.discard(staged)

    runs = {name: (lambda make=make: noop(make())) for name, make in steps.items()}
    runs["written"] = write
    found: dict[str, Any] = {}
    for name, run in runs.items():
        run()  # warm-up
        cpu, wall = [], []
        for _ in range(repeat):
            started, began = consumers.cpu_seconds(pid), time.monotonic()
            run()
            wall.append(time.monotonic() - began)
            cpu.append(consumers.cpu_seconds(pid) - started)
        found[name] = {"cpu_seconds": round(min(cpu), 2), "wall_seconds": round(min(wall), 2)}
        print(f"  {name}: {found[name]}", flush=True)
    names = list(found)
    found["cpu_us_added_a_record"] = {
        name: round(
            (found[name]["cpu_seconds"] - (found[names[i - 1]]["cpu_seconds"] if i else 0))
            / records
            * 1e6,
            3,
        )
        for i, name in enumerate(names)
    }
    return found


def pass_counts(
    spark, writer, table, batch, ids: list[int], partitions: list[int], repeat: int
) -> dict[str, float]:
    """The JVM's CPU seconds for the batch's write as the job makes it (framed, decoded, its
    Iceberg files written, then deleted) with the single pass's counts of each kind alone: none,
    the rows and bytes, the writer schema ids as the pass counts them now (a flag per id) and
    before (a set of their text), and the newest timestamp per Kafka partition (a maximum per
    partition, which the pass no longer counts: it is read off the files)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from floe_sparkapp.batch_write import Pass
    from floe_sparkapp.decode import frame

    pid = consumers.jvm_pid(spark)

    def write(counts: Callable[[], list[Any]] | None) -> None:
        rows = frame(batch)
        if counts is not None:
            rows = rows.observe(Observation(), *counts())
        staged = writer.committer.stage(writer._decode(rows, table, ids))
        writer.committer.discard(staged)

    now = Pass(None, {"value_ids": ("_schema_id", ids)}).metrics
    kinds = {
        "none": None,
        "rows_bytes": lambda: now()[:2],
        "ids_flags_now": now,
        "ids_set_before": lambda: [
            *now()[:2],
            F.concat_ws(",", F.collect_set(F.col("_schema_id").cast("string"))),
        ],
        "newest_per_partition_before": lambda: [
            *now()[:2],
            *[
                F.max(F.when(F.col("partition") == F.lit(p), F.unix_millis(F.col("timestamp"))))
                for p in partitions
            ],
        ],
    }
    found = {}
    for name, counts in kinds.items():
        write(counts)  # warm-up
        used = []
        for _ in range(repeat):
            started = consumers.cpu_seconds(pid)
            write(counts)
            used.append(consumers.cpu_seconds(pid) - started)
        found[name] = round(min(used), 2)
        print(f"  the write, counting {name}: {found[name]} CPU seconds", flush=True)
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--only", choices=["stages"], help="only the decoding's steps (results/profile_stages.json)"
    )
    args = parser.parse_args()
    result = RESULT.with_name("profile_stages.json") if args.only else RESULT

    from hack import stack as local_stack

    state, _ = local_stack.ensure_up()
    env = local_stack.connection_env(state)
    os.environ.update(env)
    work = Path(tempfile.mkdtemp(prefix="floe-profile-"))
    spark = consumers.session("2g")
    results: dict[str, Any] = {
        "command": "python bench/profile_batch.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "versions": versions(),
    }
    for size in (int(s) for s in args.sizes.split(",")):
        results[f"value_{size}b"] = found = profile(
            spark, env, size, args.records, args.repeat, work, args.only
        )
        if "rows_per_second" in found:
            print(
                f"~{size} B values: "
                + ", ".join(f"{k} {v:,} rows/s" for k, v in found["rows_per_second"].items()),
                flush=True,
            )
    result.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"wrote {result.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
