"""One consumer of a benchmark topic, in a process of its own (a fresh JVM per run, so no run
inherits another's heap or JIT), printing one JSON line with what it measured.

Modes, all reading the same topic from the beginning to the end offsets it had at start:

* ``floe-avro``: the floe job (``available_now``), Avro values decoded into ``value``;
* ``floe-raw``:  the floe job with ``format: raw`` (no decoding, bytes in ``value_raw``);
* ``noop``:      the same Spark Kafka source (same options) into Spark's ``noop`` sink;
* ``noop-decoded``: the same, the values decoded as floe's job decodes them (no table);
* ``spark-parquet``: the same source into plain zstd Parquet files of its columns;
* ``python``:    a plain confluent-kafka consumer, fastavro, pyarrow and a Parquet file;
* ``freshness``: the floe job on a processing-time trigger while records arrive at a steady
  rate; per record, the time from produce to the commit of the snapshot that holds it;
* ``kafka-connect``, ``kafka-connect-freshness``: the same two runs of the peer, the Apache
  Iceberg sink on a Kafka Connect worker.

Usage: python bench/consumers.py MODE --topic T --work DIR [...] (see ``bench/run.py``)
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import logging
import os
import subprocess
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


def cpu_seconds(pid: int | str = "self") -> float | None:
    """User and system CPU seconds the process has used; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
        # every trigger's progress kept (Spark keeps the last 100): a backlog has more
        "--conf spark.sql.streaming.numRecentProgressUpdates=100000 "
        f"--conf spark.sql.shuffle.partitions=2 --jars {os.environ['FLOE_SPARK_JARS']} "
        "pyspark-shell"
    )
    from pyspark.sql import SparkSession

    from floe_sparkapp.session import SESSION_CONF

    builder = SparkSession.builder.appName("floe-bench")
    for key, value in SESSION_CONF.items():  # the job's own (session.build_session)
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def jvm_pid(spark) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def floe_config(args: argparse.Namespace, fmt: str):
    from floe_sparkapp.config import parse_config

    work = Path(args.work)
    value: dict[str, Any] = {"format": fmt}
    if fmt == "avro":
        value["schemaRegistry"] = {
            "url": os.environ["FLOE_SCHEMA_REGISTRY_URL"],
            "subject": f"{args.topic}-value",
        }
    return parse_config(
        {
            "writer": f"bench/{args.mode}",
            "generation": 1,
            "kafka": {"bootstrapServers": os.environ["FLOE_KAFKA_BOOTSTRAP"], "topic": args.topic},
            "value": value,
            "table": {
                "catalog": {
                    "name": "bench",
                    "uri": f"jdbc:sqlite:{work / 'catalog.db'}",
                    "warehouse": f"file://{work / 'warehouse'}",
                },
                "identifier": f"bench.{args.mode.replace('-', '_')}",
            },
            "commit": {
                "interval": f"{args.interval}s",  # the job's own caps unless given
                **(
                    {"maxRecordsPerCommit": args.max_records_per_commit}
                    if args.max_records_per_commit
                    else {}
                ),
            },
            "checkpointLocation": str(work / "checkpoint"),
            "maintenance": {"expireSnapshots": {"enabled": bool(args.expire)}},
        }
    )


def run_floe(args: argparse.Namespace) -> dict[str, Any]:
    from floe_sparkapp.catalog import load_catalog
    from floe_sparkapp.job import run

    config = floe_config(args, "avro" if args.mode == "floe-avro" else "raw")
    batches = BatchLog()
    logging.getLogger("floe.job").addHandler(batches)
    logging.getLogger("floe.job").setLevel(logging.INFO)
    started = time.monotonic()  # the JVM's start included, as for the peer's worker
    spark = session(args.driver_memory)
    session_seconds = time.monotonic() - started
    run(config, spark, available_now=True)
    seconds = time.monotonic() - started
    table = load_catalog(config.table.catalog).load_table(config.table.identifier)
    rows = int(table.current_snapshot().summary["total-records"])
    commits = [
        s.summary.additional_properties
        for s in sorted(table.snapshots(), key=lambda s: s.sequence_number)
        if s.summary.additional_properties.get("floe.writer")
    ]
    undecoded = (
        table.scan(row_filter="value_error IS NOT NULL", selected_fields=("value_error",))
        .to_arrow()
        .num_rows
    )
    return {
        "rows": rows,
        "seconds": seconds,
        "undecodable": undecoded,
        "session_seconds": session_seconds,
        "batches": len(batches.batches),
        "batch_lines": batches.batches,
        # the data files each commit added, of the commits the table still has (the job expires
        # the oldest past expireSnapshots.retainLast)
        "data_files_each": [int(c.get("added-data-files", 0)) for c in commits],
        "stats_seconds": sum(b["stats_seconds"] for b in batches.batches),
        "write_seconds": sum(b["write_seconds"] for b in batches.batches),
        "commit_seconds": sum(b["commit_seconds"] for b in batches.batches),
        "batch_seconds": sum(b["seconds"] for b in batches.batches),
        "peak_rss_jvm": peak_rss(jvm_pid(spark)),
        "peak_rss_python": peak_rss(),
    }


def records_per_trigger(args: argparse.Namespace) -> int:
    """The Spark sinks' batch: the records given, else the floe job's cap on records."""
    from floe_sparkapp.contract import CommitSpec

    return args.max_records_per_commit or CommitSpec().max_records_per_commit


def _kafka_stream(spark, args: argparse.Namespace):
    """The Kafka source with the floe job's options, from the beginning of the topic."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", os.environ["FLOE_KAFKA_BOOTSTRAP"])
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "true")
        .option("maxOffsetsPerTrigger", str(records_per_trigger(args)))
        .load()
    )


def _decoded(spark, stream, topic: str):
    """floe's decoding of ``stream``'s values as the job does it (the Confluent framing read,
    each value decoded with its writer schema and checked, the table's row made), with the
    subject's latest schema and Spark's type for it: the job's work before the Iceberg
    write."""
    from pyspark.sql.types import StructType

    from floe_sparkapp.contract import SchemaRegistrySpec
    from floe_sparkapp.decode import WriterPlan, decode_framed, frame, table_rows
    from floe_sparkapp.registry import Registry
    from floe_sparkapp.schemas import mapped

    found = Registry(
        SchemaRegistrySpec(url=os.environ["FLOE_SCHEMA_REGISTRY_URL"], subject=f"{topic}-value")
    ).latest()
    _, writer = mapped(found)
    jvm = spark.sparkContext._jvm
    avro = jvm.org.apache.avro.Schema.Parser().parse(found.schema)
    spark_type = jvm.org.apache.spark.sql.avro.SchemaConverters.toSqlType(avro).dataType()
    # the table's value: every field optional, as floe's tables keep them
    value_type = StructType.fromJson(
        json.loads(spark_type.json().replace('"nullable":false', '"nullable":true'))
    )
    plans = {found.schema_id: WriterPlan(found.schema_id, writer=writer)}
    return table_rows(decode_framed(frame(stream), plans, value_type), has_value=True)


def run_spark_sink(args: argparse.Namespace) -> dict[str, Any]:
    """The Kafka source into Spark's ``noop`` sink (reading only; ``noop-decoded``: with floe's
    decoding, :func:`_decoded`), or (``spark-parquet``) into plain zstd Parquet files of the
    source's columns: no decoding, no table, no protocol."""
    started = time.monotonic()  # the JVM's start included, as for the peer's worker
    spark = session(args.driver_memory)
    session_seconds = time.monotonic() - started
    stream = _kafka_stream(spark, args)
    if args.mode == "noop-decoded":
        stream = _decoded(spark, stream, args.topic)
    writer = stream.writeStream.trigger(availableNow=True)
    if args.mode.startswith("noop"):
        writer = writer.format("noop")
    else:
        writer = (
            writer.format("parquet")
            .option("compression", "zstd")
            .option("path", str(Path(args.work) / "parquet"))
        )
    query = writer.option(
        "checkpointLocation", str(Path(args.work) / f"{args.mode}-checkpoint")
    ).start()
    query.awaitTermination()
    seconds = time.monotonic() - started
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    return {
        "rows": rows,
        "seconds": seconds,
        "session_seconds": session_seconds,
        "batches": len(query.recentProgress),
        "batch_rows_seconds": [
            (p["numInputRows"], p["durationMs"].get("triggerExecution", 0) / 1000)
            for p in query.recentProgress
        ],
        "peak_rss_jvm": peak_rss(jvm_pid(spark)),
        "peak_rss_python": peak_rss(),
    }


def run_python(args: argparse.Namespace) -> dict[str, Any]:
    """What a team might write instead: consume, decode with fastavro, write Parquet."""
    import fastavro
    import pyarrow as pa
    import pyarrow.parquet as pq
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": os.environ["FLOE_KAFKA_BOOTSTRAP"],
            "group.id": f"bench-python-{os.getpid()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.max.bytes": 52_428_800,
            "queued.max.messages.kbytes": 262_144,
        }
    )
    partitions = range(workload.PARTITIONS)
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=30)[1]
        for p in partitions
    }
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
        values = [fastavro.schemaless_reader(io.BytesIO(m.value()[5:]), parsed) for m in messages]
        batch = pa.Table.from_pylist(values, schema=value_schema)
        batch = (
            batch.append_column(
                "kafka_partition", pa.array([m.partition() for m in messages], pa.int32())
            )
            .append_column("kafka_offset", pa.array([m.offset() for m in messages], pa.int64()))
            .append_column(
                "kafka_timestamp", pa.array([m.timestamp()[1] for m in messages], pa.int64())
            )
            .append_column("key", pa.array([m.key() for m in messages], pa.binary()))
        )
        if writer is None:
            writer = pq.ParquetWriter(
                Path(args.work) / "python-loop.parquet", batch.schema, compression="zstd"
            )
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
    from floe_sparkapp.job import start
    from floe_sparkapp.ledger import OFFSETS, WRITER, last_commit

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
    producer = workload.SteadyProducer(
        os.environ["FLOE_KAFKA_BOOTSTRAP"], args.topic, values, args.rate
    )
    producing_from = time.time()
    producer.start()
    measured_from_ms = warm_up(args)
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
    result = {
        "sent": sent,
        "producing_seconds": producing_seconds,
        "rate": args.rate,
        "interval_seconds": args.interval,
        "commits": len(written),
        "snapshots_per_hour": len(written) / producing_seconds * 3600,
        "batch_seconds_mean": float(np.mean([b["seconds"] for b in written])),
        "batch_seconds_p99": float(np.percentile([b["seconds"] for b in written], 99)),
        "stats_seconds_mean": float(np.mean([b["stats_seconds"] for b in written])),
        "write_seconds_mean": float(np.mean([b["write_seconds"] for b in written])),
        "commit_seconds_mean": float(np.mean([b["commit_seconds"] for b in written])),
        "commit_over_batch": (
            sum(b["commit_seconds"] for b in written) / sum(b["seconds"] for b in written)
        ),
        **metadata_growth(table, written),
        "peak_rss_jvm": peak_rss(jvm_pid(spark)),
        "peak_rss_python": peak_rss(),
    }
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
            commits.append(
                (
                    max(snapshot.timestamp_ms, on_main.get(snapshot.snapshot_id, 0)),
                    {int(p): o for p, o in json.loads(snapshot.summary[OFFSETS]).items()},
                )
            )
            data_files += int(snapshot.summary.get("added-data-files") or 0)
        snapshot = (
            table.snapshot_by_id(snapshot.parent_snapshot_id)
            if snapshot.parent_snapshot_id is not None
            else None
        )
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
    return {
        **result,
        "rows": len(offset),
        **latency_figures(latency_ms, produced_ms, measured_from_ms, args.warmup),
        "data_files_per_hour": data_files / producing_seconds * 3600,
    }


# --- The peer: the Apache Iceberg sink on Kafka Connect -------------------------------------

CONNECT_TABLE = "bench.kafka_connect"
CONNECT_METADATA = "_kafka_metadata"  # KafkaMetadataTransform's prefix: _kafka_metadata_offset...


class ConnectWorker:
    """A standalone Kafka Connect worker (one JVM, the heap floe's driver gets) running the
    Iceberg sink as its docs configure it for exactly once: a control topic of its own, the
    coordinator committing every ``interval`` seconds, two tasks for two cores. Values go
    through the registry's Avro converter; KafkaMetadataTransform adds each record's
    partition, offset and timestamp (floe writes them too). The table lands in a SQLite JDBC
    catalog on local files, as the floe job's in this benchmark."""

    def __init__(self, args: argparse.Namespace, interval: int):
        from hack.stack import provision

        self.work = Path(args.work)
        self.jars = provision.connect_jars()
        # a connector (its consumer group) and a control topic of this run's own
        self.name = f"iceberg-{args.topic}-{os.urandom(3).hex()}"
        self.rest_port = _free_port()
        bootstrap = os.environ["FLOE_KAFKA_BOOTSTRAP"]
        registry = os.environ["FLOE_SCHEMA_REGISTRY_URL"].replace(
            "/apis/ccompat/v7", "/apis/registry/v2"
        )
        control = f"{self.name}-control"
        workload.create_topic(bootstrap, control, partitions=1)
        _properties(
            self.work / "worker.properties",
            {
                "bootstrap.servers": bootstrap,
                "listeners": f"http://127.0.0.1:{self.rest_port}",
                "offset.storage.file.filename": self.work / "connect.offsets",
                # An idle task calls the sink (which answers the coordinator) once per offset flush
                # interval, 60 s by default: the last commit of a drained topic would wait for it.
                "offset.flush.interval.ms": "1000",
                "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
                # the registry's converter, reading the Confluent framing (4-byte content ids)
                "value.converter": "io.apicurio.registry.utils.converter.AvroConverter",
                "value.converter.apicurio.registry.url": registry,
                "value.converter.apicurio.registry.id-handler": (
                    "io.apicurio.registry.serde.Legacy4ByteIdHandler"
                ),
                "value.converter.apicurio.registry.use-id": "contentId",
                "consumer.auto.offset.reset": "earliest",
                "consumer.isolation.level": "read_committed",
            },
        )
        _properties(
            self.work / "connector.properties",
            {
                "name": self.name,
                "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
                "tasks.max": "2",
                "topics": args.topic,
                "iceberg.tables": CONNECT_TABLE,
                "iceberg.tables.auto-create-enabled": "true",
                "iceberg.tables.evolve-schema-enabled": "true",
                "iceberg.catalog": "bench",
                "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
                "iceberg.catalog.uri": f"jdbc:sqlite:{self.work / 'catalog.db'}",
                "iceberg.catalog.warehouse": f"file://{self.work / 'warehouse'}",
                "iceberg.control.topic": control,
                "iceberg.control.commit.interval-ms": str(interval * 1000),
                "iceberg.kafka.bootstrap.servers": bootstrap,
                "transforms": "metadata",
                "transforms.metadata.type": (
                    "org.apache.iceberg.connect.transforms.KafkaMetadataTransform"
                ),
            },
        )
        (self.work / "log4j2.properties").write_text(
            "appender.out.type = Console\nappender.out.name = out\n"
            "appender.out.layout.type = PatternLayout\n"
            "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = WARN\nrootLogger.appenderRef.out.ref = out\n"
            "logger.commit.name = org.apache.iceberg.connect.channel\nlogger.commit.level = INFO\n"
        )
        self.process: Any = None

    def start(self, heap: str) -> None:
        # The namespace exists beforehand, as in any deployment: two tasks creating it at once
        # on a fresh catalog collide (the table they create is the sink's own).
        self.catalog().create_namespace(CONNECT_TABLE.split(".")[0])

        self.log = open(self.work / "connect.log", "w")  # noqa: SIM115 - closed by stop()
        self.process = subprocess.Popen(
            [
                "java",
                f"-Xms{heap}",
                f"-Xmx{heap}",
                "-XX:+UseG1GC",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.work / 'log4j2.properties'}",
                "-cp",
                f"{self.jars}/*",
                "org.apache.kafka.connect.cli.ConnectStandalone",
                str(self.work / "worker.properties"),
                str(self.work / "connector.properties"),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def tasks(self) -> list[str]:
        """The states of the connector's tasks (none before its REST API is up); raises when
        the worker exited or a task failed."""
        import urllib.request

        if self.process.poll() is not None:
            raise RuntimeError(
                f"the Connect worker exited ({self.process.returncode}): "
                + (self.work / "connect.log").read_text()[-3000:]
            )
        url = f"http://127.0.0.1:{self.rest_port}/connectors/{self.name}/status"
        try:
            status = json.load(urllib.request.urlopen(url, timeout=5))
        except OSError:
            return []
        states = [t["state"] for t in status.get("tasks", [])]
        if "FAILED" in states:
            raise RuntimeError(
                "a Connect task failed: "
                + "\n".join(
                    t.get("trace", "")[:2000] for t in status["tasks"] if t["state"] == "FAILED"
                )
            )
        return states

    def wait_running(self, timeout: float = 300) -> None:
        """Until both of the connector's tasks run."""
        deadline = time.monotonic() + timeout
        while self.tasks() != ["RUNNING", "RUNNING"]:
            assert time.monotonic() < deadline, "the Connect worker did not start its tasks"
            time.sleep(0.5)

    def catalog(self):
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog(
            "bench",
            uri=f"sqlite:///{self.work / 'catalog.db'}",
            warehouse=f"file://{self.work / 'warehouse'}",
        )

    def table(self):
        """The sink's table, or None before the sink created it."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog().load_table(CONNECT_TABLE)
        except NoSuchTableError:
            return None

    def wait_rows(self, rows: int, timeout: float):
        """Polls the table until its current snapshot holds ``rows`` rows; the table."""
        deadline = time.monotonic() + timeout
        while True:
            self.tasks()
            table = self.table()
            snapshot = table.current_snapshot() if table is not None else None
            if snapshot is not None and int(snapshot.summary["total-records"]) >= rows:
                return table
            assert time.monotonic() < deadline, f"the sink did not land {rows} rows"
            time.sleep(0.25)

    def stop(self) -> int:
        """Stops the worker; its peak resident set, bytes."""
        peak = peak_rss(self.process.pid)
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()
        return peak


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _properties(path: Path, values: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))


def _end_offsets(topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": os.environ["FLOE_KAFKA_BOOTSTRAP"],
            "group.id": f"bench-ends-{os.getpid()}",
        }
    )
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(workload.PARTITIONS)
        }
    finally:
        consumer.close()


def _lineage(table, snapshot_id: int | None = None):
    """(partition, offset, timestamp ms) numpy arrays of the rows the sink wrote."""
    import numpy as np

    names = [f"{CONNECT_METADATA}_{f}" for f in ("partition", "offset", "timestamp")]
    rows = table.scan(selected_fields=tuple(names), snapshot_id=snapshot_id).to_arrow()
    partition, offset, stamp = (rows.column(n).combine_chunks() for n in names)
    if str(stamp.type).startswith("timestamp"):
        stamp = stamp.cast("int64")  # microseconds
        return (np.asarray(partition), np.asarray(offset), np.asarray(stamp) // 1000)
    return np.asarray(partition), np.asarray(offset), np.asarray(stamp)


def run_kafka_connect(args: argparse.Namespace) -> dict[str, Any]:
    """The peer over the whole topic: rows/s from the worker's start (JVM included, as for the
    Spark consumers) to the commit that holds the last record; every record exactly once."""
    import numpy as np

    ends = _end_offsets(args.topic)
    records = sum(ends.values())
    worker = ConnectWorker(args, args.interval)
    started = time.time()
    worker.start(args.driver_memory)
    try:
        table = worker.wait_rows(records, timeout=records / 2000 + 600)
        seconds = table.current_snapshot().timestamp_ms / 1000 - started
    finally:
        peak = worker.stop()
    partition, offset, _ = _lineage(table)
    distinct = len(np.unique(partition.astype(np.int64) * 2**40 + offset))
    assert len(offset) == records == distinct, (len(offset), records, distinct)
    return {
        "rows": len(offset),
        "seconds": seconds,
        "commits": len(table.snapshots()),
        "steady_rows_per_second": _steady_commits(table.snapshots()),
        "peak_rss_jvm": peak,
        "peak_rss_python": 0,
    }


def _steady_commits(snapshots: list[Any]) -> int | None:
    """The sink's steady rate: the median of its commits' rows over the time since the commit
    before (the first commit, after the worker's start, and the last, a remainder, left out)."""
    rates = sorted(
        int(now.summary["added-records"]) * 1000 / (now.timestamp_ms - before.timestamp_ms)
        for before, now in itertools.pairwise(snapshots[1:-1])
        if now.timestamp_ms > before.timestamp_ms and now.summary and "added-records" in now.summary
    )
    return round(rates[len(rates) // 2]) if len(rates) >= 3 else None


def run_kafka_connect_freshness(args: argparse.Namespace) -> dict[str, Any]:
    """The peer on its commit interval while records arrive at a steady rate; per record, the
    time from produce to the commit of the snapshot that first holds it, as for floe."""
    import numpy as np

    worker = ConnectWorker(args, args.interval)
    worker.start(args.driver_memory)
    try:
        worker.wait_running()
        values = workload.value_pool(args.schema_id, args.size)
        producer = workload.SteadyProducer(
            os.environ["FLOE_KAFKA_BOOTSTRAP"], args.topic, values, args.rate
        )
        producing_from = time.time()
        producer.start()
        measured_from_ms = warm_up(args)
        time.sleep(args.seconds)
        sent = producer.stop()
        producing_seconds = time.time() - producing_from
        table = worker.wait_rows(sent, timeout=3 * args.interval + 120)
    finally:
        peak = worker.stop()
    # Each commit holds, per partition, the records up to some offset: the first snapshot
    # whose rows reach a record's offset on its partition is the one that made it visible.
    snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    reached = []
    for snapshot in snapshots:
        partition, offset, _ = _lineage(table, snapshot.snapshot_id)
        reached.append({int(p): int(offset[partition == p].max()) for p in np.unique(partition)})
    partition, offset, produced_ms = _lineage(table)
    assert len(offset) == sent, (len(offset), sent)
    latency_ms = np.empty(len(offset), dtype=np.int64)
    at = np.array([s.timestamp_ms for s in snapshots])
    for p in np.unique(partition):
        ends = np.array([r.get(int(p), -1) for r in reached])
        mine = partition == p
        latency_ms[mine] = at[np.searchsorted(ends, offset[mine], side="left")] - produced_ms[mine]
    return {
        "sent": sent,
        "rows": len(offset),
        "producing_seconds": producing_seconds,
        "rate": args.rate,
        "interval_seconds": args.interval,
        "commits": len(snapshots),
        "snapshots_per_hour": len(snapshots) / producing_seconds * 3600,
        **latency_figures(latency_ms, produced_ms, measured_from_ms, args.warmup),
        "data_files_per_hour": sum(
            int((s.summary or {}).get("added-data-files") or 0) for s in snapshots
        )
        / producing_seconds
        * 3600,
        "peak_rss_jvm": peak,
        "peak_rss_python": 0,
    }


def warm_up(args: argparse.Namespace) -> int:
    """Lets records flow for ``args.warmup`` seconds before the measured ones (the first
    batches of a new JVM run cold: class loading, code generation, the JIT); returns the
    epoch ms from which records count."""
    time.sleep(args.warmup)
    return int(time.time() * 1000)


def latency_figures(latency_ms, produced_ms, measured_from_ms: int, warmup: int) -> dict:
    """p50, p99 and max of the latency of the records produced from ``measured_from_ms``."""
    import numpy as np

    measured = latency_ms[produced_ms >= measured_from_ms]
    return {
        "warmup_seconds": warmup,
        "rows_measured": len(measured),
        "freshness_p50_seconds": float(np.percentile(measured, 50)) / 1000,
        "freshness_p99_seconds": float(np.percentile(measured, 99)) / 1000,
        "freshness_max_seconds": float(measured.max()) / 1000,
    }


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
    return {
        "metadata_json_bytes": os.path.getsize(path),
        "snapshots_kept": len(table.snapshots()),
        "expired_snapshots": sum(b.get("expired_snapshots", 0) for b in batches),
        "expire_seconds_mean": float(np.mean([b.get("expire_seconds", 0.0) for b in batches])),
        "commit_ms_first_tenth": float(commit_ms[:tenth].mean()),
        "commit_ms_last_tenth": float(commit_ms[-tenth:].mean()),
        "commit_ms_slope_per_hour": slope,
    }


MODES = {
    "floe-avro": run_floe,
    "floe-raw": run_floe,
    "noop": run_spark_sink,
    "noop-decoded": run_spark_sink,
    "spark-parquet": run_spark_sink,
    "python": run_python,
    "freshness": run_freshness,
    "kafka-connect": run_kafka_connect,
    "kafka-connect-freshness": run_kafka_connect_freshness,
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("--topic", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--size", type=int, default=100, help="value size the topic holds")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--interval", type=int, default=60, help="commit interval, seconds")
    parser.add_argument(
        "--max-records-per-commit",
        type=int,
        default=None,
        help="floe: maxRecordsPerCommit (default: the job's own caps); the "
        "Spark sinks: their maxOffsetsPerTrigger (default: the same)",
    )
    parser.add_argument("--seconds", type=int, default=300, help="freshness: producing time")
    parser.add_argument("--rate", type=int, default=2000, help="freshness: records per second")
    parser.add_argument("--schema-id", type=int, default=0, help="freshness: the value schema id")
    parser.add_argument(
        "--warmup",
        type=int,
        default=30,
        help="freshness: seconds of records before the measured ones",
    )
    parser.add_argument(
        "--latency",
        type=int,
        default=1,
        help="freshness: measure each record's latency (0: only the commits)",
    )
    parser.add_argument(
        "--expire",
        type=int,
        default=1,
        help="freshness: the job expires snapshots as it commits (0: never)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    result = MODES[args.mode](args)
    result["mode"] = args.mode
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
