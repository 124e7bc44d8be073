"""The clients the operator reaches a resource's data side with, and their caches, kept across
visits: the referenced Secrets' values, the catalogs (PyIceberg), the schema registries and
the Kafka clients. Used by :mod:`observe` and :mod:`act`; the planner never sees them.

They are opened with the settings of the rendered job config (the one contract the job runs on
too), completed with the Secrets' values, which stay in memory."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.types import StructType

from floe_sparkapp.catalog import load_catalog
from floe_sparkapp.config import JobConfig
from floe_sparkapp.contract import CatalogSpec, SchemaRegistrySpec
from floe_sparkapp.librdkafka import librdkafka_settings
from floe_sparkapp.registry import Registry
from floe_sparkapp.schemas import table_struct

from . import kube
from .render import Topic, secret_refs


@dataclass(frozen=True)
class Secrets:
    """The referenced Secrets' values (in memory only)."""

    kafka: Mapping[str, str] = field(default_factory=dict)
    catalog: Mapping[str, str] = field(default_factory=dict)
    registry: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, topic: Topic) -> Secrets:
        return cls(
            **{
                what: kube.secret_data(topic.namespace, ref.name) if ref else {}
                for what, (ref, _) in secret_refs(topic).items()
            }
        )


def catalog_config(job: JobConfig, secrets: Secrets) -> CatalogSpec:
    """The job's catalog, with its Secret's values (which the job reads from the mount)."""
    return job.table.catalog.with_secrets(dict(secrets.catalog))


def registry_config(job: JobConfig) -> SchemaRegistrySpec | None:
    """The registry the table's schema comes from; None for a raw table."""
    return job.value.schema_registry if job.value.format != "raw" else None


def kafka_settings(job: JobConfig, secrets: Secrets) -> dict[str, str]:
    """The job's Kafka client settings (Java client names) for the operator's librdkafka."""
    return librdkafka_settings(
        {"bootstrap.servers": job.kafka.bootstrap_servers, **job.kafka.properties, **secrets.kafka}
    )


class _Kept:
    """Clients kept across visits, one per distinct key, built on first use: opening a catalog
    builds a database engine (and checks its tables) or an HTTP session, a registry client an
    HTTP client. Resources usually share a few; at most ``size`` are kept, the least recently
    used dropped."""

    def __init__(self, build: Any, size: int = 1024):
        self.build = build
        self.size = size
        self.lock = threading.Lock()
        self.kept: OrderedDict[str, Any] = OrderedDict()

    def get(self, *args: Any) -> Any:
        key = json.dumps(
            [a.model_dump_json() if hasattr(a, "model_dump_json") else a for a in args]
        )
        with self.lock:
            if key in self.kept:
                self.kept.move_to_end(key)
                return self.kept[key]
        built = self.build(*args)
        with self.lock:
            self.kept[key] = built
            while len(self.kept) > self.size:
                self.kept.popitem(last=False)
        return built

    def drop(self, *args: Any) -> None:
        key = json.dumps(
            [a.model_dump_json() if hasattr(a, "model_dump_json") else a for a in args]
        )
        with self.lock:
            self.kept.pop(key, None)


# The registry's latest version is asked again after this long: a new version shows within a
# refresh interval and this.
LATEST_VERSION_TTL_SECONDS = 5

catalogs = _Kept(load_catalog)
registries = _Kept(
    lambda config, user_info: Registry(
        config, user_info, latest_ttl_seconds=LATEST_VERSION_TTL_SECONDS
    )
)


def key_struct(job: JobConfig, secrets: Secrets) -> StructType | None:
    """The key subject's latest version as the ``key_fields`` type (None: the key is raw)."""
    config = job.key_registry()
    if config is None:
        return None
    latest = registries.get(config, secrets.registry.get("basic.auth.user.info")).latest()
    return table_struct(latest, message=job.key.message).struct


# --- Kafka -------------------------------------------------------------------------------------


class _Consumers:
    """One Kafka client per distinct set of client settings, kept across visits: opening a
    client per visit costs a connection and a metadata round trip for every resource every
    refresh. At most ``size`` are kept (the least recently used is closed)."""

    def __init__(self, size: int = 16):
        self.size = size
        self.lock = threading.Lock()
        self.clients: OrderedDict[str, tuple[Any, threading.Lock]] = OrderedDict()

    def get(self, settings: dict[str, str]) -> tuple[Any, threading.Lock]:
        from confluent_kafka import Consumer

        key = json.dumps(settings, sort_keys=True)
        with self.lock:
            if key in self.clients:
                self.clients.move_to_end(key)
                return self.clients[key]
            entry = (
                Consumer({**settings, "group.id": "floe-operator", "enable.auto.commit": False}),
                threading.Lock(),
            )
            self.clients[key] = entry
            while len(self.clients) > self.size:
                old, old_lock = self.clients.popitem(last=False)[1]
                with old_lock:
                    old.close()
            return entry

    def drop(self, settings: dict[str, str]) -> None:
        with self.lock:
            entry = self.clients.pop(json.dumps(settings, sort_keys=True), None)
        if entry is not None:
            with entry[1]:
                entry[0].close()


_consumers = _Consumers()


def end_offsets(job: JobConfig, secrets: Secrets, timeout: float = 10) -> dict[int, int]:
    """The next offset Kafka would assign, per partition (the latest offsets)."""
    return {p: high for p, (_, high) in watermarks(job, secrets, timeout).items()}


def watermarks(job: JobConfig, secrets: Secrets, timeout: float = 10) -> dict[int, tuple[int, int]]:
    """Kafka's earliest offset it still holds and the next it would assign, per partition."""
    from confluent_kafka import TopicPartition

    settings = kafka_settings(job, secrets)
    consumer, lock = _consumers.get(settings)
    try:
        with lock:
            metadata = consumer.list_topics(job.kafka.topic, timeout=timeout)
            partitions = metadata.topics[job.kafka.topic].partitions
            return {
                p: tuple(
                    consumer.get_watermark_offsets(
                        TopicPartition(job.kafka.topic, p), timeout=timeout
                    )
                )
                for p in sorted(partitions)
            }
    except Exception:
        _consumers.drop(settings)  # a broken client is not reused
        raise


def group_offsets(
    job: JobConfig, secrets: Secrets, group: str, topic: str, timeout: float = 10
) -> dict[int, int]:
    """The offsets consumer group ``group`` has committed on ``topic``, per partition (a
    replay's progress: the next source offset of each partition)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    settings: dict[str, str | int | float | bool] = {**kafka_settings(job, secrets)}
    admin = AdminClient(settings)
    found = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=timeout
    )
    listed = found[group].result(timeout=timeout)
    return {
        tp.partition: tp.offset
        for tp in listed.topic_partitions
        if tp.topic == topic and tp.offset >= 0
    }
