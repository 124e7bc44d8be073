"""One consumer of a benchmark topic, in a process of its own (a fresh JVM per run, so no run
inherits another's heap or JIT), printing one JSON line with what it measured.

Modes, all reading the same topic from the beginning to the end offsets it had at start:

* ``floe-avro``: the floe job (``available_now``), Avro values decoded into ``value``;
* ``floe-raw``:  the floe job with ``format: raw`` (no decoding, bytes in ``value_raw``);
* ``noop``:      the same Spark Kafka source (same options) into Spark's ``noop`` sink;
* ``spark-parquet``: the same source into plain zstd Parquet files of its columns;
* ``python``:    a plain confluent-kafka consumer, fastavro, pyarrow and a Parquet file;
* ``freshness``: the floe job on a processing-time trigger while records arrive at a steady
  rate; per record, the time from produce to the commit of the snapshot that holds it.

Usage: python bench/consumers.py MODE --topic T --work DIR [...] (see ``bench/run.py``)
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import workload  # noqa: E402


def peak_rss(pid: int | str = "self") -> int:
    """The process's peak resident set (VmHWM), bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


class BatchLog(logging.Handler):
    """Keeps the floe job's per-batch lines (rows, seconds, commit seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith('{"event": "floe.batch"'):
            self.batches.append({**json.loads(message), "at": time.monotonic()})


def session(driver_memory: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYSPARK_SUBMIT_ARGS"] = (
        f"--master local[2] --driver-memory {driver_memory} --conf spark.ui.enabled=false "
        "--conf spark.ui.showConsoleProgress=false "
        f"--conf spark.sql.shuffle.partitions=2 --jars {os.environ['FLOE_SPARK_JARS']} "
        "pyspark-shell")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName("floe-bench")
             .config("spark.sql.extensions",
                     "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    return spark


def jvm_pid(spark) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def floe_config(args: argparse.Namespace, fmt: str):
    from floe_sparkapp.config import parse_config

    work = Path(args.work)
    value: dict[str, Any] = {"format": fmt}
    if fmt == "avro":
        value["schemaRegistry"] = {"url": os.environ["FLOE_SCHEMA_REGISTRY_URL"],
                                   "subject": f"{args.topic}-value"}
    return parse_config({
        "writer": f"bench/{args.mode}", "generation": 1,
        "kafka": {"bootstrapServers": os.environ["FLOE_KAFKA_BOOTSTRAP"], "topic": args.topic},
        "value": value,
        "table": {"catalog": {"name": "bench", "uri": f"jdbc:sqlite:{work / 'catalog.db'}",
                              "warehouse": f"file://{work / 'warehouse'}"},
                  "identifier": f"bench.{args.mode.replace('-', '_')}"},
        "commit": {"intervalSeconds": args.interval,
                   "maxRecordsPerCommit": args.max_records_per_commit},
        "checkpointLocation": str(work / "checkpoint"),
        "maintenance": {"expireWhileCommitting": bool(args.expire)},
    })


def run_floe(args: argparse.Namespace) -> dict[str, Any]:
    from floe_sparkapp.catalog import load_catalog
    from floe_sparkapp.job import run

    config = floe_config(args, "avro" if args.mode == "floe-avro" else "raw")
    spark = session(args.driver_memory)
    batches = BatchLog()
    logging.getLogger("floe.job").addHandler(batches)
    logging.getLogger("floe.job").setLevel(logging.INFO)
    started = time.monotonic()
    run(config, spark, available_now=True)
    seconds = time.monotonic() - started
    table = load_catalog(config.table.catalog).load_table(config.table.identifier)
    rows = int(table.current_snapshot().summary["total-records"])
    undecoded = table.scan(row_filter="value_error IS NOT NULL",
                           selected_fields=("value_error",)).to_arrow().num_rows
    return {"rows": rows, "seconds": seconds, "undecodable": undecoded,
            "batches": len(batches.batches),
            "stats_seconds": sum(b["stats_seconds"] for b in batches.batches),
            "write_seconds": sum(b["write_seconds"] for b in batches.batches),
            "commit_seconds": sum(b["commit_seconds"] for b in batches.batches),
            "batch_seconds": sum(b["seconds"] for b in batches.batches),
            "peak_rss_jvm": peak_rss(jvm_pid(spark)), "peak_rss_python": peak_rss()}


def _kafka_stream(spark, args: argparse.Namespace):
    """The Kafka source with the floe job's options, from the beginning of the topic."""
    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", os.environ["FLOE_KAFKA_BOOTSTRAP"])
            .option("subscribe", args.topic).option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed").option("includeHeaders", "true")
            .option("failOnDataLoss", "true")
            .option("maxOffsetsPerTrigger", str(args.max_records_per_commit)).load())


def run_spark_sink(args: argparse.Namespace) -> dict[str, Any]:
    """The Kafka source into Spark's ``noop`` sink (reading only), or (``spark-parquet``) into
    plain zstd Parquet files of the source's columns: no decoding, no table, no protocol."""
    spark = session(args.driver_memory)
    started = time.monotonic()
    writer = _kafka_stream(spark, args).writeStream.trigger(availableNow=True)
    if args.mode == "noop":
        writer = writer.format("noop")
    else:
        writer = (writer.format("parquet").option("compression", "zstd")
                  .option("path", str(Path(args.work) / "parquet")))
    query = writer.option("checkpointLocation",
                          str(Path(args.work) / f"{args.mode}-checkpoint")).start()
    query.awaitTermination()
    seconds = time.monotonic() - started
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    return {"rows": rows, "seconds": seconds, "batches": len(query.recentProgress),
            "peak_rss_jvm": peak_rss(jvm_pid(spark)), "peak_rss_python": peak_rss()}


def run_python(args: argparse.Namespace) -> dict[str, Any]:
    """What a team might write instead: consume, decode with fastavro, write Parquet."""
    import fastavro
    import pyarrow as pa
    import pyarrow.parquet as pq
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": os.environ["FLOE_KAFKA_BOOTSTRAP"],
                         "group.id": f"bench-python-{os.getpid()}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "fetch.max.bytes": 52_428_800,
                         "queued.max.messages.kbytes": 262_144})
    partitions = range(workload.PARTITIONS)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=30)[1]
            for p in partitions}
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions])
    parsed = fastavro.parse_schema(workload.schema_for(args.size))
    value_schema = workload.arrow_schema(args.size)
    writer = None
    done = {p for p, end in ends.items() if end == 0}
    rows = 0
    started = time.monotonic()
    while len(done) < len(ends):
        messages = [m for m in consumer.consume(20_000, timeout=1.0) if not m.error()]
        if not messages:
            continue
        values = [fastavro.schemaless_reader(io.BytesIO(m.value()[5:]), parsed)
                  for m in messages]
        batch = pa.Table.from_pylist(values, schema=value_schema)
        batch = (batch.append_column("kafka_partition", pa.array([m.partition() for m in messages],
                                                                 pa.int32()))
                 .append_column("kafka_offset", pa.array([m.offset() for m in messages], pa.int64()))
                 .append_column("kafka_timestamp", pa.array([m.timestamp()[1] for m in messages],
                                                            pa.int64()))
                 .append_column("key", pa.array([m.key() for m in messages], pa.binary())))
        if writer is None:
            writer = pq.ParquetWriter(Path(args.work) / "python-loop.parquet", batch.schema,
                                      compression="zstd")
        writer.write_table(batch)
        rows += len(messages)
        for m in messages:
            if m.offset() + 1 >= ends[m.partition()]:
                done.add(m.partition())
    if writer is not None:
        writer.close()
    seconds = time.monotonic() - started
    consumer.close()
    return {"rows": rows, "seconds": seconds, "peak_rss_python": peak_rss()}


def run_freshness(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    from floe_sparkapp.catalog import load_catalog
    from floe_sparkapp.commit import WRITER, OFFSETS, last_commit
    from floe_sparkapp.job import start

    config = floe_config(args, "avro")
    spark = session(args.driver_memory)
    batches = BatchLog()
    logging.getLogger("floe.job").addHandler(batches)
    logging.getLogger("floe.job").setLevel(logging.INFO)
    query = start(config, spark)
    deadline = time.monotonic() + 300
    while query.lastProgress is None:  # the first (empty) trigger has run: the job is steady
        assert time.monotonic() < deadline and query.isActive, query.exception()
        time.sleep(0.5)
    values = workload.value_pool(args.schema_id, args.size)
    producer = workload.SteadyProducer(os.environ["FLOE_KAFKA_BOOTSTRAP"], args.topic, values,
                                       args.rate)
    producing_from = time.time()
    producer.start()
    time.sleep(args.seconds)
    sent = producer.stop()
    producing_seconds = time.time() - producing_from
    catalog = load_catalog(config.table.catalog)
    deadline = time.monotonic() + 3 * args.interval + 120
    while True:
        table = catalog.load_table(config.table.identifier)
        if sum(last_commit(table, config.writer).offsets.values()) >= sent:
            break
        assert time.monotonic() < deadline and query.isActive, "the job did not catch up"
        time.sleep(1)
    query.stop()
    written = [b for b in batches.batches if b["rows"]]
    result = {"sent": sent, "producing_seconds": producing_seconds, "rate": args.rate,
              "interval_seconds": args.interval, "commits": len(written),
              "snapshots_per_hour": len(written) / producing_seconds * 3600,
              "batch_seconds_mean": float(np.mean([b["seconds"] for b in written])),
              "batch_seconds_p99": float(np.percentile([b["seconds"] for b in written], 99)),
              "stats_seconds_mean": float(np.mean([b["stats_seconds"] for b in written])),
              "write_seconds_mean": float(np.mean([b["write_seconds"] for b in written])),
              "commit_seconds_mean": float(np.mean([b["commit_seconds"] for b in written])),
              "commit_over_batch": (sum(b["commit_seconds"] for b in written)
                                    / sum(b["seconds"] for b in written)),
              **metadata_growth(table, written),
              "peak_rss_jvm": peak_rss(jvm_pid(spark)), "peak_rss_python": peak_rss()}
    if not args.latency:  # snapshots may have expired: commit times are no longer all there
        return result

    # (visible ms, next offsets) of every floe snapshot, oldest first.  A snapshot is visible
    # once main points at it: the fast-forward's entry in main's snapshot log, a little after
    # the snapshot itself was written on its branch.
    on_main = {entry.snapshot_id: entry.timestamp_ms for entry in table.metadata.snapshot_log}
    commits = []
    snapshot = table.current_snapshot()
    data_files = 0
    while snapshot is not None:
        if (snapshot.summary or {}).get(WRITER) == config.writer:
            commits.append((max(snapshot.timestamp_ms, on_main.get(snapshot.snapshot_id, 0)),
                            {int(p): o for p, o in json.loads(snapshot.summary[OFFSETS]).items()}))
            data_files += int(snapshot.summary.get("added-data-files", 0))
        snapshot = (table.snapshot_by_id(snapshot.parent_snapshot_id)
                    if snapshot.parent_snapshot_id is not None else None)
    commits.reverse()
    rows = table.scan(selected_fields=("kafka",)).to_arrow().column("kafka").combine_chunks()
    partition = np.asarray(rows.field("partition"))
    offset = np.asarray(rows.field("offset"))
    produced_ms = np.asarray(rows.field("timestamp").cast("int64")) // 1000
    latency_ms = np.empty(len(offset), dtype=np.int64)
    for p in np.unique(partition):
        ends = np.array([c[1].get(int(p), 0) for c in commits])
        at = np.array([c[0] for c in commits])
        mine = partition == p
        latency_ms[mine] = at[np.searchsorted(ends, offset[mine], side="right")] - produced_ms[mine]
    return {**result, "rows": len(offset),
            "freshness_p50_seconds": float(np.percentile(latency_ms, 50)) / 1000,
            "freshness_p99_seconds": float(np.percentile(latency_ms, 99)) / 1000,
            "freshness_max_seconds": float(latency_ms.max()) / 1000,
            "data_files_per_hour": data_files / producing_seconds * 3600}


def metadata_growth(table, batches: list[dict[str, Any]]) -> dict[str, Any]:
    """The table's metadata at the end (its metadata.json's size, snapshots kept) and how the
    commit time per batch moved over the run: the means of its first and last tenth, and the
    slope of a least-squares line through every batch's commit time (ms per hour)."""
    import numpy as np

    hours = (np.array([b["at"] for b in batches]) - batches[0]["at"]) / 3600
    commit_ms = np.array([b["commit_seconds"] for b in batches]) * 1000
    tenth = max(1, len(batches) // 10)
    slope = float(np.polyfit(hours, commit_ms, 1)[0]) if len(batches) > 2 else None
    path = table.metadata_location.removeprefix("file://").removeprefix("file:")
    return {"metadata_json_bytes": os.path.getsize(path),
            "snapshots_kept": len(table.snapshots()),
            "expired_snapshots": sum(b.get("expired_snapshots", 0) for b in batches),
            "expire_seconds_mean": float(np.mean([b.get("expire_seconds", 0.0)
                                                  for b in batches])),
            "commit_ms_first_tenth": float(commit_ms[:tenth].mean()),
            "commit_ms_last_tenth": float(commit_ms[-tenth:].mean()),
            "commit_ms_slope_per_hour": slope}


MODES = {"floe-avro": run_floe, "floe-raw": run_floe, "noop": run_spark_sink,
         "spark-parquet": run_spark_sink, "python": run_python,
         "freshness": run_freshness}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("--topic", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--size", type=int, default=100, help="value size the topic holds")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--interval", type=int, default=60, help="commit interval, seconds")
    parser.add_argument("--max-records-per-commit", type=int, default=500_000)
    parser.add_argument("--seconds", type=int, default=300, help="freshness: producing time")
    parser.add_argument("--rate", type=int, default=2000, help="freshness: records per second")
    parser.add_argument("--schema-id", type=int, default=0, help="freshness: the value schema id")
    parser.add_argument("--latency", type=int, default=1,
                        help="freshness: measure each record's latency (0: only the commits)")
    parser.add_argument("--expire", type=int, default=1,
                        help="freshness: the job expires snapshots as it commits (0: never)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    result = MODES[args.mode](args)
    result["mode"] = args.mode
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
