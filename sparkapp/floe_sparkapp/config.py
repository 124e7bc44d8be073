"""The job config contract: what the operator renders into each SparkApplication's ConfigMap.

The JSON form uses camelCase keys, like the KafkaIcebergTopic resource it comes from.
Secrets never appear in it: credentials are named by environment variable (``...Env``
fields), which the SparkApplication fills from Kubernetes Secrets.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

KAFKA_TOPIC = r"^[a-zA-Z0-9._-]{1,249}$"
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$"
FIELD_PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
MAX_KEY_COLUMNS = 8
# The default retention keeps snapshots at least this long (seconds), for readers' scans.
MIN_DEFAULT_SNAPSHOT_AGE_SECONDS = 300


class ConfigError(ValueError):
    """A job config that cannot work; the message names each bad field and why."""


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              frozen=True)


class KafkaConfig(_Model):
    bootstrap_servers: str = Field(min_length=1, description="host:port[,host:port...]")
    topic: str = Field(pattern=KAFKA_TOPIC)
    starting_offsets: Literal["earliest", "latest"] = Field(
        "earliest", description="Where the very first start reads from; later starts continue "
                                "from the table's committed offsets.")
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    consumer_group: str | None = Field(
        None, description="Consumer group the committed offsets are reported to "
                          "(default: floe.<writer>).")
    properties: dict[str, str] = Field(
        default_factory=dict, description="Extra Kafka client settings (security.protocol, "
                                          "sasl.mechanism, ...), without secrets.")
    properties_from_env: dict[str, str] = Field(
        default_factory=dict, description="Kafka client settings whose values are read from the "
                                          "named environment variables (passwords, JAAS).")
    properties_dir: str | None = Field(
        None, description="Directory whose files are Kafka client settings (file name = setting, "
                          "content = value), e.g. a mounted Secret.")


class SchemaRegistryConfig(_Model):
    url: str = Field(pattern=r"^https?://")
    subject: str = Field(min_length=1)
    basic_auth_env: str | None = Field(
        None, description="Environment variable holding user:password for the registry.")
    basic_auth_file: str | None = Field(
        None, description="File holding user:password for the registry (a mounted Secret key).")


class ValueConfig(_Model):
    format: Literal["avro", "json", "protobuf", "raw"] = "avro"
    schema_registry: SchemaRegistryConfig | None = None
    message: str | None = Field(None, description=(
        "protobuf: the full name of the message the values are (package included); by "
        "default the first message of the subject's schema."))

    @model_validator(mode="after")
    def _registry_for_schemas(self) -> ValueConfig:
        if self.message and self.format != "protobuf":
            raise ValueError("message names a Protobuf message: it needs format 'protobuf'")
        if self.format != "raw" and self.schema_registry is None:
            raise ValueError(f"format {self.format!r} needs schemaRegistry (url and subject) for "
                             "the value schema; use format 'raw' to keep the bytes only")
        return self


class KeyConfig(_Model):
    """How the Kafka key is read: kept as bytes only (``raw``), or also decoded, through its
    own registry subject, into the ``key_fields`` column, which then identifies an upsert or
    cdc table's rows (across key schema versions, unlike the bytes)."""

    format: Literal["avro", "json", "raw"] = "raw"
    schema_registry: SchemaRegistryConfig | None = None

    @model_validator(mode="after")
    def _registry_for_schemas(self) -> KeyConfig:
        if self.format != "raw" and self.schema_registry is None:
            raise ValueError(f"format {self.format!r} needs schemaRegistry (url and subject) "
                             "for the key schema; use format 'raw' to keep the key's bytes only")
        return self

    @property
    def decoded(self) -> bool:
        return self.format != "raw"


class CatalogConfig(_Model):
    type: Literal["sql", "rest"] = "sql"
    name: str = Field("floe", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                      description="Catalog name; PyIceberg and Spark must use the same one.")
    uri: str | None = Field(None, description="jdbc:... for sql, http(s):// for rest")
    warehouse: str | None = None
    properties: dict[str, str] = Field(default_factory=dict)
    properties_from_env: dict[str, str] = Field(default_factory=dict)
    properties_dir: str | None = Field(
        None, description="Directory whose files are catalog properties (a mounted Secret).")

    @model_validator(mode="after")
    def _uri_for_type(self) -> CatalogConfig:
        if self.type == "sql" and not (self.uri or "").startswith("jdbc:"):
            raise ValueError("a sql catalog needs uri: jdbc:sqlite:/path or "
                             "jdbc:postgresql://host:port/db")
        if self.type == "sql" and not self.warehouse:
            raise ValueError("a sql catalog needs warehouse (file:///path or s3://bucket/prefix)")
        if self.type == "rest" and not self.uri:
            raise ValueError("a rest catalog needs uri")
        return self


ROW_LEVEL = ("upsert", "cdc")  # the modes whose records change rows (MERGE INTO)


class TableConfig(_Model):
    catalog: CatalogConfig
    identifier: str = Field(pattern=IDENTIFIER, description="namespace.table")
    partitioning: Literal["hour", "day", "month", "none"] = "day"
    properties: dict[str, str] = Field(default_factory=dict)
    mode: Literal["append", "upsert", "cdc"] = Field(
        "append", description="append: a row per record; upsert: a row per key, each record "
                              "replacing its key's row and a tombstone deleting it; cdc: "
                              "Debezium change events, the table holding the source's rows")
    key_columns: tuple[str, ...] = Field(
        (), max_length=MAX_KEY_COLUMNS,
        description="upsert, cdc: the value fields (dotted paths; for cdc, fields of the row) "
                    "that identify a row; none: the record's Kafka key does")

    @model_validator(mode="after")
    def _keys_for_upsert(self) -> TableConfig:
        import re

        if self.key_columns and self.mode not in ROW_LEVEL:
            raise ValueError("keyColumns apply to modes upsert and cdc only")
        bad = [c for c in self.key_columns if not re.match(FIELD_PATH, c)]
        if bad:
            raise ValueError(f"keyColumns must be value field paths such as id or "
                             f"customer.id: {', '.join(bad)}")
        if len(set(self.key_columns)) != len(self.key_columns):
            raise ValueError("keyColumns names a field twice")
        return self

    @property
    def namespace(self) -> str:
        return self.identifier.rsplit(".", 1)[0]

    @property
    def name(self) -> str:
        return self.identifier.rsplit(".", 1)[1]


MAX_ROUTES = 16


class RouteConfig(_Model):
    """Records whose value ``field`` (a dotted path in the value as its writer wrote it, for
    example Debezium's ``source.table``) is one of ``values`` go to ``table``; the first route
    that matches wins, and records no route matches go to the spec's own table."""

    field: str = Field(pattern=FIELD_PATH)
    values: tuple[str, ...] = Field(min_length=1, max_length=256)
    table: TableConfig
    subject: str | None = Field(
        None, min_length=1, description="Registry subject the table is made from (default: "
                                        "the value's subject)")
    key_subject: str | None = Field(
        None, min_length=1, description="Registry subject of the key, when the key is decoded "
                                        "(default: the key's subject)")


class CommitConfig(_Model):
    interval_seconds: int = Field(60, ge=1, le=86_400)
    max_records_per_commit: int = Field(500_000, ge=1)


class DeadLetterConfig(_Model):
    topic: str = Field(pattern=KAFKA_TOPIC)


class MaintenanceConfig(_Model):
    """Settings of the table maintenance actions (``python -m floe_sparkapp maintain``)."""

    target_file_size_bytes: int = Field(256 * 1024 * 1024, ge=1024 * 1024,
                                        description="compaction: size of the files it writes")
    min_input_files: int = Field(5, ge=2, description="compaction: rewrite a file group only "
                                                      "when it has at least this many files")
    retain_last: int = Field(100, ge=1, description="expire-snapshots: snapshots always kept")
    max_snapshot_age_seconds: int | None = Field(
        None, ge=60, description="expire-snapshots: older ones expire (none: those older than "
                                 "retain_last commit intervals, see JobConfig.snapshot_max_age)")
    expire_while_committing: bool = Field(
        True, description="the streaming job itself expires snapshots past the retention as "
                          "it commits, so that the table's metadata stays the same size")
    orphan_older_than_seconds: int = Field(3 * 86_400, ge=3_600,
                                           description="remove-orphans: only older files go")
    max_attempts: int = Field(5, ge=1, le=50,
                              description="attempts when a commit conflicts with the job's")


class JobConfig(_Model):
    writer: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$",
                        description="namespace/name of the KafkaIcebergTopic; stable across "
                                    "restarts and checkpoint loss")
    generation: int = Field(1, ge=1)
    kafka: KafkaConfig
    value: ValueConfig
    key: KeyConfig = KeyConfig()
    table: TableConfig
    commit: CommitConfig = CommitConfig()
    dead_letter: DeadLetterConfig | None = None
    checkpoint_location: str = Field(min_length=1)
    maintenance: MaintenanceConfig = MaintenanceConfig()
    schema_evolution: Literal["additive", "none"] = Field(
        "additive", description="additive: the job evolves the table for a writer's new fields "
                                "and wider types; none: the table keeps its schema (new fields "
                                "are left out, a value that needs a wider type is kept raw)")

    routes: tuple[RouteConfig, ...] = Field(
        (), max_length=MAX_ROUTES,
        description="Tables other than table for records by a value field; table takes the "
                    "records no route matches")

    @model_validator(mode="after")
    def _routes_apart(self) -> JobConfig:
        if self.routes and self.value.format == "raw":
            raise ValueError("routes pick a table by a value field, and a raw topic's value has "
                             "none: value.format must be avro, json or protobuf")
        seen = {self.table.identifier}
        for number, route in enumerate(self.routes):
            if route.table.identifier in seen:
                raise ValueError(f"routes[{number}].table.identifier {route.table.identifier} "
                                 "is already a table of this topic: each route needs a table "
                                 "of its own")
            seen.add(route.table.identifier)
            if route.table.catalog != self.table.catalog:
                raise ValueError(f"routes[{number}]: a route's table is in the topic's catalog")
        return self

    @model_validator(mode="after")
    def _keys_in_the_value(self) -> JobConfig:
        if self.table.mode == "cdc" and self.value.format not in ("avro", "json"):
            raise ValueError("table.mode cdc reads Debezium change events: value.format must "
                             "be avro or json")
        if self.table.key_columns and self.value.format == "raw":
            raise ValueError("table.keyColumns name value fields, and a raw topic's value has "
                             "none: leave keyColumns out to key rows by the Kafka key")
        return self

    def destinations(self) -> list[JobConfig]:
        """One config per table the topic lands in: the spec's table first (the records no
        route matches), then each route's, with the route's registry subject."""
        tables = [self]
        for route in self.routes:
            tables.append(self.model_copy(update={
                "table": route.table, "value": _with_subject(self.value, route.subject),
                "key": _with_subject(self.key, route.key_subject), "routes": ()}))
        return tables

    @property
    def snapshot_max_age_seconds(self) -> int:
        """Snapshots older than this may expire: ``maintenance.maxSnapshotAgeSeconds``, or by
        default ``retainLast`` commit intervals, so that a table keeps about ``retainLast``
        commits whatever its interval (and its metadata the same size), but never less than
        :data:`MIN_DEFAULT_SNAPSHOT_AGE_SECONDS`: at a 1 s interval a reader still has its
        snapshot for minutes.  (Maintenance holds what it works from: :mod:`.maintenance`.)"""
        return (self.maintenance.max_snapshot_age_seconds
                or max(self.maintenance.retain_last * self.commit.interval_seconds,
                       MIN_DEFAULT_SNAPSHOT_AGE_SECONDS))

    @property
    def consumer_group(self) -> str:
        return self.kafka.consumer_group or f"floe.{self.writer.replace('/', '.')}"

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True, indent=2)


def _with_subject(config: ValueConfig | KeyConfig, subject: str | None) -> Any:
    if not subject or config.schema_registry is None:
        return config
    return config.model_copy(update={"schema_registry": config.schema_registry.model_copy(
        update={"subject": subject})})


def _describe(error: ValidationError) -> str:
    lines = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"]) or "(top level)"
        message = problem["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {message}")
    return "; ".join(lines)


def parse_config(data: str | dict) -> JobConfig:
    try:
        if isinstance(data, str):
            return JobConfig.model_validate_json(data)
        return JobConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"invalid job config: {_describe(error)}") from None


def load_config(path: str | Path) -> JobConfig:
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError(f"cannot read job config {path}: {error.strerror}") from None
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"job config {path} is not JSON: {error}") from None
    return parse_config(text)


def kafka_client_settings(config: JobConfig) -> dict[str, str]:
    """Extra Kafka client settings: the plain ones and the secret ones (files, environment)."""
    return {**config.kafka.properties,
            **dir_values(config.kafka.properties_dir, "kafka.propertiesDir"),
            **env_values(config.kafka.properties_from_env, "kafka.propertiesFromEnv")}


def kafka_consumer(config: JobConfig, group_id: str, **settings: Any) -> Any:
    """A confluent-kafka consumer of ``group_id`` on the job's cluster, with its client
    settings (no subscription, no auto commit)."""
    from confluent_kafka import Consumer

    from .librdkafka import librdkafka_settings

    return Consumer({"bootstrap.servers": config.kafka.bootstrap_servers, "group.id": group_id,
                     "enable.auto.commit": False, **settings,
                     **librdkafka_settings(kafka_client_settings(config))})


def env_values(names: dict[str, str], what: str) -> dict[str, str]:
    """Resolves ``{setting: ENV_NAME}`` to ``{setting: value}``; a missing variable is an error."""
    missing = [env for env in names.values() if env not in os.environ]
    if missing:
        raise ConfigError(f"{what}: environment variable(s) {', '.join(sorted(missing))} not set")
    return {key: os.environ[env] for key, env in names.items()}


def dir_values(directory: str | None, what: str) -> dict[str, str]:
    """Settings from a directory of files (a mounted Secret: file name = key, content = value).

    Kubernetes' own bookkeeping entries (names starting with a dot) are skipped.
    """
    if not directory:
        return {}
    path = Path(directory)
    if not path.is_dir():
        raise ConfigError(f"{what}: directory {directory} does not exist")
    return {entry.name: entry.read_text().strip() for entry in sorted(path.iterdir())
            if not entry.name.startswith(".") and entry.is_file()}
