"""kopf handlers: thin adapters from events on KafkaIcebergTopics to reconcile().

Run: ``python -m floe_operator`` (or ``kopf run -m floe_operator.handlers``).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import time
from typing import Any

import kopf
from pydantic import ValidationError

from floe_sparkapp import exit_codes
from floe_sparkapp.avro_types import AvroMappingError, avro_to_iceberg
from floe_sparkapp.catalog import load_catalog
from floe_sparkapp.commit import OWNER, TableInUse, claim_table, hand_over_table
from floe_sparkapp.config import CatalogConfig, SchemaRegistryConfig, TableConfig
from floe_sparkapp.evolution import BreakingChange, apply_approved_breaking, apply_evolution
from floe_sparkapp.layout import LayoutMismatch, ensure_table
from floe_sparkapp.registry import Registry

from . import kube, metrics, observe, redact, render
from .appstate import ENDED, FAILED, AppState, error_of, state_of
from .clock import epoch, now_iso, now_ms
from .errors import retry_later
from .resource import GROUP, PLURAL, VERSION
from .settings import OperatorSettings
from .status import Observation, status

FINALIZER = f"{GROUP}/finalizer"
APPROVAL = f"{GROUP}/approve-schema-version"
RESOURCE = (GROUP, VERSION, PLURAL)


@functools.lru_cache(maxsize=1)
def settings() -> OperatorSettings:
    return OperatorSettings()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration")
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 60
    settings.peering.lifetime = OperatorSettings().peering_lifetime
    # Serving a list of namespaces needs no cluster-wide grant: no watching of namespaces and
    # CRDs, the exact namespaces and the CRDs present at start are served.
    settings.scanning.disabled = bool(os.environ.get("FLOE_NAMESPACES"))
    # A topic deleted while its refresh timer is busy keeps kopf's finalizer until the timer has
    # stopped; kopf looks again only after cancellation_polling (60 s by default), so a user's
    # `kubectl delete kit` would hang a minute.
    settings.background.instant_exit_timeout = 0.5
    settings.background.cancellation_polling = 2


def _invalid(error: ValidationError) -> str:
    problems = []
    for problem in error.errors():
        where = ".".join(str(p) for p in problem["loc"])
        problems.append(f"spec.{where}: {problem['msg'].removeprefix('Value error, ')}")
    return "; ".join(problems)


def _claim_table(topic: render.Topic, table: Any, observed: Observation, logger: Any,
                 body: Any) -> None:
    """One table has one writer, recorded on the table: a second resource on it is refused on
    its status; a table whose writer is gone (renamed, or deleted with Retain) is taken over,
    and its job goes on from the offsets committed for the same Kafka topic."""
    try:
        claim_table(table, topic.writer)
        return
    except TableInUse:
        owner = table.properties[OWNER]
    identifier = topic.spec.table.identifier
    namespace, _, name = owner.partition("/")
    try:
        other = kube.get_topic(namespace, name)
    except Exception:  # noqa: BLE001 - cannot tell (another namespace, say): assume it is
        other = {"spec": {"table": {"identifier": identifier}}}
    other_table = ((other or {}).get("spec") or {}).get("table") or {}
    if other is not None and other_table.get("identifier") == identifier:
        observed.table_in_use = (
            f"table {identifier} is written by KafkaIcebergTopic {owner}; one table has one "
            f"writer: point spec.table.identifier at another table, or delete {owner} (with "
            "deletionPolicy Retain its table stays) and this resource takes it over")
        return
    message = (f"table {identifier} was written by {owner}, which is gone: this resource "
               f"takes it over and goes on from the offsets committed for Kafka topic "
               f"{topic.spec.kafka.topic}")
    logger.info(message)
    kopf.info(body, reason="TableAdopted", message=message)
    hand_over_table(table, topic.writer)


def _ensure_table(topic: render.Topic, catalog_config: CatalogConfig, observed: Observation,
                  logger: Any, body: Any, approved: str | None = None) -> None:
    """Creates the table from the registry's latest schema when absent; evolves it additively."""
    spec = topic.spec
    try:
        value = None
        registry_config = spec.value.schema_registry
        if registry_config is not None and spec.value.format != "raw":
            user_info = None
            if registry_config.auth_secret_ref:
                user_info = kube.secret_data(topic.namespace, registry_config.auth_secret_ref.name
                                             ).get("basic.auth.user.info")
            latest = Registry(SchemaRegistryConfig(url=registry_config.url,
                                                   subject=registry_config.subject),
                              user_info).latest()
            value = avro_to_iceberg(latest.schema).struct
            observed.registry_version = latest.version
        catalog = load_catalog(catalog_config)
        table, created = ensure_table(catalog, _table_config(topic, catalog_config), value)
        if created:
            logger.info("created table %s", spec.table.identifier)
        _claim_table(topic, table, observed, logger, body)
        if observed.table_in_use:
            return
        if value is not None and spec.schema_evolution.mode == "additive":
            try:
                plan = apply_evolution(table, value)
                observed.schema_in_sync = True
                observed.schema_message = f"table matches registry version {observed.registry_version}"
                if plan.needs_update:
                    logger.info("evolved table %s: %s", spec.table.identifier,
                                "; ".join(str(c) for c in plan.changes))
            except BreakingChange as change:
                version = observed.registry_version
                if approved is not None and approved == str(version):
                    renamed = apply_approved_breaking(table, value, int(version))
                    observed.schema_in_sync = True
                    observed.schema_message = (f"applied approved registry version {version}: "
                                               f"{'; '.join(renamed) or 'no column renamed'}")
                    logger.info("schema: %s", observed.schema_message)
                else:
                    observed.schema_in_sync = False
                    observed.schema_message = (
                        f"registry version {version}: {change}; the table keeps its schema and "
                        f"those records land in value_raw until the annotation {APPROVAL}: "
                        f'"{version}" approves the change')
    except (LayoutMismatch, AvroMappingError) as error:
        observed.table_error = str(error)
    except kopf.TemporaryError:
        raise
    except Exception as error:  # catalog or registry unreachable: report, retry on the timer
        observed.table_error = f"{type(error).__name__}: {error}"[:500]


def _table_config(topic: render.Topic, catalog_config: CatalogConfig) -> TableConfig:
    spec = topic.spec.table
    return TableConfig(catalog=catalog_config, identifier=spec.identifier,
                       partitioning=spec.partitioning, properties=spec.properties)


def failover_delay(failovers: int) -> int:
    """Seconds to wait before recreating a failed job: 10 s, doubling, at most 5 minutes."""
    return min(300, 10 * 2 ** failovers)


def _failover(topic: render.Topic, app: dict[str, Any], observed: Observation,
              previous: dict[str, Any], logger: Any, body: Any) -> dict[str, Any] | None:
    """Recreates an application that ended (failed, or completed though a streaming job never
    should), with exponential backoff."""
    record = previous.get("sparkApplication", {})
    failovers = int(record.get("failovers", 0))
    last = record.get("lastFailoverTime")
    ended = app.get("status", {}).get("terminationTime")
    since = max([epoch(t) for t in (last, ended) if t] or [0])
    waited = now_ms() / 1000 - since
    observed.extra["failovers"] = failovers
    observed.extra["lastFailoverTime"] = last
    if waited < failover_delay(failovers):
        return app
    state = state_of(app)
    error = error_of(app)
    if state == AppState.COMPLETED:
        error = error or "the driver exited 0, but a streaming job never ends by itself"
    message = (f"job {'ended' if state == AppState.COMPLETED else 'failed'} ({state}); "
               f"recreating it (failover {failovers + 1}): "
               f"{error.splitlines()[0][:300] if error else 'no message'}")
    message = redact.redact(message)
    logger.warning(message)
    kopf.warn(body, reason="Failover", message=message)
    kube.delete_spark_application(topic.namespace, topic.child_name)
    kube.create_spark_application(render.spark_application(topic, settings()))
    observed.extra["failovers"] = failovers + 1
    observed.extra["lastFailoverTime"] = now_iso()
    observed.extra["lastFailure"] = error[:1000]
    return kube.get_spark_application(topic.namespace, topic.child_name)


# The job's exit codes for what only the user can resolve.
STOPPED_FOR_THE_USER = {
    exit_codes.DATA_LOSS: ("DataLoss", "Kafka no longer has records the table has not got "
                                       "(retention deleted them, or the topic was deleted and "
                                       "created again)"),
    exit_codes.TABLE_IN_USE: ("TableInUse", "another resource writes the table"),
}


def _stopped_for_the_user(app: dict[str, Any] | None) -> tuple[str, str] | None:
    """(reason, message) when the driver exited with a code that recreating the job would only
    repeat; None otherwise."""
    found = re.search(r"ExitCode: (\d+)", error_of(app))
    if found is None or int(found.group(1)) not in STOPPED_FOR_THE_USER:
        return None
    reason, what = STOPPED_FOR_THE_USER[int(found.group(1))]
    name = app["metadata"]["name"]
    namespace = app["metadata"].get("namespace", "")
    return reason, (f"the job stopped (exit code {found.group(1)}): {what}; `kubectl logs -n "
                    f"{namespace} {name}-driver` says what and where. floe does not restart "
                    f"it: once resolved, delete SparkApplication {name} (or change the spec) and "
                    "it is created again; for a topic created again, create the resource "
                    "again with another table.identifier")


def _healthy_since_failover(app: dict[str, Any] | None, record: dict[str, Any]) -> bool:
    """Whether the job a failover recreated has run long enough without dying again (the
    spark-operator did not have to submit its driver again) for the count to start over."""
    last = record.get("lastFailoverTime")
    if app is None or not record.get("failovers") or not last:
        return False
    app_status = app.get("status", {})
    running = state_of(app) == AppState.RUNNING
    attempts = int(app_status.get("executionAttempts", 0) or 0)
    return (running and attempts <= 1
            and now_ms() / 1000 - epoch(last) >= settings().failover_reset_seconds)


def _ensure_job(topic: render.Topic, observed: Observation, previous: dict[str, Any],
                logger: Any, body: Any) -> None:
    name = topic.child_name
    observed.app_name = name
    if topic.spec.suspend:
        kube.delete_spark_application(topic.namespace, name)
        return
    kube.apply_config_map(render.config_map(topic, settings()))
    desired = render.spark_application(topic, settings())
    app = kube.get_spark_application(topic.namespace, name)
    annotations = (app or {}).get("metadata", {}).get("annotations", {})
    rendered_for = annotations.get(f"{GROUP}/generation")
    fingerprint = desired["metadata"]["annotations"][f"{GROUP}/job-fingerprint"]
    if app is not None and annotations.get(f"{GROUP}/job-fingerprint") != fingerprint:
        message = f"spec changed (generation {rendered_for} -> {topic.generation}): restarting the job"
        logger.info(message)
        kopf.info(body, reason="JobRestarted", message=message)
        kube.delete_spark_application(topic.namespace, name)
        app = None
    if app is None:
        # A long name's child used to be its name cut at 63 characters: that one would be a
        # second writer beside the new one.
        for stale in kube.spark_application_names(topic.namespace, f"{GROUP}/topic={topic.label}"):
            if stale != name:
                kube.delete_spark_application(topic.namespace, stale)
                logger.info("deleted SparkApplication %s (named by an older floe)", stale)
        if kube.create_spark_application(desired):
            logger.info("created SparkApplication %s", name)
            kopf.info(body, reason="JobCreated", message=f"created SparkApplication {name}")
        app = kube.get_spark_application(topic.namespace, name)
    state = state_of(app)
    stopped = _stopped_for_the_user(app) if state in FAILED else None
    if stopped is not None:  # failing over would fail the same way: the user has to act
        observed.job_stopped = stopped
        record = previous.get("sparkApplication", {})
        observed.extra.update({k: record[k] for k in ("failovers", "lastFailoverTime")
                               if k in record})
    elif app is not None and state in ENDED:
        app = _failover(topic, app, observed, previous, logger, body)
    else:
        record = previous.get("sparkApplication", {})
        observed.extra.update({k: record[k] for k in ("failovers", "lastFailoverTime",
                                                      "lastFailure") if k in record})
        if _healthy_since_failover(app, record):
            observed.extra["failovers"] = 0
            logger.info("job healthy for %ss since its last failover: failover count reset",
                        settings().failover_reset_seconds)
    app_status = (app or {}).get("status", {})
    observed.app_state = state_of(app)
    observed.app_error = error_of(app) or None
    observed.app_attempts = int(app_status.get("executionAttempts", 0) or 0)


def _ensure_maintenance(topic: render.Topic, observed: Observation, logger: Any) -> None:
    """One CronJob per enabled action; those of disabled actions are removed."""
    desired = render.cron_jobs(topic, settings())
    existing = kube.cron_jobs(topic.namespace, f"{GROUP}/topic={topic.label},"
                                               "app.kubernetes.io/name=floe-maintenance")
    for cron_job in desired:
        kube.apply_cron_job(cron_job, existing)
    wanted = {c["metadata"]["name"] for c in desired}
    for name in existing:
        if name not in wanted:
            kube.delete_cron_job(topic.namespace, name)
            logger.info("maintenance: removed CronJob %s", name)
    observed.maintenance = {
        c["metadata"]["labels"][f"{GROUP}/action"]: {"schedule": c["spec"]["schedule"],
                                                      "cronJob": c["metadata"]["name"]}
        for c in desired}


def _observe_progress(topic: render.Topic, catalog_config: CatalogConfig,
                      observed: Observation, previous: dict[str, Any]) -> None:
    seen = (previous.get("table") or {}).get("snapshotId")
    try:
        table = observe.table_state(topic, catalog_config, int(seen) if seen else None)
    except Exception as error:  # noqa: BLE001 - reported on the status
        observed.table_error = observed.table_error or f"{type(error).__name__}: {error}"[:500]
        return
    observed.table_exists = table.exists
    observed.snapshot_id = table.snapshot_id
    observed.committed_at_ms = table.committed_at_ms
    observed.schema_id = table.schema_id
    observed.vtts_ms = table.vtts_ms
    observed.maintenance_runs = table.maintenance_runs
    observed.dead_letter_error = table.dead_letter_error
    observed.extra["newCommits"] = table.new_commits
    observed.now_ms = now_ms()
    try:
        observed.offsets = observe.as_status_offsets(table.offsets, observe.end_offsets(topic))
    except Exception:  # noqa: BLE001 - Kafka unreachable: keep the last offsets on the status
        observed.offsets = None


class _Deletions:
    """One lock per resource, taken by every reconcile and by the deletion, and the resources
    being deleted. kopf runs the refresh timer beside the deletion handler: without these a
    refresh busy when the deletion began could create the job (or the table) again after the
    deletion removed them."""

    FORGET_AFTER = 86400.0

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._began: dict[str, float] = {}

    def lock(self, uid: str) -> threading.Lock:
        with self._mutex:
            return self._locks.setdefault(uid, threading.Lock())

    def begin(self, uid: str) -> None:
        now = time.monotonic()
        with self._mutex:
            for old in [u for u, began in self._began.items() if now - began > self.FORGET_AFTER]:
                self._began.pop(old)
                self._locks.pop(old, None)
            self._began.setdefault(uid, now)

    def began(self, uid: str) -> bool:
        with self._mutex:
            return uid in self._began


_DELETIONS = _Deletions()


def reconcile(body: Any, patch: kopf.Patch, logger: Any, **_: Any) -> None:
    meta = body["metadata"]
    with _DELETIONS.lock(meta["uid"]):
        if meta.get("deletionTimestamp") or _DELETIONS.began(meta["uid"]):
            return  # being deleted: nothing is created or reported any more
        labels = (meta["namespace"], meta["name"])
        with metrics.RECONCILE.labels(*labels).time(), \
                metrics.ERRORS.labels(*labels).count_exceptions():
            _reconcile(body, patch, logger)
        metrics.record_status(*labels, dict(patch.status) or dict(body.get("status") or {}))


def _reconcile(body: Any, patch: kopf.Patch, logger: Any) -> None:
    generation = int(body["metadata"].get("generation", 1))
    previous = dict(body.get("status") or {})
    try:
        topic = render.Topic.from_body(dict(body))
        render.job_config(topic, settings())  # a spec that cannot be rendered is invalid too
    except (ValidationError, ValueError) as error:
        message = _invalid(error) if isinstance(error, ValidationError) else str(error)
        patch.status.update(status(Observation(generation, invalid_spec=message), previous))
        logger.warning("invalid spec: %s", message)
        return
    observed = Observation(generation, suspended=topic.spec.suspend,
                           dead_letter_topic=(topic.spec.dead_letter.topic
                                              if topic.spec.dead_letter else None))
    approved = (body["metadata"].get("annotations") or {}).get(APPROVAL)
    catalog_config = observe.catalog_config(topic)  # reads the catalog Secret once per visit
    _ensure_table(topic, catalog_config, observed, logger, body, approved)
    if observed.table_in_use:  # no job and no maintenance on another resource's table
        observed.app_name = topic.child_name
        kube.delete_spark_application(topic.namespace, topic.child_name)
    else:
        _ensure_job(topic, observed, previous, logger, body)
        _ensure_maintenance(topic, observed, logger)
        _observe_progress(topic, catalog_config, observed, previous)
    metrics.record_commits(topic.namespace, topic.name, observed.extra.get("newCommits", 0))
    current = redact.redact_all(status(observed, previous))
    _post_transitions(body, previous, current)
    patch.status.update(current)


EVENT_CONDITIONS = ("Ready", "JobRunning", "TableReady", "SchemaInSync", "DeadLetter")


def _post_transitions(body: Any, previous: dict[str, Any], current: dict[str, Any]) -> None:
    """An Event for each condition whose status changed: what a user watching ``kubectl describe
    kit`` or an alerting tool wants to see. Conditions appearing on the first visit post nothing,
    except Ready appearing True: a topic whose first written status is already Ready (its first
    visit failed before writing one) still tells the user it is landing."""
    before = {c.get("type"): c.get("status") for c in previous.get("conditions") or []}
    for condition in current.get("conditions") or []:
        kind, now = condition["type"], condition["status"]
        was = before.get(kind)
        first_ready = was is None and kind == "Ready" and now == "True"
        if kind in EVENT_CONDITIONS and (was not in (None, now) or first_ready):
            post = kopf.info if now == "True" else kopf.warn
            post(body, reason=condition["reason"],
                 message=(f"{kind} is {now}" + (f" (was {was})" if was else "")
                          + f": {condition['message']}")[:1000])


@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE)
@kopf.on.resume(*RESOURCE)
def on_change(**kwargs: Any) -> None:
    reconcile(**kwargs)


@kopf.timer(*RESOURCE, interval=settings().refresh_seconds, initial_delay=5, idle=0)
def refresh(**kwargs: Any) -> None:
    reconcile(**kwargs)


@kopf.on.delete(*RESOURCE)
def on_delete(body: Any, logger: Any, **_: Any) -> None:
    meta = body["metadata"]
    _DELETIONS.begin(meta["uid"])  # before the lock: a refresh waiting for it does nothing
    with _DELETIONS.lock(meta["uid"]):
        _delete(body, logger)


def _delete(body: Any, logger: Any) -> None:
    """Removes the job, waits until its pods are gone (a running driver could still write to
    the table), then drops the table if the policy says so.
    The resource stays (kopf's finalizer) while it waits, so `kubectl delete` returns once
    nothing of the resource runs."""
    metrics.forget(body["metadata"]["namespace"], body["metadata"]["name"])
    try:
        topic = render.Topic.from_body(dict(body))
    except ValidationError:
        return  # nothing was ever created for an invalid spec
    kube.delete_spark_application(topic.namespace, topic.child_name)
    pods = kube.running_pods(topic.namespace, topic.child_name)
    if pods:
        waited = now_ms() / 1000 - epoch(body["metadata"]["deletionTimestamp"])
        if waited < settings().deletion_wait_seconds:
            raise retry_later(f"waiting for the job's pods to stop: {', '.join(pods)}",
                              delay=2)
        logger.warning("the job's pods %s still run %d s after the deletion; going on without "
                       "them (FLOE_DELETION_WAIT_SECONDS)", ", ".join(pods), waited)
    if topic.spec.table.deletion_policy == "Delete":
        from pyiceberg.exceptions import NoSuchTableError

        try:
            catalog = load_catalog(observe.catalog_config(topic))
            owner = catalog.load_table(topic.spec.table.identifier).properties.get(OWNER)
            if owner not in (None, topic.writer):  # refused as a second writer: not its table
                logger.info("deletionPolicy Delete: table %s is written by %s, kept",
                            topic.spec.table.identifier, owner)
                return
            catalog.purge_table(topic.spec.table.identifier)
            logger.info("deletionPolicy Delete: dropped table %s", topic.spec.table.identifier)
        except NoSuchTableError:
            pass
