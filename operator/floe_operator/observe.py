"""What the operator sees of one KafkaIcebergTopic's world, as a frozen view: its children
(from kopf's indexes, no API request), its table, the registry's latest version and Kafka's
end offsets.  Nothing here acts; :mod:`plan` decides from the view and :mod:`act` acts.

The data side is opened with the settings of the rendered job config (the one contract the job
runs on too), completed with the referenced Secrets' values, which stay in memory.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from floe_sparkapp.avro_types import SchemaMappingError
from floe_sparkapp.catalog import load_catalog
from floe_sparkapp.commit import OWNER, commits_since, last_commit
from floe_sparkapp.config import CatalogConfig, JobConfig, SchemaRegistryConfig, TableConfig
from floe_sparkapp.evolution import value_struct
from floe_sparkapp.layout import LayoutMismatch, check_layout
from floe_sparkapp.librdkafka import librdkafka_settings
from floe_sparkapp.maintenance import PROPERTY_PREFIX as MAINTENANCE_PROPERTY
from floe_sparkapp.registry import Registry
from floe_sparkapp.schemas import table_struct
from pyiceberg.types import StructType

from . import kube
from .appstate import error_of, state_of
from .clock import now_ms
from .render import APPLIED, Topic
from .resource import GROUP, KIND

GENERATION = f"{GROUP}/generation"
FINGERPRINT = f"{GROUP}/job-fingerprint"


# --- children, from kopf's indexes -------------------------------------------------------------

@dataclass(frozen=True)
class App:
    """A SparkApplication as the planner needs it."""

    name: str
    state: str = ""
    error: str = ""
    attempts: int = 0
    fingerprint: str | None = None
    generation: str | None = None
    terminated_at: str | None = None
    created_at: str | None = None

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> App:
        meta = body.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        status = body.get("status") or {}
        return cls(name=meta["name"], state=state_of(body), error=error_of(body),
                   attempts=int(status.get("executionAttempts", 0) or 0),
                   fingerprint=annotations.get(FINGERPRINT),
                   generation=annotations.get(GENERATION),
                   terminated_at=status.get("terminationTime"),
                   created_at=meta.get("creationTimestamp"))


@dataclass(frozen=True)
class Children:
    """The objects floe keeps for a resource, as kopf's watches last saw them."""

    app: App | None = None
    other_apps: tuple[str, ...] = ()  # the resource's applications under an older name
    config_map: str | None = None  # the hash the job ConfigMap was applied with
    cron_jobs: Mapping[str, str] = field(default_factory=dict)  # name -> applied hash
    account: Account | None = None  # the driver's ServiceAccount; None: there is none
    account_seen: bool = False  # the ServiceAccounts are watched (else: account unknown)


def app_entry(namespace: str, labels: Mapping[str, str], body: Mapping[str, Any]
              ) -> dict[tuple[str, str], App]:
    """The SparkApplication index: by namespace and the resource's label."""
    topic = labels.get(f"{GROUP}/topic")
    return {(namespace, topic): App.of(body)} if topic else {}


@dataclass(frozen=True)
class Account:
    """A ServiceAccount a driver may run as, as the watch last saw it."""

    managed: bool = False  # made by floe for the resources that use it
    owners: tuple[str, ...] = ()  # the uids of the resources that own it


def account_entry(namespace: str, name: str, labels: Mapping[str, str],
                  owners: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Account]:
    """The ServiceAccount index: by namespace and name."""
    managed = labels.get("app.kubernetes.io/managed-by") == "floe"
    return {(namespace, name): Account(managed, tuple(sorted(
        o.get("uid", "") for o in owners if o.get("kind") == KIND)))}


def config_map_entry(namespace: str, name: str, annotations: Mapping[str, str]
                     ) -> dict[tuple[str, str], str]:
    """The job ConfigMap index: by namespace and name, the hash it was applied with."""
    return {(namespace, name): annotations.get(APPLIED, "")}


def cron_job_entry(namespace: str, name: str, labels: Mapping[str, str],
                   annotations: Mapping[str, str]) -> dict[tuple[str, str], tuple[str, str]]:
    """The maintenance CronJob index: by namespace and the resource's label."""
    topic = labels.get(f"{GROUP}/topic")
    return {(namespace, topic): (name, annotations.get(APPLIED, ""))} if topic else {}


def children(topic: Topic, apps: Mapping[Any, Iterable[App]],
             config_maps: Mapping[Any, Iterable[str]],
             cron_jobs: Mapping[Any, Iterable[tuple[str, str]]],
             accounts: Mapping[Any, Iterable[Account]] | None = None,
             account_name: str = "") -> Children:
    """The resource's children from the indexes (kopf's ``Index`` or plain dicts), and the
    ServiceAccount ``account_name`` its driver runs as."""
    key = (topic.namespace, topic.label)
    found = list(apps.get(key, ()))
    app = next((a for a in found if a.name == topic.child_name), None)
    applied = list(config_maps.get((topic.namespace, f"{topic.child_name}-job"), ()))
    account = list((accounts or {}).get((topic.namespace, account_name), ()))
    return Children(app=app,
                    other_apps=tuple(sorted(a.name for a in found if a.name != topic.child_name)),
                    config_map=applied[0] if applied else None,
                    cron_jobs=dict(cron_jobs.get(key, ())),
                    account=account[0] if account else None,
                    account_seen=accounts is not None)


# --- the data side, from the job config --------------------------------------------------------

@dataclass(frozen=True)
class Secrets:
    """The referenced Secrets' values (in memory only)."""

    kafka: Mapping[str, str] = field(default_factory=dict)
    catalog: Mapping[str, str] = field(default_factory=dict)
    registry: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, topic: Topic) -> Secrets:
        spec = topic.spec
        registry = spec.value.schema_registry
        refs = (spec.kafka.auth_secret_ref, spec.table.catalog.secret_ref,
                registry.auth_secret_ref if registry else None)
        kafka, catalog, registry_data = (
            kube.secret_data(topic.namespace, ref.name) if ref else {} for ref in refs)
        return cls(kafka, catalog, registry_data)


def catalog_config(job: JobConfig, secrets: Secrets) -> CatalogConfig:
    """The job's catalog, with the Secret's values in place of the directory it mounts."""
    catalog = job.table.catalog
    return catalog.model_copy(update={"properties": {**catalog.properties, **secrets.catalog},
                                      "properties_dir": None})


def table_config(job: JobConfig, secrets: Secrets) -> TableConfig:
    return job.table.model_copy(update={"catalog": catalog_config(job, secrets)})


def registry_config(job: JobConfig) -> SchemaRegistryConfig | None:
    """The registry the table's schema comes from; None for a raw table."""
    if job.value.format == "raw":
        return None
    registry = job.value.schema_registry
    return registry.model_copy(update={"basic_auth_file": None}) if registry else None


def kafka_settings(job: JobConfig, secrets: Secrets) -> dict[str, str]:
    """The job's Kafka client settings (Java client names) for the operator's librdkafka."""
    return librdkafka_settings({"bootstrap.servers": job.kafka.bootstrap_servers,
                                **job.kafka.properties, **secrets.kafka})


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
        key = json.dumps([a.model_dump_json() if hasattr(a, "model_dump_json") else a
                          for a in args])
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
        key = json.dumps([a.model_dump_json() if hasattr(a, "model_dump_json") else a
                          for a in args])
        with self.lock:
            self.kept.pop(key, None)


# The registry's latest version is asked again after this long: a new version shows within a
# refresh interval and this.
LATEST_VERSION_TTL_SECONDS = 5

catalogs = _Kept(load_catalog)
registries = _Kept(lambda config, user_info: Registry(
    config, user_info, latest_ttl_seconds=LATEST_VERSION_TTL_SECONDS))


# --- the table ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class TableView:
    """The table as the resource's job left it."""

    exists: bool = False
    error: str | None = None  # the catalog could not be read
    layout_error: str | None = None  # the table is not laid out the way floe writes
    owner: str | None = None  # the writer recorded on the table
    value: StructType | None = None  # the value column's type (None: a raw table)
    schema_id: int | None = None
    snapshot_id: int | None = None
    committed_at_ms: int | None = None
    offsets: Mapping[int, int] = field(default_factory=dict)
    vtts_ms: int | None = None
    maintenance_runs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    new_commits: int = 0  # floe commits since the snapshot the previous visit saw
    dead_letter_error: str | None = None  # the newest commit's records the DLQ refused
    handle: Any = field(default=None, compare=False, repr=False)  # the PyIceberg table


def table_view(table: Any, topic: Topic, job: JobConfig, seen_snapshot_id: int | None
               ) -> TableView:
    """What the loaded table says: its writer, schema and the job's newest commit."""
    try:
        check_layout(table, job.table, StructType() if job.value.format != "raw" else None,
                     StructType() if job.key.decoded else None)
        layout_error = None
    except LayoutMismatch as error:
        layout_error = str(error)
    committed = last_commit(table, topic.writer, topic.spec.kafka.topic)
    snapshot = table.snapshot_by_id(committed.snapshot_id) if committed.snapshot_id else None
    return TableView(
        exists=True, layout_error=layout_error, owner=table.properties.get(OWNER),
        value=value_struct(table) if layout_error is None else None,
        schema_id=table.schema().schema_id, snapshot_id=committed.snapshot_id,
        committed_at_ms=snapshot.timestamp_ms if snapshot else None,
        offsets=committed.offsets, vtts_ms=committed.vtts,
        maintenance_runs=maintenance_runs(table.properties),
        dead_letter_error=committed.dead_letter_error,
        new_commits=(commits_since(table, topic.writer, seen_snapshot_id,
                                   topic=topic.spec.kafka.topic)
                     if committed.snapshot_id != seen_snapshot_id else 0),
        handle=table)


def error_text(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"[:500]


def observe_table(topic: Topic, job: JobConfig, secrets: Secrets,
                  seen_snapshot_id: int | None) -> TableView:
    from pyiceberg.exceptions import NoSuchTableError

    config = catalog_config(job, secrets)
    try:
        table = catalogs.get(config).load_table(job.table.identifier)
    except NoSuchTableError:
        return TableView()
    except Exception as error:  # noqa: BLE001 - catalog unreachable: reported, retried
        catalogs.drop(config)
        return TableView(error=error_text(error))
    try:
        return table_view(table, topic, job, seen_snapshot_id)
    except Exception as error:  # noqa: BLE001 - reported on the status
        return TableView(exists=True, error=error_text(error), handle=table)


def maintenance_runs(properties: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The last outcome of each maintenance action, as the action recorded it on the table."""
    runs = {}
    for key, value in properties.items():
        if key.startswith(MAINTENANCE_PROPERTY):
            try:
                runs[key[len(MAINTENANCE_PROPERTY):]] = json.loads(value)
            except ValueError:
                continue
    return runs


# --- the registry ------------------------------------------------------------------------------

@dataclass(frozen=True)
class RegistryView:
    """The registry subject's latest version, mapped to the table's value type."""

    version: int | None = None
    value: StructType | None = None
    error: str | None = None


def observe_registry(job: JobConfig, secrets: Secrets) -> RegistryView | None:
    """None for a raw table (no registry)."""
    config = registry_config(job)
    if config is None:
        return None
    user_info = secrets.registry.get("basic.auth.user.info")
    try:
        latest = registries.get(config, user_info).latest()
    except Exception as error:  # noqa: BLE001 - registry unreachable: reported, retried
        registries.drop(config, user_info)
        return RegistryView(error=error_text(error))
    try:
        return RegistryView(latest.version,
                            table_struct(latest, job.table.mode, job.value.message).struct)
    except SchemaMappingError as error:
        return RegistryView(latest.version, error=str(error))


def key_struct(job: JobConfig, secrets: Secrets) -> StructType | None:
    """The key subject's latest version as the ``key_fields`` type (None: the key is raw)."""
    if not job.key.decoded or job.key.schema_registry is None:
        return None
    config = job.key.schema_registry.model_copy(update={"basic_auth_file": None})
    latest = registries.get(config, secrets.registry.get("basic.auth.user.info")).latest()
    return table_struct(latest).struct


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


def end_offsets(job: JobConfig, secrets: Secrets, timeout: float = 10) -> dict[int, int]:
    """The next offset Kafka would assign, per partition (the latest offsets)."""
    from confluent_kafka import TopicPartition

    settings = kafka_settings(job, secrets)
    consumer, lock = _consumers.get(settings)
    try:
        with lock:
            metadata = consumer.list_topics(job.kafka.topic, timeout=timeout)
            partitions = metadata.topics[job.kafka.topic].partitions
            return {p: consumer.get_watermark_offsets(TopicPartition(job.kafka.topic, p),
                                                      timeout=timeout)[1]
                    for p in sorted(partitions)}
    except Exception:
        _consumers.drop(settings)  # a broken client is not reused
        raise


# --- the whole view ----------------------------------------------------------------------------

@dataclass(frozen=True)
class World:
    """Everything one visit saw of a resource's world; the planner decides from this alone."""

    now_ms: int
    children: Children = Children()
    table: TableView = TableView()
    registry: RegistryView | None = None  # None: a raw table, no registry
    latest_offsets: Mapping[int, int] | None = None  # None: Kafka could not be asked
    kafka_error: str | None = None  # why Kafka could not be asked
    routes: tuple[TableView, ...] = ()  # the routes' tables, in the spec's order
    owner_claims_table: bool = True  # the table's other writer still points at it
    schema_applied: str | None = None  # what this visit applied to the schema (an approval)


def owner_claims(owner: str, identifier: str) -> bool:
    """Whether the resource recorded as a table's writer still exists and writes it."""
    namespace, _, name = owner.partition("/")
    try:
        other = kube.get_topic(namespace, name)
    except Exception:  # noqa: BLE001 - cannot tell (another namespace, say): assume it does
        return True
    spec = (other or {}).get("spec") or {}
    tables = [spec.get("table") or {}, *((r or {}).get("table") or {}
                                         for r in spec.get("routes") or [])]
    return other is not None and any(t.get("identifier") == identifier for t in tables)


def observe(topic: Topic, job: JobConfig, found: Children, previous: Mapping[str, Any],
            secrets: Secrets) -> World:
    seen = (previous.get("table") or {}).get("snapshotId")
    registry = observe_registry(job, secrets)
    table = observe_table(topic, job, secrets, int(seen) if seen else None)
    seen_routes = {entry.get("identifier"): entry.get("snapshotId")
                   for entry in previous.get("tables") or []}
    routes = tuple(observe_table(topic, route, secrets,
                                 int(seen_routes[route.table.identifier])
                                 if seen_routes.get(route.table.identifier) else None)
                   for route in job.destinations()[1:])
    claims = (owner_claims(table.owner, job.table.identifier)
              if table.owner not in (None, topic.writer) else True)
    latest, kafka_error = None, None
    try:
        latest = end_offsets(job, secrets)
    except Exception as error:  # noqa: BLE001 - Kafka unreachable: the status keeps its offsets
        kafka_error = error_text(error)
    return World(now_ms=now_ms(), children=found, table=table, registry=registry,
                 latest_offsets=latest, kafka_error=kafka_error, routes=routes,
                 owner_claims_table=claims)


def as_status_offsets(committed: Mapping[int, int], latest: Mapping[int, int]) -> dict[str, Any]:
    lag = sum(max(0, end - committed.get(p, 0)) for p, end in latest.items())
    return {"committed": {str(p): o for p, o in sorted(committed.items())},
            "latest": {str(p): o for p, o in sorted(latest.items())}, "lag": lag}
