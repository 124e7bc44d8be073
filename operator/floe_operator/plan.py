"""What to do about one KafkaIcebergTopic, decided from what was observed: a pure function.

``plan(topic, world, previous, settings, approved)`` returns the actions that bring the world
to the spec and the status that describes it; :mod:`act` runs the actions, :mod:`observe`
builds the world (the values of :mod:`view`).  Nothing here talks to Kubernetes, the catalog,
the registry or Kafka, or reads the clock: the visit's time is the world's.

The decisions, in order:

* **table**: created when absent (from the registry's latest version); claimed for this
  resource when it has no writer; taken over when its writer is gone; refused (TableInUse)
  when another resource writes it; refused (LayoutMismatch) when floe did not make it;
* **schema**: the one comparison the job uses too (:func:`floe_sparkapp.evolution.plan_evolution`):
  an additive version evolves the table, a breaking one waits for its approval annotation;
* **job**: which spec changes restart it is declared by the job fingerprint (the job config
  without the maintenance settings, and the SparkApplication); an application that ended is
  failed over with backoff, one that stopped on an exit code only the user can resolve is not;
* **maintenance**: one CronJob per enabled action, those of disabled actions removed;
* **a stall**: a running job that commits nothing for several intervals while Kafka has records
  for it turns Ready False (Stalled), saying what its driver does;
* **the last stable spec**: the newest generation whose job landed is kept on the status; with
  ``spec.autoRollback``, a newer one whose job is not healthy within the window runs it instead;
* **deletion** (``plan_delete``): the job removed and waited for, then the tables dropped when
  the deletionPolicy says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from floe_sparkapp import exit_codes
from floe_sparkapp.evolution import plan_evolution

from . import redact, render
from .appstate import ENDED, FAILED, SUBMITTING, AppState
from .clock import epoch, iso
from .names import APPROVAL, GROUP, RESTART
from .render import Topic
from .settings import OperatorSettings
from .status import Observation, status
from .view import App, Deletion, TableView, World, as_status_offsets, by_partition

# --- actions -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateTable:
    """Create the table (from the registry's latest value type) and claim it."""


@dataclass(frozen=True)
class ClaimTable:
    """Record this resource as the table's writer; ``taking_over_from``: a writer that is gone."""

    taking_over_from: str | None = None


@dataclass(frozen=True)
class EvolveTable:
    """Apply the registry's latest version (additive changes)."""

    version: int | None
    changes: tuple[str, ...]


@dataclass(frozen=True)
class ApplyApproved:
    """Apply a breaking version its annotation approved."""

    version: int


@dataclass(frozen=True)
class PublishBranch:
    """Move main to the table.branch's snapshot ``snapshot_id`` (None: its head), for the
    PUBLISH annotation's value ``request``."""

    request: str
    snapshot_id: int | None = None


@dataclass(frozen=True)
class Apply:
    """Create or replace a child kept as rendered (the job ConfigMap, a maintenance CronJob);
    ``digest`` is the hash it is stamped with."""

    kind: str
    name: str
    digest: str
    body: dict[str, Any] = field(compare=False)


@dataclass(frozen=True)
class CreateApp:
    body: dict[str, Any] = field(compare=False)
    name: str = ""
    announce: bool = True  # a JobCreated Event (not for a failover, which has its own)


@dataclass(frozen=True)
class EnsureAccount:
    """Make the driver's ServiceAccount and its RoleBinding to ClusterRole ``role``, or add
    this resource to their owners."""

    name: str
    role: str


@dataclass(frozen=True)
class DeleteApp:
    name: str
    why: str = ""  # for the operator's log


@dataclass(frozen=True)
class DeleteCronJob:
    name: str


@dataclass(frozen=True)
class Event:
    """An Event on the resource (and a line in the operator's log)."""

    warning: bool
    reason: str
    message: str


@dataclass(frozen=True)
class DropTable:
    """Purge a table (deletionPolicy Delete)."""

    identifier: str


@dataclass(frozen=True)
class Wait:
    """Come back in ``delay`` seconds (a deletion waiting for the job to stop)."""

    why: str
    delay: float = 2


@dataclass(frozen=True)
class Log:
    """A line in the operator's log (the resource is going: no Event)."""

    message: str
    warning: bool = False


Action = (
    CreateTable
    | ClaimTable
    | EvolveTable
    | ApplyApproved
    | PublishBranch
    | Apply
    | CreateApp
    | DeleteApp
    | DeleteCronJob
    | EnsureAccount
    | Event
    | DropTable
    | Wait
    | Log
)


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    status: dict[str, Any]
    new_commits: int = 0
    lag: int | None = None  # the lag this visit saw (the status may show an older one)


# --- failover policy ---------------------------------------------------------------------------


def failover_delay(failovers: int, first: float = 10, most: float = 300) -> float:
    """Seconds to wait before recreating a failed job: ``first`` (10 s), doubling with each
    failover in a row, at most ``most`` (5 minutes)."""
    doubling: int = 2**failovers  # (an int's power is typed Any: a negative one is a float)
    return min(most, first * doubling)


# The job's exit codes for what only the user can resolve.
STOPPED_FOR_THE_USER = {
    exit_codes.DATA_LOSS: (
        "DataLoss",
        "Kafka no longer has records the table has not got "
        "(retention deleted them), or the topic is not the one "
        "the table's offsets were committed from (deleted and "
        "created again, or kafka.bootstrapServers names another "
        "cluster)",
    ),
    exit_codes.TABLE_IN_USE: ("TableInUse", "another resource writes the table"),
}


def stopped_for_the_user(app: App, namespace: str) -> tuple[str, str] | None:
    """(reason, message) when the driver exited with a code that recreating the job would only
    repeat; None otherwise."""
    found = re.search(r"ExitCode: (\d+)", app.error)
    if found is None or int(found.group(1)) not in STOPPED_FOR_THE_USER:
        return None
    reason, what = STOPPED_FOR_THE_USER[int(found.group(1))]
    return reason, (
        f"the job stopped (exit code {found.group(1)}): {what}; `kubectl logs -n "
        f"{namespace} {app.name}-driver` says what and where. floe does not restart "
        f"it: once resolved, delete SparkApplication {app.name} (or change the spec) "
        "and it is created again; for a topic created again, create the resource "
        "again with another table.identifier"
    )


@dataclass(frozen=True)
class Failovers:
    """The failover record kept on the status (``status.sparkApplication``)."""

    count: int = 0
    last_time: str | None = None
    last_failure: str | None = None

    @classmethod
    def of(cls, previous: Mapping[str, Any]) -> Failovers:
        record = previous.get("sparkApplication") or {}
        return cls(
            int(record.get("failovers", 0) or 0),
            record.get("lastFailoverTime"),
            record.get("lastFailure"),
        )


def _healthy_since_failover(
    app: App, record: Failovers, now_s: float, settings: OperatorSettings
) -> bool:
    """Whether the job a failover recreated has run long enough without dying again (the
    spark-operator did not have to submit its driver again) for the count to start over."""
    if not record.count or not record.last_time:
        return False
    return (
        app.state == AppState.RUNNING
        and app.attempts <= 1
        and now_s - epoch(record.last_time) >= settings.failover_reset_seconds
    )


# --- the planner -------------------------------------------------------------------------------


@dataclass
class _Decisions:
    """What the planner decided so far: the actions, and what the status will say."""

    actions: list[Action] = field(default_factory=list)
    observed: dict[str, Any] = field(default_factory=dict)

    def act(self, *actions: Action) -> None:
        self.actions.extend(actions)

    def say(self, **fields: Any) -> None:
        self.observed.update(fields)


def plan(
    topic: Topic,
    world: World,
    previous: Mapping[str, Any],
    settings: OperatorSettings,
    approved: str | None = None,
) -> Plan:
    """The actions and the status for one visit of ``topic``, whose world is ``world``."""
    previous = dict(previous or {})
    spec = topic.spec
    decided = _Decisions()
    decided.say(
        generation=topic.generation,
        suspended=spec.suspend,
        now_ms=world.now_ms,
        dead_letter_topic=spec.dead_letter.topic if spec.dead_letter else None,
    )
    in_use = _plan_table(topic, world, decided)
    if not in_use:
        _plan_schema(topic, world, decided, approved)
    if in_use or world.table.layout_error:  # no job and no maintenance on another's table
        decided.say(app_name=topic.child_name)
        if world.children.app is not None:
            decided.act(DeleteApp(topic.child_name))
    else:
        _plan_job(topic, world, previous, settings, decided)
        _plan_maintenance(topic, world, settings, decided)
        _progress(topic, world, decided, previous)
        _plan_stall(topic, world, settings, decided)
        _plan_rollback(topic, world, previous, settings, decided)
        _plan_publish(topic, world, previous, decided)
    observed = Observation(**decided.observed)
    return Plan(
        tuple(decided.actions),
        redact.redact_all(status(observed, previous)),
        world.table.new_commits if world.table.exists else 0,
        (observed.offsets or {}).get("lag"),
    )


def invalid(topic_generation: int, message: str, previous: Mapping[str, Any], now_ms: int) -> Plan:
    """The plan for a spec that cannot be rendered: nothing is done, the status says why."""
    return Plan(
        (),
        status(Observation(topic_generation, invalid_spec=message, now_ms=now_ms), dict(previous)),
    )


def _plan_table(topic: Topic, world: World, decided: _Decisions) -> bool:
    """Table actions; True when another resource writes the table."""
    table, registry = world.table, world.registry
    if table.error:
        decided.say(table_error=table.error)
    if registry is not None and registry.error:
        decided.say(registry_error=registry.error)
    if table.layout_error:
        decided.say(layout_error=table.layout_error)
    if registry is not None:
        decided.say(registry_version=registry.version)
    if not table.exists:
        if not table.error and not (registry and registry.value is None):
            decided.act(CreateTable())
        return False
    if table.error or table.layout_error or table.owner == topic.writer:
        return False  # a table that could not be read is not claimed either
    if table.owner is None:
        decided.act(ClaimTable())
        return False
    if world.owner_claims_table:
        decided.say(
            table_in_use=(
                f"table {topic.spec.table.identifier} is written by KafkaIcebergTopic "
                f"{table.owner}; one table has one writer: point spec.table.identifier at another "
                f"table, or delete {table.owner} (with deletionPolicy Retain its table stays) and "
                "this resource takes it over"
            )
        )
        return True
    decided.act(
        ClaimTable(taking_over_from=table.owner),
        Event(
            False,
            "TableAdopted",
            (
                f"table {topic.spec.table.identifier} was written by {table.owner}, which is gone: "
                f"this resource takes it over and goes on from the offsets committed for Kafka "
                f"topic {topic.spec.kafka.topic}"
            ),
        ),
    )
    return False


def _plan_schema(topic: Topic, world: World, decided: _Decisions, approved: str | None) -> None:
    table, registry = world.table, world.registry
    if (
        registry is None
        or registry.value is None
        or not table.exists
        or table.error
        or table.layout_error
        or topic.spec.schema_evolution.mode != "additive"
    ):
        return
    version = registry.version
    source = f"registry version {version}" if version is not None else "the declared value.columns"
    if world.schema_applied:
        decided.say(schema_in_sync=True, schema_message=world.schema_applied)
        return
    evolution = plan_evolution(table.value, registry.value) if table.value is not None else None
    if evolution is not None and evolution.is_additive:
        decided.say(schema_in_sync=True, schema_message=f"table matches {source}")
        if evolution.needs_update:
            decided.act(EvolveTable(version, tuple(str(c) for c in evolution.changes)))
        return
    if approved is not None and approved == str(version) and version is not None:
        decided.act(ApplyApproved(version))
        return
    changes = (
        tuple(str(c) for c in evolution.breaking)
        if evolution is not None
        else ("value: the table has no value column (raw)",)
    )
    reason = "breaking schema change: " + "; ".join(changes)
    until = (
        f' until the annotation {APPROVAL}: "{version}" approves the change'
        if version is not None
        else ": declare the column's type as the table has it"
    )
    decided.say(
        schema_in_sync=False,
        schema_change=(version, changes) if version is not None else None,
        schema_message=(
            f"{source}: {reason}; the table keeps its schema and those "
            f"records land in value_raw{until}"
        ),
    )


def _plan_job(
    topic: Topic,
    world: World,
    previous: Mapping[str, Any],
    settings: OperatorSettings,
    decided: _Decisions,
) -> None:
    name = topic.child_name
    app = world.children.app
    decided.say(app_name=name)
    if topic.spec.suspend:
        if app is not None:
            decided.act(DeleteApp(name))
        return
    rendered = render.desired(topic, settings)
    if world.children.config_map != rendered.config_map_digest:
        decided.act(
            Apply(
                "ConfigMap",
                rendered.config_map["metadata"]["name"],
                rendered.config_map_digest,
                rendered.config_map,
            )
        )
    desired = rendered.spark_application
    if app is not None and app.fingerprint != rendered.fingerprint:
        why = (
            f"generation {topic.generation} is rolled back: generation "
            f"{topic.rolled_back_to}'s spec runs"
            if topic.rolled_back_to is not None
            else f"spec changed (generation {app.generation} -> {topic.generation})"
            if app.generation != str(topic.generation)
            else f"restart asked for ({RESTART}: {topic.restart})"
            if topic.restart
            else "the operator's settings changed"
        )
        decided.act(Event(False, "JobRestarted", f"{why}: restarting the job"), DeleteApp(name))
        app = None
    record = Failovers.of(previous)
    # A running job's account is looked after too where the operator makes them (this resource
    # among its owners); otherwise only a job about to be created needs it.
    needed = app is None or settings.spark_account_role is not None
    account_ready = not needed or _plan_account(topic, world, settings, decided)
    if app is None:
        if account_ready:  # else the job waits for it, the status saying what is missing
            # A long name's child used to be its name cut at 63 characters: that one would be
            # a second writer beside the new one.
            decided.act(
                *(DeleteApp(stale, "named by an older floe") for stale in world.children.other_apps)
            )
            decided.act(CreateApp(desired, name))
    elif app.state in FAILED and (stopped := stopped_for_the_user(app, topic.namespace)):
        decided.say(job_stopped=stopped)  # failing over would fail the same way
        record = replace(record, last_failure=None)
    elif app.state in ENDED:
        record = _plan_failover(topic, app, record, world, desired, decided, settings)
    elif _healthy_since_failover(app, record, world.now_ms / 1000, settings):
        record = replace(record, count=0)
        decided.act(
            Event(
                False,
                "FailoversReset",
                f"job healthy for {settings.failover_reset_seconds:g}s since its last "
                "failover: failover count reset",
            )
        )
    if app is not None:
        decided.say(app_state=app.state, app_error=app.error or None, app_attempts=app.attempts)
        _plan_unseen(topic, app, world, settings, decided)
    decided.say(
        failovers=record.count,
        last_failover_time=record.last_time,
        last_failure=record.last_failure,
    )


def _plan_account(
    topic: Topic, world: World, settings: OperatorSettings, decided: _Decisions
) -> bool:
    """Whether the driver's ServiceAccount is there (or made by this visit's actions) so the
    job can be created. With FLOE_SPARK_ACCOUNT_ROLE the operator makes the default account
    where it is missing; otherwise a missing one is named on the status, and the job waits for
    it instead of failing at every submission."""
    children = world.children
    if not children.account_seen:
        return True  # not watched: spark-operator's submission says
    own = topic.spec.spark.service_account
    name = own or settings.spark_service_account
    found = children.account
    if settings.spark_account_role and not own:
        if found is None or (found.managed and topic.uid not in found.owners):
            decided.act(EnsureAccount(name, settings.spark_account_role))
        return True
    if found is not None:
        return True
    namespace = topic.namespace
    message = (
        f"ServiceAccount {name} not found in namespace {namespace}: the Spark driver runs "
        "as it, with a Role to manage its executor pods, their services and ConfigMaps "
        f"there. Let the chart make both (helm upgrade <release> charts/floe-operator "
        f"--reuse-values --set 'watch.namespaces={{<the namespaces it has>,{namespace}}}'"
        ", or leave watch.namespaces empty and the operator makes them), or name an "
        "account that has such a Role in spec.spark.serviceAccount"
    )
    decided.say(account_missing=message)  # the status's change posts its Warning Event
    return False


def _plan_unseen(
    topic: Topic, app: App, world: World, settings: OperatorSettings, decided: _Decisions
) -> None:
    """An application spark-operator has not taken up (no state) after FLOE_SUBMIT_WAIT_SECONDS:
    it serves only its own ``spark.jobNamespaces``, or it is not running. The status says so
    and what to run (its change posts a Warning Event)."""
    if app.state or not app.created_at:
        return
    waited = world.now_ms / 1000 - epoch(app.created_at)
    if waited < settings.submit_wait_seconds:
        return
    namespace = topic.namespace
    message = (
        f"spark-operator has not taken up SparkApplication {app.name} in {waited:.0f}s: "
        f"it runs applications only in the namespaces of its spark.jobNamespaces, and "
        f"{namespace} may not be one (add it: helm upgrade spark-operator "
        "spark-operator/spark-operator -n spark-operator --reuse-values --set "
        f"'spark.jobNamespaces={{<the namespaces it has>,{namespace}}}'), or it is not "
        "running (kubectl get pods -A -l app.kubernetes.io/name=spark-operator)"
    )
    decided.say(app_unseen=message)


def _plan_failover(
    topic: Topic,
    app: App,
    record: Failovers,
    world: World,
    desired: dict[str, Any],
    decided: _Decisions,
    settings: OperatorSettings,
) -> Failovers:
    """Recreates an application that ended (failed, or completed though a streaming job never
    should), with exponential backoff."""
    since = max([epoch(t) for t in (record.last_time, app.terminated_at) if t] or [0])
    if world.now_ms / 1000 - since < failover_delay(
        record.count, settings.failover_backoff_seconds, settings.failover_backoff_max_seconds
    ):
        return replace(record, last_failure=None)  # the status shows the application's error
    error = app.error
    if app.state == AppState.COMPLETED:
        error = error or "the driver exited 0, but a streaming job never ends by itself"
    message = (
        f"job {'ended' if app.state == AppState.COMPLETED else 'failed'} ({app.state}); "
        f"recreating it (failover {record.count + 1}): "
        f"{error.splitlines()[0][:300] if error else 'no message'}"
    )
    decided.act(
        Event(True, "Failover", redact.redact(message)),
        DeleteApp(app.name),
        CreateApp(desired, topic.child_name, announce=False),
    )
    return Failovers(record.count + 1, iso(world.now_ms / 1000), error[:1000])


def _plan_maintenance(
    topic: Topic, world: World, settings: OperatorSettings, decided: _Decisions
) -> None:
    """One CronJob per enabled action; those of disabled actions are removed."""
    desired = [body for body, _ in render.desired(topic, settings).cron_jobs]
    existing = world.children.cron_jobs
    for body, digest in render.desired(topic, settings).cron_jobs:
        if existing.get(body["metadata"]["name"]) != digest:
            decided.act(Apply("CronJob", body["metadata"]["name"], digest, body))
    wanted = {c["metadata"]["name"] for c in desired}
    decided.act(*(DeleteCronJob(name) for name in sorted(existing) if name not in wanted))
    decided.say(
        maintenance={
            c["metadata"]["labels"][f"{GROUP}/action"]: {
                "schedule": c["spec"]["schedule"],
                "cronJob": c["metadata"]["name"],
            }
            for c in desired
        }
    )


def _progress(topic: Topic, world: World, decided: _Decisions, previous: Mapping[str, Any]) -> None:
    """The tables' progress and the lag.  A table the catalog could not show leaves the status
    as it was (it is merge-patched): its offsets are not known to be gone, and a lag counted
    from none would say the whole topic is behind."""
    table = world.table
    decided.say(table_exists=table.exists)
    if table.exists:
        decided.say(
            snapshot_id=table.snapshot_id,
            committed_at_ms=table.committed_at_ms,
            schema_id=table.schema_id,
            maintenance_runs=dict(table.maintenance_runs),
            dead_letter_error=table.dead_letter_error,
        )
    identifiers = [t.identifier for t in topic.spec.tables()]
    views = [table, *(world.routes.get(i, TableView()) for i in identifiers[1:])]
    known = not any(view.error for view in views)
    offsets, vtts = table.offsets, table.vtts_ms
    if len(views) > 1:  # the printer columns show the table furthest behind
        before = {entry.get("identifier"): entry for entry in previous.get("tables") or []}
        decided.say(
            tables=[
                {**before.get(identifier, {"identifier": identifier}), "error": view.error[:500]}
                if view.error
                else _table_entry(identifier, view, world)
                for identifier, view in zip(identifiers, views)
            ]
        )
        written = [v for v in views if v.exists and v.offsets]
        offsets = _lowest(views)
        stamps = [v.vtts_ms for v in written if v.vtts_ms is not None]
        vtts = min(stamps) if stamps else None
    if known:
        decided.say(vtts_ms=vtts)
    shown: dict[str, Any] = {}
    if world.latest_offsets is not None:
        if known:
            shown = as_status_offsets(offsets, world.latest_offsets)
        if (previous.get("offsets") or {}).get("error"):
            shown["error"] = None  # removed (the status is merge-patched)
    elif world.kafka_error:  # latest and lag stay as they were, and say so
        if known:
            shown["committed"] = by_partition(offsets)
        shown["error"] = (
            f"Kafka could not be asked for the latest offsets, so latest and lag "
            f"are as of an earlier visit: {world.kafka_error}"
        )[:500]
    if shown:
        decided.say(offsets=shown)


def _lowest(views: list[TableView]) -> dict[int, int]:
    """Per partition, the lowest offset the tables that hold any have committed (what the
    status shows for a routed topic)."""
    written = [view for view in views if view.exists and view.offsets]
    partitions = set().union(*(view.offsets for view in written))
    return {p: min(view.offsets.get(p, 0) for view in written) for p in partitions}


def _lag(world: World) -> int | None:
    """The records in Kafka past the resource's tables' offsets (the status's lag), if Kafka
    and every table could be read."""
    views = [world.table, *world.routes.values()]
    if world.latest_offsets is None or any(view.error for view in views):
        return None
    lag: int | None = as_status_offsets(_lowest(views), world.latest_offsets)["lag"]
    return lag


def healthy(topic: Topic, world: World, settings: OperatorSettings) -> bool:
    """Whether the job this spec renders runs and lands: it has committed since it started, or
    has nothing to land. (A spec change that renders the same job, as a change back to the
    spec that runs, keeps the job and is as healthy as it is.)"""
    app, table = world.children.app, world.table
    if (
        app is None
        or app.state != AppState.RUNNING
        or app.started_ms is None
        or app.fingerprint != render.desired(topic, settings).fingerprint
        or not table.exists
    ):
        return False
    committed = table.committed_at_ms is not None and table.committed_at_ms >= app.started_ms
    return committed or _lag(world) == 0


def _plan_publish(
    topic: Topic, world: World, previous: Mapping[str, Any], decided: _Decisions
) -> None:
    """With ``table.branch``: the branch and main on the status, and a new value of the
    PUBLISH annotation published once (main fast-forwarded to the snapshot it names, or to the
    branch's head: :class:`PublishBranch`, whose Event says how it went), its outcome kept on
    the status until the next."""
    branch = world.table.branch
    if topic.spec.table.branch is None or branch is None:
        return
    shown: dict[str, Any] = {"name": branch.name, "unpublishedCommits": branch.unpublished}
    for key, value in (
        ("snapshotId", branch.head_snapshot_id),
        ("mainSnapshotId", branch.main_snapshot_id),
    ):
        if value is not None:
            shown[key] = str(value)
    last = (previous.get("branch") or {}).get("lastPublish")
    request = topic.publish
    if world.published is not None and world.published[0] == request:
        _, main_id, error = world.published
        last = {
            "request": request,
            "at": iso(world.now_ms / 1000),
            **({"snapshotId": str(main_id)} if main_id is not None else {}),
            **({"error": error} if error else {}),
        }
    elif request is not None and request != (last or {}).get("request"):
        decided.act(PublishBranch(request, int(request) if request.isdigit() else None))
    if last:
        shown["lastPublish"] = last
    decided.say(branch=shown)


def _plan_rollback(
    topic: Topic,
    world: World,
    previous: Mapping[str, Any],
    settings: OperatorSettings,
    decided: _Decisions,
) -> None:
    """The last stable spec (the newest generation whose job became :func:`healthy`), and
    ``spec.autoRollback``: a changed spec whose job is not healthy within the window runs the
    stable spec instead (:meth:`Topic.running`), until the spec changes again."""
    now = world.now_ms
    if topic.rolled_back_to is not None:
        rolled = dict(previous.get("autoRollback") or {})
        decided.say(
            auto_rollback=rolled,
            rolled_back=(
                f"generation {topic.generation} did not become healthy within "
                f"{topic.spec.auto_rollback.window}: generation {topic.rolled_back_to}'s spec runs "
                f"instead ({rolled.get('reason') or 'no error'}); change the spec to try again"
            ),
        )
        return
    stable = previous.get("stable") or {}
    if healthy(topic, world, settings):
        if stable.get("generation") != topic.generation:
            decided.say(
                stable={
                    "generation": topic.generation,
                    "spec": topic.spec.model_dump(mode="json", by_alias=True),
                    "since": iso(now / 1000),
                }
            )
        return
    policy = topic.spec.auto_rollback
    if not policy.enabled or not stable or stable.get("generation") == topic.generation:
        return
    seen = previous.get("specChangedAt")
    since = (
        epoch(seen) * 1000
        if seen and previous.get("observedGeneration") == topic.generation
        else now
    )
    if now - since < policy.window_seconds * 1000:
        return
    app = world.children.app
    reason = (
        Failovers.of(previous).last_failure
        or (app.error if app else "")
        or (f"SparkApplication {app.name} is {app.state or 'not taken up'}" if app else "no job")
    )[:500]
    rolled = {
        "failedGeneration": topic.generation,
        "restoredGeneration": stable["generation"],
        "at": iso(now / 1000),
        "reason": reason,
    }
    decided.say(auto_rollback=rolled)
    decided.act(
        Event(
            True,
            "RolledBack",
            (
                f"generation {topic.generation}'s job did not become healthy within "
                f"{policy.window} ({reason.splitlines()[0][:300] if reason else 'no error'}): "
                f"rolling back to "
                f"generation {stable['generation']}'s spec; the resource keeps its spec as written"
            ),
        )
    )


def stall_seconds(topic: Topic, settings: OperatorSettings) -> float:
    """How long a running job may go without a commit before it is called stalled."""
    return max(
        settings.stall_intervals * topic.spec.commit.interval_seconds, settings.stall_min_seconds
    )


def stalled_since(topic: Topic, world: World, settings: OperatorSettings) -> int | None:
    """When the job last made progress (epoch ms: its newest commit to any of the resource's
    tables, or its application's start), if that is longer ago than :func:`stall_seconds`
    while it runs and Kafka has records past the tables' offsets; None otherwise."""
    app = world.children.app
    if topic.spec.suspend or app is None or app.state != AppState.RUNNING or not world.table.exists:
        return None
    lag = _lag(world)
    if lag is None or lag <= 0:
        return None
    written = [view for view in (world.table, *world.routes.values()) if view.exists]
    marks = [view.committed_at_ms for view in written if view.committed_at_ms is not None]
    if app.started_ms is not None:
        marks.append(app.started_ms)
    if not marks:
        return None
    since = max(marks)
    return since if world.now_ms - since > stall_seconds(topic, settings) * 1000 else None


def _plan_stall(
    topic: Topic, world: World, settings: OperatorSettings, decided: _Decisions
) -> None:
    """A stall is loud: Ready turns False (Stalled) with what the job's driver says it does
    (:attr:`World.job_activity`), so a commit path that hangs without failing is seen."""
    since = stalled_since(topic, world, settings)
    if since is None:
        return
    app = world.children.app
    assert app is not None
    activity = world.job_activity or "doing something its metrics did not say"
    decided.say(
        stalled=(
            f"the job has committed nothing since {iso(since / 1000)}, more than "
            f"{stall_seconds(topic, settings):g} s ago, though Kafka has records past the table's "
            f"offsets; the job is "
            f"{activity}. Its log says more: kubectl logs -n {topic.namespace} {app.driver}"
        )
    )


def _table_entry(identifier: str, view: TableView, world: World) -> dict[str, Any]:
    """One table's line in ``status.tables``: its snapshot, offsets, lag and freshness."""
    entry: dict[str, Any] = {"identifier": identifier, "exists": view.exists}
    if view.layout_error:
        entry["error"] = view.layout_error[:500]
    if view.snapshot_id is not None:
        entry["snapshotId"] = str(view.snapshot_id)
    if view.committed_at_ms is not None:
        entry["committedAt"] = iso(view.committed_at_ms / 1000)
    if view.exists:
        entry["committed"] = by_partition(view.offsets)
    if world.latest_offsets is not None and view.exists:
        entry["lag"] = as_status_offsets(view.offsets, world.latest_offsets)["lag"]
    if view.vtts_ms is not None:
        entry["landedThrough"] = iso(view.vtts_ms / 1000)
    return entry


# --- the deletion ------------------------------------------------------------------------------


def plan_delete(topic: Topic, seen: Deletion, settings: OperatorSettings) -> tuple[Action, ...]:
    """What a deletion does next: the job removed, waited for until its pods are gone (a running
    driver could still write to the table), then the tables dropped when the policy says so.
    A ``Wait`` ends the plan (the resource stays, kopf's finalizer, and is visited again).

    A job spark-operator may still be submitting is waited for before it is removed: removed
    then, its driver would start after the deletion and write to (or create again) the table.
    Past FLOE_DELETION_WAIT_SECONDS the deletion goes on without what it waited for."""
    waited = (seen.now_ms - seen.since_ms) / 1000
    patient = waited < settings.deletion_wait_seconds
    actions: list[Action] = []
    if seen.app_state is not None:
        never_taken = (
            seen.app_state in ("", AppState.NEW)
            and seen.app_created_ms is not None
            and (seen.now_ms - seen.app_created_ms) / 1000 > settings.submit_wait_seconds
        )
        if seen.app_state in SUBMITTING and not never_taken:
            state = seen.app_state or "new"
            if patient:
                return (
                    Wait(
                        f"waiting for spark-operator to finish submitting SparkApplication "
                        f"{topic.child_name} ({state}) before deleting it"
                    ),
                )
            actions.append(
                Log(
                    f"SparkApplication {topic.child_name} is still {state} "
                    f"{waited:.0f} s after the deletion; deleting it "
                    "(FLOE_DELETION_WAIT_SECONDS)",
                    warning=True,
                )
            )
        actions.append(DeleteApp(topic.child_name, why="the resource is deleted"))
    if seen.pods:
        pods = ", ".join(seen.pods)
        if patient:
            return (*actions, Wait(f"waiting for the job's pods to stop: {pods}"))
        actions.append(
            Log(
                f"the job's pods {pods} still run {waited:.0f} s after the deletion; "
                "going on without them (FLOE_DELETION_WAIT_SECONDS)",
                warning=True,
            )
        )
    if topic.spec.table.deletion_policy != "Delete":
        return tuple(actions)
    for identifier, writer in seen.tables.items():
        if writer not in (None, topic.writer):  # refused as a second writer: not its table
            actions.append(
                Log(f"deletionPolicy Delete: table {identifier} is written by {writer}, kept")
            )
        else:
            actions.append(DropTable(identifier))
    return tuple(actions)
