"""What the operator sees of one KafkaIcebergTopic's world: it fills the frozen values of
:mod:`view` (the children from kopf's indexes, no API request; the table, the registry's latest
version and Kafka's end offsets through :mod:`clients`). Nothing here acts; :mod:`plan` decides
from the view and :mod:`act` acts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from pyiceberg.types import StructType

from floe_sparkapp.avro_types import SchemaMappingError
from floe_sparkapp.config import JobConfig
from floe_sparkapp.contract import BackfillSpec, RepairSpec, ReplaySpec
from floe_sparkapp.evolution import value_struct
from floe_sparkapp.layout import LayoutMismatch, check_layout
from floe_sparkapp.ledger import (
    MAIN,
    OWNER,
    ancestors,
    commits_since,
    last_commit,
    operation_commits,
    operation_record,
    torn,
)
from floe_sparkapp.maintenance import PROPERTY_PREFIX as MAINTENANCE_PROPERTY
from floe_sparkapp.schemaless import configured_value
from floe_sparkapp.schemas import table_struct

from . import kube, operation, render, report
from .appstate import error_of, state_of
from .clients import (
    Secrets,
    catalog_config,
    catalogs,
    end_offsets,
    registries,
    registry_config,
    watermarks,
)
from .clock import epoch, iso, now_ms
from .names import GROUP, JOB_METRICS_PORT
from .render import Topic
from .resource import KafkaIcebergTopicSpec
from .settings import OperatorSettings
from .view import App, BranchView, Children, Deletion, RegistryView, TableView, World

# --- the table ---------------------------------------------------------------------------------


def table_view(table: Any, topic: Topic, job: JobConfig, seen_snapshot_id: int | None) -> TableView:
    """What the loaded table says: its writer, schema and the job's newest commit."""
    try:
        check_layout(
            table,
            job.table,
            StructType() if job.value.format != "raw" else None,
            StructType() if job.key.decoded else None,
        )
        layout_error = None
    except LayoutMismatch as error:
        layout_error = str(error)
    ref = job.table.ref
    committed = last_commit(table, topic.writer, topic.spec.kafka.topic, ref=ref)
    snapshot = table.snapshot_by_id(committed.snapshot_id) if committed.snapshot_id else None
    return TableView(
        exists=True,
        layout_error=layout_error,
        owner=table.properties.get(OWNER),
        value=value_struct(table) if layout_error is None else None,
        schema_id=table.schema().schema_id,
        snapshot_id=committed.snapshot_id,
        committed_at_ms=snapshot.timestamp_ms if snapshot else None,
        offsets=committed.offsets,
        vtts_ms=committed.vtts,
        maintenance_runs=maintenance_runs(table.properties),
        dead_letter_error=committed.dead_letter_error,
        new_commits=(
            commits_since(
                table, topic.writer, seen_snapshot_id, topic=topic.spec.kafka.topic, ref=ref
            )
            if committed.snapshot_id != seen_snapshot_id
            else 0
        ),
        branch=branch_view(table, topic, ref) if ref != MAIN else None,
        handle=table,
    )


def branch_view(table: Any, topic: Topic, ref: str) -> BranchView:
    """The branch the job lands in and main, as publishing sees them."""
    main = table.current_snapshot()
    main_id = None if main is None else main.snapshot_id
    made = table.refs().get(ref)
    if made is None:
        return BranchView(ref, main_snapshot_id=main_id)
    return BranchView(
        ref,
        made.snapshot_id,
        main_id,
        commits_since(table, topic.writer, main_id, topic=topic.spec.kafka.topic, ref=ref),
    )


def error_text(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"[:500]


def observe_table(
    topic: Topic, job: JobConfig, secrets: Secrets, seen_snapshot_id: int | None
) -> TableView:
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
                runs[key[len(MAINTENANCE_PROPERTY) :]] = json.loads(value)
            except ValueError:
                continue
    return runs


# --- the registry ------------------------------------------------------------------------------


def observe_registry(job: JobConfig, secrets: Secrets) -> RegistryView | None:
    """None for a raw table (no registry), or plain JSON whose columns are only inferred;
    plain JSON's declared columns without a version."""
    config = registry_config(job)
    if config is None:
        declared = configured_value(job.value) if job.value.format == "json" else None
        return RegistryView(value=declared) if declared is not None else None
    user_info = secrets.registry.get("basic.auth.user.info")
    try:
        latest = registries.get(config, user_info).latest()
    except Exception as error:  # noqa: BLE001 - registry unreachable: reported, retried
        registries.drop(config, user_info)
        return RegistryView(error=error_text(error))
    try:
        return RegistryView(
            latest.version,
            table_struct(latest, job.table.mode, job.value.message, job.value.conversions).struct,
        )
    except SchemaMappingError as error:
        return RegistryView(latest.version, error=str(error))


def owner_claims(owner: str, identifier: str) -> bool:
    """Whether the resource recorded as a table's writer still exists and writes it."""
    namespace, _, name = owner.partition("/")
    try:
        other = kube.get_topic(namespace, name)
    except Exception:  # noqa: BLE001 - cannot tell (another namespace, say): assume it does
        return True
    if other is None:
        return False
    try:
        spec = KafkaIcebergTopicSpec.model_validate(other.get("spec") or {})
    except ValidationError:  # an invalid spec writes nothing, but may once it is fixed
        return True
    return any(table.identifier == identifier for table in spec.tables())


def observe(
    topic: Topic, job: JobConfig, found: Children, previous: Mapping[str, Any], secrets: Secrets
) -> World:
    seen = (previous.get("table") or {}).get("snapshotId")
    registry = observe_registry(job, secrets)
    table = observe_table(topic, job, secrets, int(seen) if seen else None)
    seen_routes = {
        entry.get("identifier"): entry.get("snapshotId") for entry in previous.get("tables") or []
    }
    routes = {
        route.table.identifier: observe_table(
            topic,
            route,
            secrets,
            int(seen_routes[route.table.identifier])
            if seen_routes.get(route.table.identifier)
            else None,
        )
        for route in job.destinations()[1:]
    }
    claims = (
        owner_claims(table.owner, job.table.identifier)
        if table.owner not in (None, topic.writer)
        else True
    )
    latest, kafka_error = None, None
    try:
        latest = end_offsets(job, secrets)
    except Exception as error:  # noqa: BLE001 - Kafka unreachable: the status keeps its offsets
        kafka_error = error_text(error)
    return World(
        now_ms=now_ms(),
        children=found,
        table=table,
        registry=registry,
        latest_offsets=latest,
        kafka_error=kafka_error,
        routes=routes,
        owner_claims_table=claims,
    )


# --- what a job's driver is doing ---------------------------------------------------------------

# The states of the job's floe_job_activity metric, as a status message says them.
ACTIVITIES = {
    "starting": "starting: its first micro-batch has not begun",
    "waiting": "between micro-batches: Spark plans the next one from Kafka's offsets",
    "reading": "reading micro-batch {batch} from Kafka",
    "loading_table": "loading the table from the catalog for micro-batch {batch}",
    "sending_dead_letters": "sending micro-batch {batch}'s undecodable records to the "
    "dead-letter topic",
    "writing": "writing micro-batch {batch}'s data files",
    "committing": "committing micro-batch {batch} to the catalog",
    "expiring": "expiring old snapshots after micro-batch {batch}",
    "retrying": "waiting to try micro-batch {batch} again: a neighbour did not answer",
}


def job_activity(namespace: str, app: App) -> str:
    """What the driver says it is doing (its floe_job_activity metric), and since when."""
    try:
        text = kube.job_metrics(namespace, app.driver, JOB_METRICS_PORT)
    except Exception as error:  # noqa: BLE001 - the stall is reported all the same
        # Its status and reason only: the same words at each visit (no status write each time).
        said = (
            f"{error.status} {error.reason}"
            if isinstance(error, ApiException)
            else f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        )
        return f"not saying what it does: its metrics could not be read ({said})"
    found = report.samples(text)
    value = {name: v for name, labels, v in found if not labels}
    state = next(
        (
            labels["floe_job_activity"]
            for name, labels, v in found
            if name == "floe_job_activity" and v == 1
        ),
        None,
    )
    if state is None:
        return "not saying what it does (no floe_job_activity in its metrics)"
    batch = int(value.get("floe_job_batch_id", 0))
    doing = ACTIVITIES.get(state, state).format(batch=batch)
    since = value.get("floe_job_activity_since_timestamp_seconds")
    return f"{doing} (since {iso(since)})" if since else doing


# --- an operation ------------------------------------------------------------------------------


def observe_operation(
    body: Mapping[str, Any], settings: OperatorSettings
) -> tuple[operation.OperationWorld, Any, Topic | None]:
    """An operation's world (its topic and table as they are now, its Spark job), the table it
    works on (PyIceberg's, loaded for this visit; None where there is none) and its topic."""
    meta = body["metadata"]
    world = operation.OperationWorld(
        now_ms=now_ms(),
        name=meta["name"],
        uid=meta.get("uid", ""),
        generation=int(meta.get("generation", 1)),
        status=dict(body.get("status") or {}),
    )
    try:
        spec = operation.OperationSpec.model_validate(body.get("spec") or {})
    except ValidationError as error:
        return replace(world, invalid=str(error)), None, None
    world = replace(world, spec=spec)
    found = kube.get_topic(meta["namespace"], spec.topic)
    if found is None:
        return world, None, None
    topic = Topic.from_body(dict(found))
    job = render.desired(topic, settings).job
    tables = tuple(t.identifier for t in topic.spec.tables())
    conditions = (found.get("status") or {}).get("conditions") or []
    data_loss = next(
        (
            (c.get("message") or "", c["lastTransitionTime"])
            for c in conditions
            if c.get("type") == "JobRunning"
            and c.get("status") == "False"
            and c.get("reason") == "DataLoss"
            and c.get("lastTransitionTime")
        ),
        None,
    )
    world = replace(
        world,
        topic_found=True,
        topic_restart=topic.restart,
        topic_suspended=topic.spec.suspend,
        topic_data_loss=data_loss,
        tables=tables,
    )
    identifier = spec.table or tables[0]
    destination = next((d for d in job.destinations() if d.table.identifier == identifier), None)
    if destination is None:
        return world, None, topic
    batch = spec.type in operation.BATCHES
    if batch:
        section = spec.section  # a Repair's, a Backfill's or a Replay's (the model checks)
        assert isinstance(section, (RepairSpec, BackfillSpec, ReplaySpec))
        world = replace(
            world,
            refused=section.refused(topic.spec, destination.table),
            run=_newest_run(meta["namespace"], world.uid),
        )
    config = catalog_config(destination, Secrets.of(topic))
    into = spec.backfill.into if spec.backfill is not None else None
    try:
        table = catalogs.get(config).load_table(into or identifier)
    except Exception as error:  # noqa: BLE001 - reported on the status, tried again
        if into is not None and type(error).__name__ == "NoSuchTableError":
            return world, None, topic  # the backfill makes it
        catalogs.drop(config)
        return replace(world, table_error=error_text(error)), None, topic
    writer, kafka_topic = topic.writer, topic.spec.kafka.topic
    world = replace(world, record=operation_record(table, world.uid))
    if spec.replay is not None and world.record is None and world.run is not None:
        world = replace(world, replayed=_replayed(destination, topic, world.uid, spec.replay.topic))
    ref = destination.table.ref
    if batch:
        return replace(world, progress=operation_commits(table, world.uid, ref)), table, topic
    if ref != MAIN:
        return (
            replace(
                world,
                refused=(
                    f"table {identifier} lands in branch {ref} (table.branch), and a roll back "
                    f"moves main: roll main back with Iceberg's rollback_to_snapshot procedure, or "
                    f"drop the branch to land again, into a new one made from main, what main lacks"
                ),
            ),
            table,
            topic,
        )
    ancestry = tuple(
        operation.Snapshot(s.snapshot_id, s.timestamp_ms, torn(s)) for s in ancestors(table)
    )
    world = replace(
        world, ancestry=ancestry, offsets=last_commit(table, writer, kafka_topic).offsets
    )
    if spec.rollback is not None and world.record is None:
        found_target = operation.target(spec.rollback, ancestry)
        if not isinstance(found_target, str):
            at = last_commit(table, writer, kafka_topic, at=found_target.snapshot_id).offsets
            world = replace(world, offsets_at={found_target.snapshot_id: at})
            try:  # whether Kafka still holds what main would land again
                world = replace(
                    world,
                    kafka_holds={
                        p: low for p, (low, _) in watermarks(job, Secrets.of(topic)).items()
                    },
                )
            except Exception as error:  # noqa: BLE001 - reported; asked again next visit
                world = replace(world, kafka_error=error_text(error))
    return world, table, topic


def _replayed(job: JobConfig, topic: Topic, uid: str, target: str) -> dict[int, int]:
    """How far a replay has got (its consumer group's offsets on the target topic), or nothing
    when Kafka does not say."""
    from .clients import group_offsets

    try:
        return group_offsets(job, Secrets.of(topic), f"floe-replay-{uid}", target)
    except Exception:  # noqa: BLE001 - progress only: the next visit asks again
        return {}


def _newest_run(namespace: str, uid: str) -> operation.Run | None:
    """The operation's newest attempt's SparkApplication."""
    runs = [
        operation.Run(
            app["metadata"]["name"],
            int((app["metadata"].get("labels") or {}).get(f"{GROUP}/attempt", 0)),
            state_of(app),
            error_of(app),
        )
        for app in kube.spark_applications(namespace, f"{GROUP}/operation-uid={uid}")
    ]
    return max(runs, key=lambda r: r.attempt) if runs else None


def observe_deletion(topic: Topic, job: JobConfig, since_ms: int) -> Deletion:
    """What a deletion needs to see: the job's SparkApplication and pods, and the tables'
    writers when the deletionPolicy drops them."""
    app = kube.get_spark_application(topic.namespace, topic.child_name)
    tables: dict[str, str | None] = {}
    if topic.spec.table.deletion_policy == "Delete":
        from pyiceberg.exceptions import NoSuchTableError

        catalog = catalogs.get(catalog_config(job, Secrets.of(topic)))
        for identifier in (table.identifier for table in topic.spec.tables()):
            try:
                tables[identifier] = catalog.load_table(identifier).properties.get(OWNER)
            except NoSuchTableError:
                continue
    return Deletion(
        now_ms=now_ms(),
        since_ms=since_ms,
        app_state=state_of(app) if app is not None else None,
        app_created_ms=(
            int(epoch(app["metadata"]["creationTimestamp"]) * 1000)
            if app is not None and app["metadata"].get("creationTimestamp")
            else None
        ),
        pods=tuple(kube.running_pods(topic.namespace, topic.child_name)),
        tables=tables,
    )
