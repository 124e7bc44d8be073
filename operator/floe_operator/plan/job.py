"""The planner's decisions on the job (its ConfigMap and SparkApplication): created, restarted
when its fingerprint changes, failed over with backoff when it ended, left stopped when only the
user can resolve why; and an application spark-operator has not taken up, named."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from floe_sparkapp import exit_codes

from .. import redact, render
from ..appstate import ENDED, FAILED, AppState
from ..clock import epoch, iso
from ..names import RESTART
from ..render import Topic
from ..settings import OperatorSettings
from ..view import App, World
from .account import plan_account
from .actions import Apply, CreateApp, Decisions, DeleteApp, Event

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


# --- the job -----------------------------------------------------------------------------------


def plan_job(
    topic: Topic,
    world: World,
    previous: Mapping[str, Any],
    settings: OperatorSettings,
    decided: Decisions,
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
    account_ready = not needed or plan_account(topic, world, settings, decided)
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


def _plan_unseen(
    topic: Topic, app: App, world: World, settings: OperatorSettings, decided: Decisions
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
    decided: Decisions,
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
