"""kopf handlers: thin adapters from events on KafkaIcebergTopics to observe → plan → act.

Each visit observes the resource's world (:mod:`observe`; its children come from kopf's
indexes of SparkApplications, ConfigMaps and CronJobs, kept by watches, not read per visit),
plans the actions and the status (:mod:`plan`, pure) and runs the actions (:mod:`act`).
The refresh timer visits every resource at its interval, so what the world changed (a job that
ended, a child deleted, a new registry version) is acted on; changes of the resource visit it
at once.

Run: ``python -m floe_operator`` (or ``kopf run -m floe_operator.handlers``).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import kopf
from pydantic import ValidationError

from floe_sparkapp.contract import CommitSpec

from . import act, clients, metrics, observe, operation, render, view
from .clock import epoch, now_ms
from .names import APPROVAL, GROUP, PLURAL, VERSION
from .plan import Plan, invalid, plan, plan_delete, stalled_since
from .render import MANAGED_BY, SPARK_API
from .settings import OperatorSettings
from .status import ACCOUNT_MISSING, NOT_WATCHING

FINALIZER = f"{GROUP}/finalizer"
RESOURCE = (GROUP, VERSION, PLURAL)
SPARK_GROUP, SPARK_VERSION = SPARK_API.split("/")


@functools.lru_cache(maxsize=1)
def settings() -> OperatorSettings:
    return OperatorSettings()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
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


# --- the children, indexed by kopf's watches ---------------------------------------------------
# Coroutines, so kopf runs them on its event loop as each watch event arrives: a plain function
# would wait for a thread of the pool the visits use, and at hundreds of resources the index
# would lag the visits (a visit would then not see the children its previous visit created, and
# create them again).


@kopf.index(SPARK_GROUP, SPARK_VERSION, "sparkapplications", labels=MANAGED_BY)
async def floe_apps(
    namespace: str | None, labels: Mapping[str, str], body: Any, **_: Any
) -> dict[tuple[str, str], view.App]:
    assert namespace is not None  # a namespaced kind: kopf gives its namespace
    return view.app_entry(namespace, labels, body)


@kopf.index("v1", "configmaps", labels=MANAGED_BY)
async def floe_config_maps(
    namespace: str | None, name: str, annotations: Mapping[str, str], **_: Any
) -> dict[tuple[str, str], str]:
    assert namespace is not None  # a namespaced kind: kopf gives its namespace
    return view.config_map_entry(namespace, name, annotations)


@kopf.index("batch", "v1", "cronjobs", labels=MANAGED_BY)
async def floe_cron_jobs(
    namespace: str | None,
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    **_: Any,
) -> dict[tuple[str, str], tuple[str, str]]:
    assert namespace is not None  # a namespaced kind: kopf gives its namespace
    return view.cron_job_entry(namespace, name, labels, annotations)


@kopf.index("v1", "serviceaccounts")
async def floe_accounts(
    namespace: str | None, name: str, labels: Mapping[str, str], meta: Any, **_: Any
) -> dict[tuple[str, str], view.Account]:
    """The ServiceAccounts a driver may run as: a missing one is named on the status (or made,
    with FLOE_SPARK_ACCOUNT_ROLE), and the job waits for it."""
    assert namespace is not None  # a namespaced kind: kopf gives its namespace
    return view.account_entry(namespace, name, labels, meta.get("ownerReferences") or [])


# --- a visit -----------------------------------------------------------------------------------

ROUNDS = 3  # plan → act at most this often in one visit; the next visit goes on


def _reconcile(
    body: Any,
    patch: kopf.Patch,
    logger: Any,
    floe_apps: Any = None,
    floe_config_maps: Any = None,
    floe_cron_jobs: Any = None,
    floe_accounts: Any = None,
) -> tuple[dict[str, Any], int | None]:
    """One visit; returns the resource's status after it, and the lag the visit saw."""
    previous = dict(body.get("status") or {})
    try:
        topic = render.Topic.from_body(dict(body)).running(previous)
        job = render.desired(topic, settings()).job  # a spec that cannot be rendered is invalid
    except (ValidationError, ValueError) as error:
        message = _invalid(error) if isinstance(error, ValidationError) else str(error)
        current = invalid(
            int(body["metadata"].get("generation", 1)), message, previous, now_ms()
        ).status
        patch.status.update(_changed(previous, current))
        logger.warning("invalid spec: %s", message)
        return {**previous, **current}, None
    approved = (body["metadata"].get("annotations") or {}).get(APPROVAL)
    secrets = clients.Secrets.of(topic)
    found = view.children(
        topic,
        floe_apps or {},
        floe_config_maps or {},
        floe_cron_jobs or {},
        floe_accounts,
        topic.spec.spark.service_account or settings().spark_service_account,
    )
    world = observe.observe(topic, job, found, previous, secrets)
    if world.children.app is not None and stalled_since(topic, world, settings()) is not None:
        world = replace(
            world, job_activity=observe.job_activity(topic.namespace, world.children.app)
        )
    planned: Plan | None = None
    carried = previous
    for _round in range(ROUNDS):
        planned = plan(topic, world, carried, settings(), approved)
        if not planned.actions or _round == ROUNDS - 1:
            break
        world = act.run(planned.actions, world, topic, job, secrets, body, logger)
        # The next round sees the world the actions left; it keeps the failover record the
        # actions wrote, and compares conditions with the status before the visit.
        carried = {**previous, "sparkApplication": planned.status.get("sparkApplication")}
    assert planned is not None
    metrics.record_commits(topic.namespace, topic.name, world.table.new_commits)
    _post_transitions(body, previous, planned.status)
    patch.status.update(_changed(previous, planned.status))
    return {**previous, **planned.status}, planned.lag


def _changed(previous: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """The status fields a visit changed: a visit that changed nothing writes nothing (no
    request, and no watch event for every client watching the resource)."""
    return {key: value for key, value in current.items() if previous.get(key) != value}


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


def reconcile(body: Any, patch: kopf.Patch, logger: Any, **kwargs: Any) -> None:
    indexes = {
        name: kwargs.get(name)
        for name in ("floe_apps", "floe_config_maps", "floe_cron_jobs", "floe_accounts")
    }
    meta = body["metadata"]
    with _DELETIONS.lock(meta["uid"]):
        if meta.get("deletionTimestamp") or _DELETIONS.began(meta["uid"]):
            return  # being deleted: nothing is created or reported any more
        labels = (meta["namespace"], meta["name"])
        with metrics.RECONCILE.time(), metrics.ERRORS.labels(*labels).count_exceptions():
            current, lag = _reconcile(body, patch, logger, **indexes)
        metrics.record_visit(*labels)
        metrics.record_status(*labels, current, _interval_seconds(body), lag)


def _interval_seconds(body: Any) -> float | None:
    """The spec's commit interval (its default where unset); None where it is not valid."""
    commit = (body.get("spec") or {}).get("commit") or {}
    try:
        return float(CommitSpec.model_validate(commit).interval_seconds)
    except (ValueError, TypeError):
        return None


EVENT_CONDITIONS = ("Ready", "JobRunning", "TableReady", "SchemaInSync", "DeadLetter")
# JobRunning reasons that need the user, worth an Event when they appear though JobRunning was
# False already (Starting before them).
EVENT_REASONS = (NOT_WATCHING, ACCOUNT_MISSING)


# (uid, condition type) -> the (status, reason) this operator's last visit wrote.
_SEEN: dict[tuple[str, str], tuple[str, str]] = {}


def _post_transitions(body: Any, previous: dict[str, Any], current: dict[str, Any]) -> None:
    """An Event for each condition whose status changed: what a user watching ``kubectl describe
    kit`` or an alerting tool wants to see. Conditions appearing on the first visit post nothing,
    except Ready appearing True: a topic whose first written status is already Ready (its first
    visit failed before writing one) still tells the user it is landing. JobRunning turning to a
    reason only the user can resolve (EVENT_REASONS) posts a Warning once, though it was False
    before."""
    before = {c.get("type"): c.get("status") for c in previous.get("conditions") or []}
    reasons = {c.get("type"): c.get("reason") for c in previous.get("conditions") or []}
    uid = (body.get("metadata") or {}).get("uid")
    for condition in current.get("conditions") or []:
        kind, now = condition["type"], condition["status"]
        was = before.get(kind)
        first_ready = was is None and kind == "Ready" and now == "True"
        needs_user = (
            kind == "JobRunning"
            and condition["reason"] in EVENT_REASONS
            and reasons.get(kind) != condition["reason"]
        )
        # A visit may read a status older than the one the last visit wrote (a timer's body
        # predates the watch event of that visit's patch): a change this operator saw already
        # is said once.
        if uid is not None:
            last = _SEEN.get((uid, kind))
            _SEEN[(uid, kind)] = (now, condition["reason"])
            if last == (now, condition["reason"]):
                continue
        if needs_user:
            kopf.warn(body, reason=condition["reason"], message=condition["message"][:1000])
        elif kind in EVENT_CONDITIONS and (was not in (None, now) or first_ready):
            post = kopf.info if now == "True" else kopf.warn
            post(
                body,
                reason=condition["reason"],
                message=(
                    f"{kind} is {now}"
                    + (f" (was {was})" if was else "")
                    + f": {condition['message']}"
                )[:1000],
            )


@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE)
@kopf.on.resume(*RESOURCE)
def on_change(**kwargs: Any) -> None:
    reconcile(**kwargs)


# sharp: visits keep to the interval's grid (a visit's own time is not added to the interval).
@kopf.timer(*RESOURCE, interval=settings().refresh_seconds, sharp=True, initial_delay=5, idle=0)
def refresh(**kwargs: Any) -> None:
    reconcile(**kwargs)


# --- operations ----------------------------------------------------------------------------------

OPERATIONS = (GROUP, VERSION, operation.PLURAL)


@kopf.on.create(*OPERATIONS)
@kopf.on.resume(*OPERATIONS)
def on_operation(**kwargs: Any) -> None:
    visit_operation(**kwargs)


@kopf.timer(*OPERATIONS, interval=settings().refresh_seconds, sharp=True, initial_delay=2, idle=0)
def refresh_operation(**kwargs: Any) -> None:
    visit_operation(**kwargs)


def visit_operation(body: Any, patch: kopf.Patch, logger: Any, **_: Any) -> None:
    """One visit of a KafkaIcebergOperation: observe its topic and table, plan, act, and write
    its status. One that ended is left as it is."""
    previous = dict(body.get("status") or {})
    if previous.get("phase") in operation.TERMINAL:
        return
    world, table, topic = observe.observe_operation(body, settings())
    planned = operation.plan(world)
    act.run_operation(planned.actions, world, table, topic, settings(), body, logger)
    changed = _changed(previous, planned.status)
    if changed.get("phase") in operation.TERMINAL:
        post = kopf.info if changed["phase"] == "Succeeded" else kopf.warn
        post(body, reason=changed["phase"], message=planned.status.get("message", "")[:1000])
    patch.status.update(changed)


@kopf.on.delete(*RESOURCE)
def on_delete(body: Any, logger: Any, **_: Any) -> None:
    meta = body["metadata"]
    _DELETIONS.begin(meta["uid"])  # before the lock: a refresh waiting for it does nothing
    for key in [key for key in _SEEN if key[0] == meta["uid"]]:
        _SEEN.pop(key, None)
    with _DELETIONS.lock(meta["uid"]):
        _delete(body, logger)


def _delete(body: Any, logger: Any) -> None:
    """A deletion visit: observed, planned (:func:`plan.plan_delete`) and acted on like any
    other. The resource stays (kopf's finalizer) while the deletion waits for the job to stop,
    so `kubectl delete` returns once nothing of the resource runs."""
    meta = body["metadata"]
    metrics.forget(meta["namespace"], meta["name"])
    try:
        topic = render.Topic.from_body(dict(body))
        job = render.job_config(topic, settings())
    except (ValidationError, ValueError):
        return  # nothing was ever created for an invalid spec
    seen = observe.observe_deletion(topic, job, int(epoch(meta["deletionTimestamp"]) * 1000))
    act.run_deletion(plan_delete(topic, seen, settings()), topic, job, logger)
