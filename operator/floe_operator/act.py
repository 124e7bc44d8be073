"""Runs the planner's actions: on Kubernetes through :mod:`kube`, on the table through the
table contract of :mod:`floe_sparkapp`.  Each action returns the world as it left it, so the
status written after acting describes what is there, not what was there."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kopf

from floe_sparkapp.config import JobConfig
from floe_sparkapp.evolution import BreakingChange, apply_approved_breaking, apply_evolution
from floe_sparkapp.layout import LayoutMismatch, ensure_table
from floe_sparkapp.ledger import TableInUse, claim_table, hand_over_table, publish, retried

from . import clients, kube, observe
from .clients import Secrets
from .errors import retry_later
from .names import PUBLISH
from .plan import (
    Action,
    Apply,
    ApplyApproved,
    ClaimTable,
    CreateApp,
    CreateTable,
    DeleteApp,
    DeleteCronJob,
    DropTable,
    EnsureAccount,
    Event,
    EvolveTable,
    Log,
    PublishBranch,
    Wait,
)
from .render import Topic, spark_account
from .view import Account, App, World


def run(
    actions: tuple[Action, ...],
    world: World,
    topic: Topic,
    job: JobConfig,
    secrets: Secrets,
    body: Any,
    logger: Any,
) -> World:
    for action in actions:
        world = _run(action, world, topic, job, secrets, body, logger)
    return world


def run_deletion(actions: tuple[Action, ...], topic: Topic, job: JobConfig, logger: Any) -> None:
    """Runs a deletion's plan; a ``Wait`` has kopf visit the deletion again (its finalizer
    keeps the resource meanwhile)."""
    for action in actions:
        if isinstance(action, Wait):
            raise retry_later(action.why, delay=action.delay)
        if isinstance(action, Log):
            (logger.warning if action.warning else logger.info)(action.message)
        elif isinstance(action, DeleteApp):
            kube.delete_spark_application(topic.namespace, action.name)
        elif isinstance(action, DropTable):
            catalog = clients.catalogs.get(clients.catalog_config(job, Secrets.of(topic)))
            catalog.purge_table(action.identifier)
            logger.info("deletionPolicy Delete: dropped table %s", action.identifier)
        else:
            raise TypeError(f"no way to run {action!r} in a deletion")


def _table(world: World, table: Any, topic: Topic, job: JobConfig) -> World:
    seen = world.table.snapshot_id
    view = observe.table_view(table, topic, job, seen)
    return replace(world, table=replace(view, new_commits=world.table.new_commits))


def _run(
    action: Action,
    world: World,
    topic: Topic,
    job: JobConfig,
    secrets: Secrets,
    body: Any,
    logger: Any,
) -> World:
    if isinstance(action, Event):
        (logger.warning if action.warning else logger.info)(action.message)
        (kopf.warn if action.warning else kopf.info)(
            body, reason=action.reason, message=action.message
        )
        return world
    if isinstance(action, (CreateTable, ClaimTable, EvolveTable, ApplyApproved, PublishBranch)):
        try:
            if isinstance(action, PublishBranch):
                return _publish(action, world, topic, job, body, logger)
            return _run_on_table(action, world, topic, job, secrets, logger)
        except kopf.TemporaryError:
            raise
        except Exception as error:  # noqa: BLE001 - catalog unreachable: reported, retried
            return replace(world, table=replace(world.table, error=observe.error_text(error)))
    return _run_on_kubernetes(action, world, topic, body, logger)


def _run_on_table(
    action: Action, world: World, topic: Topic, job: JobConfig, secrets: Secrets, logger: Any
) -> World:
    if isinstance(action, CreateTable):
        return _create_table(world, topic, job, secrets, logger)
    if isinstance(action, ClaimTable):
        table = world.table.handle
        if action.taking_over_from:
            hand_over_table(table, topic.writer)
        else:
            try:
                claim_table(table, topic.writer)
            except TableInUse:
                table.refresh()  # another resource claimed it first: the next plan says so
        return _table(world, table, topic, job)
    if isinstance(action, EvolveTable):
        return _evolve(world, topic, job, logger)
    if isinstance(action, ApplyApproved):
        table, registry = world.table.handle, world.registry
        # planned only where the registry's value was read (plan.table.plan_schema)
        assert registry is not None and registry.value is not None
        try:
            renamed = apply_approved_breaking(table, registry.value, action.version)
        except BreakingChange as refused:
            logger.warning(
                "schema: approved version %s cannot be applied: %s", action.version, refused
            )
            table.refresh()
            return _table(world, table, topic, job)
        applied = (
            f"applied approved registry version {action.version}: "
            f"{'; '.join(renamed) or 'no column renamed'}"
        )
        logger.info("schema: %s", applied)
        return replace(_table(world, table, topic, job), schema_applied=applied)
    raise TypeError(f"no way to run {action!r}")


def _publish(
    action: PublishBranch, world: World, topic: Topic, job: JobConfig, body: Any, logger: Any
) -> World:
    """Publishes the table's branch (:func:`~floe_sparkapp.ledger.publish`), tried again on
    a fresh table while the job commits to the branch meanwhile (main does not move but by a
    publish or the user)."""
    table = world.table.handle
    branch = job.table.ref
    done = retried(table, lambda: publish(table, branch, action.snapshot_id), attempts=5)
    identifier = topic.spec.table.identifier
    if done.error:
        message = f"{PUBLISH}: {action.request}: main of {identifier} not moved: {done.error}"
    elif done.moved:
        message = (
            f"main of {identifier} published: at snapshot {done.snapshot_id} of branch "
            f"{branch} ({PUBLISH}: {action.request})"
        )
    else:
        message = (
            f"main of {identifier} has snapshot {action.snapshot_id or done.snapshot_id} "
            f"of branch {branch} already ({PUBLISH}: {action.request})"
        )
    (logger.warning if done.error else logger.info)(message)
    (kopf.warn if done.error else kopf.info)(
        body, reason="PublishRefused" if done.error else "Published", message=message
    )
    table.refresh()
    return replace(
        _table(world, table, topic, job), published=(action.request, done.snapshot_id, done.error)
    )


def _run_on_kubernetes(action: Action, world: World, topic: Topic, body: Any, logger: Any) -> World:
    namespace = topic.namespace
    if isinstance(action, Apply) and action.kind == "ConfigMap":
        kube.apply_config_map(action.body)
        return replace(world, children=replace(world.children, config_map=action.digest))
    if isinstance(action, Apply) and action.kind == "CronJob":
        kube.apply_cron_job(action.body)
        return replace(
            world,
            children=replace(
                world.children, cron_jobs={**world.children.cron_jobs, action.name: action.digest}
            ),
        )
    if isinstance(action, DeleteApp):
        kube.delete_spark_application(namespace, action.name)
        if action.why:
            logger.info("deleted SparkApplication %s (%s)", action.name, action.why)
        children = world.children
        if children.app is not None and children.app.name == action.name:
            children = replace(children, app=None)
        return replace(
            world,
            children=replace(
                children, other_apps=tuple(a for a in children.other_apps if a != action.name)
            ),
        )
    if isinstance(action, CreateApp):
        created = kube.create_spark_application(action.body)
        if created is not None:
            logger.info("created SparkApplication %s", action.name)
            if action.announce:
                kopf.info(
                    body, reason="JobCreated", message=f"created SparkApplication {action.name}"
                )
        else:  # there already (the index had not seen it yet)
            created = kube.get_spark_application(namespace, action.name)
        app = App.of(created) if created is not None else None
        return replace(world, children=replace(world.children, app=app))
    if isinstance(action, EnsureAccount):
        if kube.ensure_owned(*spark_account(topic, action.name, action.role)):
            logger.info(
                "made ServiceAccount %s and its RoleBinding (ClusterRole %s) for the Spark driver",
                action.name,
                action.role,
            )
        owners = tuple(
            sorted({*(world.children.account.owners if world.children.account else ()), topic.uid})
        )
        return replace(world, children=replace(world.children, account=Account(True, owners)))
    if isinstance(action, DeleteCronJob):
        kube.delete_cron_job(namespace, action.name)
        logger.info("maintenance: removed CronJob %s", action.name)
        return replace(
            world,
            children=replace(
                world.children,
                cron_jobs={n: h for n, h in world.children.cron_jobs.items() if n != action.name},
            ),
        )
    raise TypeError(f"no way to run {action!r}")


def _create_table(
    world: World, topic: Topic, job: JobConfig, secrets: Secrets, logger: Any
) -> World:
    value = world.registry.value if world.registry is not None else None
    try:
        catalog = clients.catalogs.get(clients.catalog_config(job, secrets))
        table, created = ensure_table(catalog, job.table, value, clients.key_struct(job, secrets))
    except LayoutMismatch as error:  # made by something else since the visit looked
        return replace(world, table=replace(world.table, exists=True, layout_error=str(error)))
    if created:
        logger.info("created table %s", job.table.identifier)
    try:
        claim_table(table, topic.writer)
    except TableInUse:
        table.refresh()  # created by another resource at the same time: the next plan says so
    return _table(world, table, topic, job)


def _evolve(world: World, topic: Topic, job: JobConfig, logger: Any) -> World:
    table, registry = world.table.handle, world.registry
    # planned only where the registry's value was read (plan.table.plan_schema)
    assert registry is not None and registry.value is not None
    try:
        evolution = apply_evolution(table, registry.value)
    except BreakingChange:  # the table changed since the visit looked: the next plan says so
        table.refresh()
        return _table(world, table, topic, job)
    if evolution.needs_update:
        logger.info(
            "evolved table %s: %s",
            job.table.identifier,
            "; ".join(str(c) for c in evolution.changes),
        )
    return _table(world, table, topic, job)


# --- an operation's actions --------------------------------------------------------------------


def run_operation(
    actions: tuple[Any, ...],
    world: Any,
    table: Any,
    topic: Topic | None,
    settings: Any,
    body: Any,
    logger: Any,
) -> None:
    """Runs an operation's plan (:func:`operation.plan`): a roll back of ``table`` (loaded by
    this visit: its commit holds only if ``main`` is still where the plan saw it), the
    restart of its topic's job, its Spark job's attempts."""
    from pyiceberg.exceptions import CommitFailedException

    from floe_sparkapp.contract import OperationRequest
    from floe_sparkapp.ledger import roll_back

    from .names import RESTART
    from .operation import DeleteRun, RestartJob, RollBack, StartRun
    from .render import operation_application

    namespace = body["metadata"]["namespace"]
    for action in actions:
        if isinstance(action, StartRun):
            assert topic is not None and world.spec is not None
            request = OperationRequest(
                uid=world.uid,
                name=world.name,
                type=world.spec.type,
                repair=world.spec.repair,
                backfill=world.spec.backfill,
                replay=world.spec.replay,
            )
            app = operation_application(
                topic,
                settings,
                world.name,
                world.uid,
                action.attempt,
                request.model_dump_json(by_alias=True, exclude_none=True),
            )
            if kube.create_spark_application(app) is not None:
                logger.info(
                    "created SparkApplication %s (attempt %d)",
                    app["metadata"]["name"],
                    action.attempt,
                )
                kopf.info(
                    body,
                    reason="JobCreated",
                    message=(
                        f"created SparkApplication {app['metadata']['name']} (attempt "
                        f"{action.attempt})"
                    ),
                )
            continue
        if isinstance(action, DeleteRun):
            kube.delete_spark_application(namespace, action.name)
            continue
        if isinstance(action, RollBack):
            try:
                roll_back(table, action.to_snapshot_id, world.uid, action.record)
            except CommitFailedException as moved:  # the job committed meanwhile: look again
                raise retry_later(
                    f"main of {action.table} moved while rolling it back ({moved}); trying again",
                    delay=1,
                ) from None
            message = (
                f"moved main of {action.table} back from snapshot "
                f"{action.from_snapshot_id} to {action.to_snapshot_id}"
            )
            logger.info(message)
            kopf.info(body, reason="RolledBack", message=message)
        elif isinstance(action, RestartJob):
            kube.annotate_topic(namespace, action.topic, RESTART, action.value)
            kopf.info(
                body,
                reason="JobRestarted",
                message=(
                    f"restarting the job of KafkaIcebergTopic {action.topic}: it goes on from the "
                    "table's offsets"
                ),
            )
        else:
            raise TypeError(f"no way to run {action!r} for an operation")
