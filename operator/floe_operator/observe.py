"""What the operator looks at to write the status: the table's commits and Kafka's offsets.

The operator opens the table with PyIceberg and Kafka with confluent-kafka, with the
credentials from the resource's Secret references (read into memory, never written anywhere).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from floe_sparkapp.catalog import load_catalog
from floe_sparkapp.commit import commits_since, last_commit
from floe_sparkapp.config import CatalogConfig
from floe_sparkapp.librdkafka import librdkafka_settings
from floe_sparkapp.maintenance import PROPERTY_PREFIX as MAINTENANCE_PROPERTY

from . import kube
from .render import Topic


@dataclass(frozen=True)
class TableState:
    exists: bool
    snapshot_id: int | None = None
    committed_at_ms: int | None = None
    schema_id: int | None = None
    offsets: dict[int, int] = field(default_factory=dict)
    vtts_ms: int | None = None
    maintenance_runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    new_commits: int = 0  # floe commits since the snapshot the previous visit saw
    dead_letter_error: str | None = None  # the newest commit's records the DLQ refused


def catalog_config(topic: Topic) -> CatalogConfig:
    spec = topic.spec.table.catalog
    properties = dict(spec.properties)
    if spec.secret_ref:
        properties.update(kube.secret_data(topic.namespace, spec.secret_ref.name))
    return CatalogConfig(type=spec.type, name=spec.name, uri=spec.uri, warehouse=spec.warehouse,
                         properties=properties)


def kafka_settings(topic: Topic) -> dict[str, str]:
    """The resource's Kafka client settings (Java client names, as the Spark job uses them),
    translated for the operator's librdkafka client."""
    settings = {"bootstrap.servers": topic.spec.kafka.bootstrap_servers,
                **topic.spec.kafka.properties}
    if topic.spec.kafka.auth_secret_ref:
        settings.update(kube.secret_data(topic.namespace, topic.spec.kafka.auth_secret_ref.name))
    return librdkafka_settings(settings)


def table_state(topic: Topic, catalog: CatalogConfig,
                seen_snapshot_id: int | None = None) -> TableState:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = load_catalog(catalog).load_table(topic.spec.table.identifier)
    except NoSuchTableError:
        return TableState(exists=False)
    committed = last_commit(table, topic.writer, topic.spec.kafka.topic)
    snapshot = table.snapshot_by_id(committed.snapshot_id) if committed.snapshot_id else None
    return TableState(
        exists=True, snapshot_id=committed.snapshot_id,
        committed_at_ms=snapshot.timestamp_ms if snapshot else None,
        schema_id=table.schema().schema_id, offsets=committed.offsets, vtts_ms=committed.vtts,
        maintenance_runs=maintenance_runs(table.properties),
        dead_letter_error=committed.dead_letter_error,
        new_commits=(commits_since(table, topic.writer, seen_snapshot_id,
                                   topic=topic.spec.kafka.topic)
                     if committed.snapshot_id != seen_snapshot_id else 0))


def maintenance_runs(properties: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The last outcome of each maintenance action, as the action recorded it on the table."""
    runs = {}
    for key, value in properties.items():
        if key.startswith(MAINTENANCE_PROPERTY):
            try:
                runs[key[len(MAINTENANCE_PROPERTY):]] = json.loads(value)
            except ValueError:
                continue
    return runs


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
            entry = (Consumer({**settings, "group.id": "floe-operator",
                               "enable.auto.commit": False}), threading.Lock())
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


def end_offsets(topic: Topic, timeout: float = 10) -> dict[int, int]:
    """The next offset Kafka would assign, per partition (the latest offsets)."""
    from confluent_kafka import TopicPartition

    settings = kafka_settings(topic)
    consumer, lock = _consumers.get(settings)
    try:
        with lock:
            metadata = consumer.list_topics(topic.spec.kafka.topic, timeout=timeout)
            partitions = metadata.topics[topic.spec.kafka.topic].partitions
            return {p: consumer.get_watermark_offsets(TopicPartition(topic.spec.kafka.topic, p),
                                                      timeout=timeout)[1]
                    for p in sorted(partitions)}
    except Exception:
        _consumers.drop(settings)  # a broken client is not reused
        raise


def as_status_offsets(committed: dict[int, int], latest: dict[int, int]) -> dict[str, Any]:
    lag = sum(max(0, end - committed.get(p, 0)) for p, end in latest.items())
    return {"committed": {str(p): o for p, o in sorted(committed.items())},
            "latest": {str(p): o for p, o in sorted(latest.items())}, "lag": lag}
