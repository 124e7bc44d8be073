"""The job's config: what the operator renders into each SparkApplication's ConfigMap.

It is the resource's spec, the contract's own models (:mod:`.contract`: the same keys, the same
rules, the same messages as the CRD and the operator), and what the operator adds: the
writer's name, the generation, the checkpoint, and where the values of the Secrets the spec
references are found (mounted files, or environment variables). Secrets never appear in it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from .contract import CatalogSpec, SchemaRegistrySpec, TopicSpec, _Model

WRITER = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$"


class ConfigError(ValueError):
    """A job config that cannot work; the message names each bad field and why."""


class SecretSource(_Model):
    """Where the job finds the values of a Secret the spec references: the files of a directory
    (a mounted Secret: file name = key, content = value), environment variables (key: the
    variable's name), or both."""

    dir: str | None = None
    env: dict[str, str] = Field(default_factory=dict)

    def values(self, what: str) -> dict[str, str]:
        return {
            **dir_values(self.dir, f"secrets.{what}.dir"),
            **env_values(self.env, f"secrets.{what}.env"),
        }


class SecretSources(_Model):
    """The values of the spec's secret references: ``kafka`` (kafka.authSecretRef: Kafka client
    settings), ``catalog`` (table.catalog.secretRef: catalog properties) and ``registry``
    (value.schemaRegistry.authSecretRef: key ``basic.auth.user.info``)."""

    kafka: SecretSource = SecretSource()
    catalog: SecretSource = SecretSource()
    registry: SecretSource = SecretSource()


class JobConfig(TopicSpec):
    """What one job runs on: the resource's spec (the contract's models and rules, keys as the
    user wrote them) and what the operator adds: the writer's name, the spec's generation, the
    checkpoint and where the referenced Secrets' values are."""

    writer: str = Field(
        pattern=WRITER,
        description="namespace/name of the KafkaIcebergTopic; "
        "stable across restarts and checkpoint loss",
    )
    generation: int = Field(1, ge=1)
    checkpoint_location: str = Field(min_length=1)
    secrets: SecretSources = SecretSources()

    def destinations(self) -> list[JobConfig]:
        """One config per table the topic lands in (:meth:`TopicSpec.tables`): the spec's table
        first (the records no route matches), then each route's, with the route's registry
        subjects."""
        configs = [self]
        for route, table in zip(self.routes, self.tables()[1:]):
            value, key = self.value, self.key
            if route.subject and value.schema_registry is not None:
                value = value.model_copy(
                    update={
                        "schema_registry": value.schema_registry.model_copy(
                            update={"subject": route.subject}
                        )
                    }
                )
            if route.key_subject:
                key = key.model_copy(update={"subject": route.key_subject})
            configs.append(
                self.model_copy(update={"table": table, "value": value, "key": key, "routes": ()})
            )
        return configs

    def catalog(self) -> CatalogSpec:
        """The table's catalog with its Secret's values, as it is opened."""
        return self.table.catalog.with_secrets(self.secrets.catalog.values("catalog"))

    def registry_auth(self) -> str | None:
        """The registry's ``user:password``, when its Secret has one."""
        return self.secrets.registry.values("registry").get("basic.auth.user.info")

    def key_registry(self) -> SchemaRegistrySpec | None:
        """The key's subject in the value's registry; None when the key is kept raw."""
        if not self.key.decoded or self.value.schema_registry is None:
            return None
        return self.value.schema_registry.model_copy(update={"subject": self.key.subject})

    @property
    def consumer_group(self) -> str:
        return self.kafka.consumer_group or f"floe.{self.writer.replace('/', '.')}"

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True, indent=2)

    def routing(self) -> str:
        """What decides a record's tables, as canonical JSON: the routes (their fields, values,
        tables and subjects), fanOut, and the value's conversions (a routed field may be one)."""
        data = self.model_dump(by_alias=True, mode="json", exclude_none=True)
        return json.dumps(
            {
                "routes": data["routes"],
                "fanOut": self.fan_out,
                "coerce": data["value"].get("coerce", []),
                "columns": data["value"].get("columns", []),
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    def routing_digest(self) -> str:
        """The digest of :meth:`routing`, recorded with each commit of a routed topic."""
        return hashlib.sha256(self.routing().encode()).hexdigest()[:16]

    def recorded_routing(self) -> tuple[tuple[str, ...], str | None]:
        """What each commit of a routed topic records of its routing: the tables'
        identifiers and the digest of :meth:`routing`; nothing for a topic of one table."""
        if not self.routes:
            return (), None
        return tuple(d.table.identifier for d in self.destinations()), self.routing_digest()

    def routed_as(self, routing: str) -> JobConfig:
        """This job with another :meth:`routing` (one its tables recorded)."""
        recorded = json.loads(routing)
        data = self.model_dump(by_alias=True, mode="json", exclude_none=True)
        data.update(routes=recorded["routes"], fanOut=recorded["fanOut"])
        data["value"].update(coerce=recorded["coerce"], columns=recorded["columns"])
        return parse_config(data)


def _describe(error: ValidationError) -> str:
    lines = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"]) or "(top level)"
        message = problem["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {message}")
    return "; ".join(lines)


def parse_config(data: str | dict[str, Any]) -> JobConfig:
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
    """Extra Kafka client settings: the plain ones and the secret ones (its Secret's values)."""
    return {**config.kafka.properties, **config.secrets.kafka.values("kafka")}


def kafka_consumer(config: JobConfig, group_id: str, **settings: Any) -> Any:
    """A confluent-kafka consumer of ``group_id`` on the job's cluster, with its client
    settings (no subscription, no auto commit)."""
    from confluent_kafka import Consumer

    from .librdkafka import librdkafka_settings

    return Consumer(
        {
            "bootstrap.servers": config.kafka.bootstrap_servers,
            "group.id": group_id,
            "enable.auto.commit": False,
            **settings,
            **librdkafka_settings(kafka_client_settings(config)),
        }
    )


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
    return {
        entry.name: entry.read_text().strip()
        for entry in sorted(path.iterdir())
        if not entry.name.startswith(".") and entry.is_file()
    }
