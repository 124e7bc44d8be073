"""What the planner reads: one KafkaIcebergTopic's world as frozen values (its children as
kopf's indexes saw them, its tables, the registry's latest version, Kafka's end offsets, the
visit's time), and the index entries kopf's watches keep. No client is imported here: the
planner (:mod:`plan`) can be imported, and tested, without Kubernetes, a catalog or Spark.
:mod:`observe` fills these values through the clients of :mod:`clients`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.types import StructType

from .appstate import error_of, state_of
from .clock import epoch
from .names import GROUP, KIND
from .render import APPLIED, Topic

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
    submitted_at: str | None = None  # spark-operator's last submission of it
    driver: str = ""  # the driver pod's name

    @property
    def started_ms(self) -> int | None:
        """When the application (its latest submission) began, if known."""
        marks = [epoch(t) for t in (self.created_at, self.submitted_at) if t]
        return int(max(marks) * 1000) if marks else None

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> App:
        meta = body.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        status = body.get("status") or {}
        return cls(
            name=meta["name"],
            state=state_of(body),
            error=error_of(body),
            attempts=int(status.get("executionAttempts", 0) or 0),
            fingerprint=annotations.get(FINGERPRINT),
            generation=annotations.get(GENERATION),
            terminated_at=status.get("terminationTime"),
            created_at=meta.get("creationTimestamp"),
            submitted_at=status.get("lastSubmissionAttemptTime") or None,
            driver=(status.get("driverInfo") or {}).get("podName") or f"{meta['name']}-driver",
        )


@dataclass(frozen=True)
class Children:
    """The objects floe keeps for a resource, as kopf's watches last saw them."""

    app: App | None = None
    other_apps: tuple[str, ...] = ()  # the resource's applications under an older name
    config_map: str | None = None  # the hash the job ConfigMap was applied with
    cron_jobs: Mapping[str, str] = field(default_factory=dict)  # name -> applied hash
    account: Account | None = None  # the driver's ServiceAccount; None: there is none
    account_seen: bool = False  # the ServiceAccounts are watched (else: account unknown)


def app_entry(
    namespace: str, labels: Mapping[str, str], body: Mapping[str, Any]
) -> dict[tuple[str, str], App]:
    """The SparkApplication index: by namespace and the resource's label."""
    topic = labels.get(f"{GROUP}/topic")
    return {(namespace, topic): App.of(body)} if topic else {}


@dataclass(frozen=True)
class Account:
    """A ServiceAccount a driver may run as, as the watch last saw it."""

    managed: bool = False  # made by floe for the resources that use it
    owners: tuple[str, ...] = ()  # the uids of the resources that own it


def account_entry(
    namespace: str, name: str, labels: Mapping[str, str], owners: Iterable[Mapping[str, Any]]
) -> dict[tuple[str, str], Account]:
    """The ServiceAccount index: by namespace and name."""
    managed = labels.get("app.kubernetes.io/managed-by") == "floe"
    return {
        (namespace, name): Account(
            managed, tuple(sorted(o.get("uid", "") for o in owners if o.get("kind") == KIND))
        )
    }


def config_map_entry(
    namespace: str, name: str, annotations: Mapping[str, str]
) -> dict[tuple[str, str], str]:
    """The job ConfigMap index: by namespace and name, the hash it was applied with."""
    return {(namespace, name): annotations.get(APPLIED, "")}


def cron_job_entry(
    namespace: str, name: str, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> dict[tuple[str, str], tuple[str, str]]:
    """The maintenance CronJob index: by namespace and the resource's label."""
    topic = labels.get(f"{GROUP}/topic")
    return {(namespace, topic): (name, annotations.get(APPLIED, ""))} if topic else {}


def children(
    topic: Topic,
    apps: Mapping[Any, Iterable[App]],
    config_maps: Mapping[Any, Iterable[str]],
    cron_jobs: Mapping[Any, Iterable[tuple[str, str]]],
    accounts: Mapping[Any, Iterable[Account]] | None = None,
    account_name: str = "",
) -> Children:
    """The resource's children from the indexes (kopf's ``Index`` or plain dicts), and the
    ServiceAccount ``account_name`` its driver runs as."""
    key = (topic.namespace, topic.label)
    found = list(apps.get(key, ()))
    app = next((a for a in found if a.name == topic.child_name), None)
    applied = list(config_maps.get((topic.namespace, f"{topic.child_name}-job"), ()))
    account = list((accounts or {}).get((topic.namespace, account_name), ()))
    return Children(
        app=app,
        other_apps=tuple(sorted(a.name for a in found if a.name != topic.child_name)),
        config_map=applied[0] if applied else None,
        cron_jobs=dict(cron_jobs.get(key, ())),
        account=account[0] if account else None,
        account_seen=accounts is not None,
    )


# --- the data side ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BranchView:
    """A table.branch table's branch and main, as publishing sees them."""

    name: str
    head_snapshot_id: int | None = None  # None: not made yet (the job's first commit makes it)
    main_snapshot_id: int | None = None
    unpublished: int = 0  # the job's commits on the branch that main does not have


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
    branch: BranchView | None = None  # with table.branch
    handle: Any = field(default=None, compare=False, repr=False)  # the PyIceberg table


@dataclass(frozen=True)
class RegistryView:
    """The registry subject's latest version, mapped to the table's value type."""

    version: int | None = None
    value: StructType | None = None
    error: str | None = None


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
    routes: Mapping[str, TableView] = field(default_factory=dict)  # the routes' tables
    owner_claims_table: bool = True  # the table's other writer still points at it
    schema_applied: str | None = None  # what this visit applied to the schema (an approval)
    job_activity: str | None = None  # what a stalled job's driver says it is doing
    # what this visit's publish did: (the PUBLISH annotation's value, main's snapshot after
    # it, why main was not moved or None)
    published: tuple[str, int | None, str | None] | None = None


@dataclass(frozen=True)
class Deletion:
    """What a visit of a resource being deleted saw: its job's SparkApplication and pods, and,
    when its deletionPolicy is Delete, the writer of each of its tables that exists."""

    now_ms: int
    since_ms: int  # the resource's deletionTimestamp
    app_state: str | None = None  # None: there is no SparkApplication
    app_created_ms: int | None = None
    pods: tuple[str, ...] = ()  # the job's pods that have not ended
    tables: Mapping[str, str | None] = field(default_factory=dict)  # identifier -> writer


def by_partition(offsets: Mapping[int, int]) -> dict[str, int]:
    """Offsets per partition as the status writes them: keyed by the partition's number as
    text, in partition order."""
    return {str(p): o for p, o in sorted(offsets.items())}


def as_status_offsets(committed: Mapping[int, int], latest: Mapping[int, int]) -> dict[str, Any]:
    lag = sum(max(0, end - committed.get(p, 0)) for p, end in latest.items())
    return {"committed": by_partition(committed), "latest": by_partition(latest), "lag": lag}
