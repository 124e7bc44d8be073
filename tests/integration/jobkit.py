"""Helpers for tests of the ingestion job: topics, Avro producers, job configs, table reads."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_record_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from floe_sparkapp.catalog import load_catalog
from floe_sparkapp.config import JobConfig, parse_config


def create_topic(
    bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(name, partitions, 1, config=config or {})]
    ).values():
        future.result(timeout=30)


def recreate_topic(bootstrap: str, name: str, partitions: int, timeout: float = 60) -> None:
    """Deletes the topic and creates it again (its offsets start over), waiting for the broker
    to finish the deletion, which it does in the background."""
    import time

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([name]).values():
        future.result(timeout=30)
    deadline = time.monotonic() + timeout
    while True:
        try:
            create_topic(bootstrap, name, partitions)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


class AvroProducer:
    """Produces Avro values framed by the registry, remembering what landed where."""

    def __init__(self, stack, topic: str, *, record_subjects: bool = False):
        """``record_subjects``: each record type under a subject of its own,
        ``<topic>-<record's full name>`` (the registry's TopicRecordNameStrategy), as a topic
        carrying several tables' changes has them."""
        self.topic = topic
        self.record_subjects = record_subjects
        self.registry = SchemaRegistryClient({"url": stack.registry_url})
        self.producer = Producer(
            {"bootstrap.servers": stack.bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        self.serializers: dict[str, AvroSerializer] = {}
        self.sent: dict[tuple[int, int], dict[str, Any]] = {}

    def _serializer(self, schema: dict) -> AvroSerializer:
        text = json.dumps(schema)
        if text not in self.serializers:
            conf = (
                {"subject.name.strategy": topic_record_subject_name_strategy}
                if self.record_subjects
                else None
            )
            self.serializers[text] = AvroSerializer(self.registry, text, conf=conf)
        return self.serializers[text]

    def send(
        self,
        *,
        key: bytes | None,
        value: dict | None = None,
        schema: dict | None = None,
        raw: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        payload = raw
        if value is not None:
            assert schema is not None
            payload = self._serializer(schema)(
                value, SerializationContext(self.topic, MessageField.VALUE)
            )
        record = {"key": key, "value": value, "payload": payload, "headers": headers or []}

        def delivered(error, message):
            assert error is None, error
            self.sent[(message.partition(), message.offset())] = record

        kwargs: dict[str, Any] = {"partition": partition} if partition is not None else {}
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        self.producer.produce(
            self.topic, key=key, value=payload, headers=headers, on_delivery=delivered, **kwargs
        )

    def flush(self) -> None:
        assert self.producer.flush(60) == 0

    def next_offsets(self) -> dict[int, int]:
        result: dict[int, int] = {}
        for partition, offset in self.sent:
            result[partition] = max(result.get(partition, 0), offset + 1)
        return result


def job_config(
    stack,
    tmp_path: Path,
    topic: str,
    *,
    fmt: str = "avro",
    writer: str = "data/orders",
    dead_letter: str | None = None,
    interval: float = 1,
    max_records: int = 100_000,
    catalog_dir: Path | None = None,
    mode: str = "append",
    key_columns: tuple[str, ...] = (),
    catalog: str = "sqlite",
) -> JobConfig:
    """``catalog``: ``sqlite`` (a JDBC catalog in a file in ``catalog_dir``), ``postgresql`` (a
    JDBC catalog on the stack's server, named for ``catalog_dir``), ``rest`` (the stack's
    Iceberg REST catalog server, its warehouse on the S3 server), or ``gcs`` or ``adls`` (the
    SQLite catalog, its warehouse on the stack's Google Cloud Storage or Azure emulator)."""
    catalog_dir = catalog_dir or tmp_path
    # Spark keeps a catalog instance per name for the session: one name per catalog database.
    catalog_name = "c" + hashlib.sha1(str(catalog_dir).encode()).hexdigest()[:10]
    database: dict[str, Any] = {"uri": f"jdbc:sqlite:{catalog_dir / 'catalog.db'}"}
    if catalog == "postgresql":
        database = {
            "uri": stack.env["FLOE_POSTGRES_JDBC"],
            "properties": {
                "jdbc.user": stack.env["FLOE_POSTGRES_USER"],
                "jdbc.password": stack.env["FLOE_POSTGRES_PASSWORD"],
            },
        }
    catalog_config: dict[str, Any] = {
        "type": "sql",
        "name": catalog_name,
        **database,
        "warehouse": f"file://{catalog_dir / 'warehouse'}",
    }
    if catalog in OBJECT_STORES:
        catalog_config["warehouse"], catalog_config["properties"] = object_store(
            stack, catalog, catalog_name
        )
    if catalog == "rest":
        catalog_config = {
            "type": "rest",
            "name": catalog_name,
            "uri": stack.env["FLOE_REST_CATALOG_URI"],
            "warehouse": stack.env["FLOE_REST_CATALOG_WAREHOUSE"],
            "properties": s3_properties(stack),
        }
    data: dict[str, Any] = {
        "writer": writer,
        "generation": 1,
        "kafka": {"bootstrapServers": stack.bootstrap, "topic": topic},
        "value": {"format": fmt},
        "table": {
            "catalog": catalog_config,
            "identifier": f"analytics.{topic.replace('-', '_')}",
            "mode": mode,
            "keyColumns": list(key_columns),
        },
        "commit": {"interval": f"{interval}s", "maxRecordsPerCommit": max_records},
        "checkpointLocation": str(tmp_path / "checkpoint"),
    }
    if fmt != "raw":
        data["value"]["schemaRegistry"] = {"url": stack.registry_url, "subject": f"{topic}-value"}
    if dead_letter:
        data["deadLetter"] = {"topic": dead_letter}
    return parse_config(data)


def local_job_env(stack, cores: int = 2, memory: str = "768m") -> dict[str, str]:
    """The environment of a job run as its own local process (``python -m floe_sparkapp``):
    the connector jars on the driver's class path, where the stack's class-data-sharing
    archive holds their classes."""
    import os

    # A test's job process lives seconds to minutes: the client compiler alone (C1) brings it
    # to its first commit on less CPU (bench/job_start.py: 10.0 s -> 7.8 s on 2 cores).
    options = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -XX:TieredStopAtLevel=1".strip()
    return {
        **os.environ,
        "SPARK_SUBMIT_OPTS": options,
        "PYSPARK_SUBMIT_ARGS": (
            f"--master local[{cores}] --driver-memory {memory} --conf spark.ui.enabled=false "
            f"--driver-class-path {stack.env['FLOE_SPARK_CLASSPATH']} pyspark-shell"
        ),
    }


def s3_properties(stack) -> dict[str, str]:
    """Catalog properties that reach the stack's S3 server."""
    return {
        "s3.endpoint": stack.env["FLOE_S3_ENDPOINT"],
        "s3.path-style-access": "true",
        "s3.access-key-id": stack.env["FLOE_S3_ACCESS_KEY"],
        "s3.secret-access-key": stack.env["FLOE_S3_SECRET_KEY"],
        "client.region": stack.env["FLOE_S3_REGION"],
    }


OBJECT_STORES = ("gcs", "adls")


def object_store(stack, kind: str, prefix: str) -> tuple[str, dict[str, str]]:
    """A warehouse under ``prefix`` on the stack's ``gcs`` or ``adls`` emulator, and the catalog
    properties that reach it (Iceberg's own names, as a user writes them)."""
    env = stack.env
    if kind == "gcs":
        return (
            f"gs://{env['FLOE_GCS_BUCKET']}/{prefix}",
            {
                "gcs.service.host": env["FLOE_GCS_ENDPOINT"],
                "gcs.no-auth": "true",
                "gcs.project-id": "floe",
            },
        )
    host = f"{env['FLOE_ADLS_ACCOUNT']}.dfs.core.windows.net"
    return (
        f"abfss://{env['FLOE_ADLS_CONTAINER']}@{host}/{prefix}",
        {
            f"adls.connection-string.{host}": env["FLOE_ADLS_ENDPOINT"],
            "adls.auth.shared-key.account.name": env["FLOE_ADLS_ACCOUNT"],
            "adls.auth.shared-key.account.key": env["FLOE_ADLS_KEY"],
        },
    )


def table_rows(config: JobConfig) -> list[dict[str, Any]]:
    table = load_catalog(config.table.catalog).load_table(config.table.identifier)
    return table.scan().to_arrow().to_pylist()


def duckdb_rows(config: JobConfig, columns: str, where: str = "true") -> list[tuple]:
    """The table's rows as DuckDB reads them: its iceberg extension (from PyPI, as DuckDB's own
    binaries), from the table's current metadata file, local or on S3 (httpfs)."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_httpfs
    import duckdb_extension_iceberg

    connection = duckdb.connect()
    for module in (duckdb_extension_avro, duckdb_extension_httpfs, duckdb_extension_iceberg):
        [extension] = Path(module.__file__).parent.rglob("*.duckdb_extension")
        connection.execute(f"LOAD '{extension}'")
    location = load_table(config).metadata_location.removeprefix("file://")
    props = config.table.catalog.properties
    if location.startswith("s3://"):
        endpoint = props["s3.endpoint"]
        connection.execute(
            "CREATE SECRET (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, URL_STYLE 'path', "
            "USE_SSL ?)",
            [
                props["s3.access-key-id"],
                props["s3.secret-access-key"],
                props["client.region"],
                endpoint.split("://", 1)[1],
                endpoint.startswith("https://"),
            ],
        )
    return connection.execute(
        f"SELECT {columns} FROM iceberg_scan('{location}') WHERE {where}"
    ).fetchall()


def load_table(config: JobConfig):
    return load_catalog(config.table.catalog).load_table(config.table.identifier)


def group_offsets(stack, config: JobConfig, partitions: list[int]) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": config.consumer_group})
    try:
        committed = consumer.committed(
            [TopicPartition(config.kafka.topic, p) for p in partitions], timeout=30
        )
        return {tp.partition: tp.offset for tp in committed}
    finally:
        consumer.close()


def consume_to_end(
    stack, topic: str, timeout: float = 30, isolation: str = "read_committed"
) -> list:
    """Every record ``topic`` holds now: each partition read to its end, so a test sees that no
    other record is there without waiting for one that might come. (``isolation``: the
    consumer's isolation.level, librdkafka's default; read_committed ends at the last stable
    offset.)"""
    import time
    import uuid

    from confluent_kafka import OFFSET_BEGINNING, KafkaError

    consumer = Consumer(
        {
            "bootstrap.servers": stack.bootstrap,
            "group.id": uuid.uuid4().hex,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    found, ended = [], set()
    deadline = time.monotonic() + timeout
    while len(ended) < len(partitions) and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None:
            continue
        if message.error():
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
            ended.add(message.partition())
        else:
            found.append(message)
    consumer.close()
    assert len(ended) == len(partitions), f"{topic} not read to its end in {timeout} s"
    return found


def wait_for_rows(
    config: JobConfig, count: int, timeout: float = 180, query: Any = None
) -> list[dict[str, Any]]:
    """Polls the table until it has at least ``count`` rows (or the timeout passes); with the
    streaming ``query`` that fills it, fails at once with its error when it stops."""
    import time

    deadline = time.monotonic() + timeout
    rows: list[dict[str, Any]] = []
    catalog, scanned = None, None
    while time.monotonic() < deadline:
        if query is not None and not query.isActive:
            raise AssertionError(f"the query stopped: {query.exception()}")
        try:
            catalog = catalog or load_catalog(config.table.catalog)
            table = catalog.load_table(config.table.identifier)
            snapshot = table.current_snapshot()
            if snapshot is not None and snapshot.snapshot_id != scanned:  # read once per commit
                rows, scanned = table.scan().to_arrow().to_pylist(), snapshot.snapshot_id
        except Exception:  # noqa: BLE001 - no table yet, or the catalog down: open again
            rows, scanned, catalog = [], None, None
        if len(rows) >= count:
            return rows
        time.sleep(0.3)
    return rows


def assert_exactly_once(rows: list[dict[str, Any]], sent: dict[tuple[int, int], Any]) -> None:
    """The row set equals the produced set: each (partition, offset) once, none missing."""
    positions = [(r["kafka"]["partition"], r["kafka"]["offset"]) for r in rows]
    duplicates = (
        {p for p in positions if positions.count(p) > 1}
        if len(set(positions)) != len(positions)
        else set()
    )
    assert not duplicates, (
        f"{len(duplicates)} records landed more than once, e.g. {sorted(duplicates)[:5]}"
    )
    missing = set(sent) - set(positions)
    assert not missing, f"{len(missing)} records missing, e.g. {sorted(missing)[:5]}"
    extra = set(positions) - set(sent)
    assert not extra, f"{len(extra)} rows that were never produced, e.g. {sorted(extra)[:5]}"


@contextlib.contextmanager
def killed_after_first(owner: type, method: str):
    """For the block, ``owner.method`` runs once, then raises ``RuntimeError("driver
    killed")``: a driver killed after its first commit (the block expects that error)."""
    real = getattr(owner, method)
    calls = []

    def once(self, *args, **kwargs):
        if calls:
            raise RuntimeError("driver killed")
        calls.append(args)
        return real(self, *args, **kwargs)

    setattr(owner, method, once)
    try:
        with pytest.raises(RuntimeError, match="driver killed"):
            yield
    finally:
        setattr(owner, method, real)


def run_once(config: JobConfig, spark) -> None:
    """Runs the job until it has caught up with the topic."""
    from floe_sparkapp.job import run

    run(config, spark, available_now=True, timeout=600)


@contextlib.contextmanager
def streaming(config: JobConfig, spark, timeout: float = 300):
    """Runs the job on its trigger in a thread for the block; yields (failures, thread): what
    the job failed with lands in failures. Leaving the block stops the query."""
    from floe_sparkapp.job import run

    failures: list[Exception] = []

    def target() -> None:
        try:
            run(config, spark, timeout=timeout)
        except Exception as error:  # noqa: BLE001 - the test asserts on it
            failures.append(error)

    thread = threading.Thread(target=target)
    thread.start()
    try:
        yield failures, thread
    finally:
        for query in spark.streams.active:
            query.stop()
        thread.join()


def run_killed_between_branch_and_main(config: JobConfig, spark, monkeypatch) -> str:
    """Runs the job once, killed after its first batch's rows are on the batch's branch and
    before main moves: the batch is not committed.  Returns the branch."""
    import pytest

    from floe_sparkapp.commit import BranchCommitter

    def killed(self, branch, *args, **kwargs):
        raise RuntimeError(f"killed between the branch {branch} and main")

    with monkeypatch.context() as patched:
        patched.setattr(BranchCommitter, "_merge", killed)
        with pytest.raises(Exception) as error:
            run_once(config, spark)
    found = re.search(r"killed between the branch (\S+) and main", str(error.value))
    assert found, error.value
    return found.group(1)


def with_maintenance(config: JobConfig, **actions: dict[str, Any]) -> JobConfig:
    """``config`` with some maintenance settings changed (``compaction={"min_input_files":
    2}``), unchecked: a test may go below what a resource allows."""
    maintenance = config.maintenance.model_copy(
        update={
            action: getattr(config.maintenance, action).model_copy(update=changes)
            for action, changes in actions.items()
        }
    )
    return config.model_copy(update={"maintenance": maintenance})


def route_table(table: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A route's table like ``table`` (a job config's ``table``, as JSON), in its catalog."""
    return {**{k: v for k, v in table.items() if k not in ("catalog", "deletionPolicy")}, **changes}


def with_sections(config: JobConfig, **sections: dict[str, Any]) -> JobConfig:
    """``config`` with each named section (``value``, ``table``, ``key``, ... by their JSON
    names) updated by the given fields."""
    data = config.model_dump(by_alias=True, mode="json", exclude_none=True)
    for name, fields in sections.items():
        data.setdefault(name, {}).update(fields)
    return parse_config(data)


def valid_through(rows: list[dict]) -> int:
    """The least of the partitions' newest record timestamps (ms) among table ``rows``: what
    a commit of them is valid through."""
    newest: dict[int, int] = {}
    for r in rows:
        millis = int(r["kafka"]["timestamp"].timestamp() * 1000)
        newest[r["kafka"]["partition"]] = max(newest.get(r["kafka"]["partition"], 0), millis)
    return min(newest.values())
