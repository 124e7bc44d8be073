"""The resource's status, computed from what the operator observed (pure functions).

Conditions follow the Kubernetes API conventions: every type is present from the first visit
(Unknown until known), reasons are CamelCase, and ``lastTransitionTime`` only moves when the
condition's status changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .appstate import SHOWN_FAILED, AppState
from .clock import iso

CONDITION_TYPES = (
    "Ready",
    "JobRunning",
    "TableReady",
    "SchemaInSync",
    "MaintenanceScheduled",
    "DeadLetter",
)
# JobRunning's reasons while spark-operator has not taken the application up, and while the
# driver's ServiceAccount is missing (the job waits for it).
NOT_WATCHING = "SparkOperatorNotWatching"
ACCOUNT_MISSING = "ServiceAccountMissing"
# Ready's reason while a running job has not committed for several intervals though Kafka has
# records for it.
STALLED = "Stalled"
# Ready's reason while the last stable spec runs instead of a generation that failed
# (spec.autoRollback).
ROLLED_BACK = "RolledBack"


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str


@dataclass(frozen=True)
class Observation:
    """What the planner made of one visit; None where it could not be learned."""

    generation: int
    suspended: bool = False
    invalid_spec: str | None = None
    app_state: str | None = None  # SparkApplication .status.applicationState.state
    app_error: str | None = None
    app_attempts: int = 0
    app_name: str | None = None
    app_unseen: str | None = None  # spark-operator has not taken the application up: why
    account_missing: str | None = None  # the driver's ServiceAccount is not there: what to do
    table_exists: bool | None = None
    table_error: str | None = None  # the catalog could not be read
    registry_error: str | None = None  # the registry could not be read
    table_in_use: str | None = None  # another resource writes the table
    layout_error: str | None = None  # the table is not laid out the way floe writes
    job_stopped: tuple[str, str] | None = None  # (reason, message): the job needs the user
    snapshot_id: int | None = None
    committed_at_ms: int | None = None
    schema_id: int | None = None
    registry_version: int | None = None
    schema_in_sync: bool | None = None
    schema_message: str = ""
    schema_change: tuple[int, tuple[str, ...]] | None = None  # waiting: (version, changes)
    stalled: str | None = None  # the running job has not committed for long: what it does
    stable: dict[str, Any] | None = None  # a new last stable spec (None: as it was)
    auto_rollback: dict[str, Any] | None = None  # this generation is rolled back (None: not)
    rolled_back: str | None = None  # the stable spec runs instead of this generation's: why
    offsets: dict[str, Any] | None = None  # with routes: per partition, the lowest table's
    tables: list[dict[str, Any]] | None = None  # with routes: each table's progress
    vtts_ms: int | None = None
    maintenance: dict[str, dict[str, str]] | None = None  # action -> schedule, CronJob
    maintenance_runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    dead_letter_topic: str | None = None
    dead_letter_error: str | None = None  # the newest commit's records the topic refused
    now_ms: int = 0  # the visit's time (the conditions' lastTransitionTime)
    failovers: int | None = None  # times floe recreated the job (the backoff's exponent)
    last_failover_time: str | None = None
    last_failure: str | None = None  # the error the last failover recreated the job after
    branch: dict[str, Any] | None = None  # with table.branch: the branch, main, last publish


def _refused(reason: str, message: str, table: str) -> list[Condition]:
    """Every condition, for a resource floe does not act on until the user changes something."""
    return [
        Condition("Ready", "False", reason, message),
        Condition("JobRunning", "False", reason, message),
        Condition("TableReady", table, reason, message),
        Condition("SchemaInSync", "Unknown", reason, message),
        Condition("MaintenanceScheduled", "Unknown", reason, message),
        Condition("DeadLetter", "Unknown", reason, message),
    ]


def conditions(observed: Observation) -> list[Condition]:
    if observed.invalid_spec:
        return _refused("InvalidSpec", observed.invalid_spec, "Unknown")
    if observed.table_in_use:
        return _refused("TableInUse", observed.table_in_use, "False")
    if observed.layout_error:
        return _refused("LayoutMismatch", observed.layout_error, "False")

    if observed.table_exists:
        table = Condition(
            "TableReady", "True", "TableExists", f"table has schema {observed.schema_id}"
        )
    elif observed.table_error:
        table = Condition(
            "TableReady",
            "False",
            "CatalogUnavailable",
            f"the operator could not read the table: {observed.table_error}",
        )
    elif observed.registry_error:
        table = Condition(
            "TableReady",
            "False",
            "RegistryUnavailable",
            "the table is made from the registry's subject, which the operator "
            f"could not read: {observed.registry_error}",
        )
    else:
        table = Condition("TableReady", "Unknown", "Pending", "the table is being created")

    state = observed.app_state or ""
    if observed.suspended:
        job = Condition("JobRunning", "False", "Suspended", "spec.suspend is true")
    elif state == AppState.RUNNING:
        job = Condition(
            "JobRunning", "True", "Running", f"SparkApplication {observed.app_name} is running"
        )
    elif observed.job_stopped is not None:
        job = Condition("JobRunning", "False", *observed.job_stopped)
    elif observed.account_missing:
        job = Condition("JobRunning", "False", ACCOUNT_MISSING, observed.account_missing)
    elif observed.app_unseen:
        job = Condition("JobRunning", "False", NOT_WATCHING, observed.app_unseen)
    elif state in SHOWN_FAILED:
        job = Condition("JobRunning", "False", "JobFailed", (observed.app_error or state)[:1000])
    elif state == AppState.COMPLETED:
        job = Condition("JobRunning", "False", "JobCompleted", "the job stopped")
    else:
        job = Condition(
            "JobRunning",
            "False",
            "Starting",
            f"SparkApplication {observed.app_name} is {state or 'being created'}",
        )

    if observed.schema_in_sync is None and observed.registry_error:
        schema = Condition(
            "SchemaInSync",
            "Unknown",
            "RegistryUnavailable",
            f"the operator could not read the registry: {observed.registry_error}",
        )
    elif observed.schema_in_sync is None:
        schema = Condition(
            "SchemaInSync",
            "Unknown",
            "Pending",
            observed.schema_message or "the registry has not been compared with the table yet",
        )
    elif observed.schema_in_sync:
        schema = Condition("SchemaInSync", "True", "InSync", observed.schema_message)
    else:
        schema = Condition("SchemaInSync", "False", "BreakingChange", observed.schema_message)

    if observed.suspended:
        ready = Condition("Ready", "False", "Suspended", "spec.suspend is true")
    elif table.status == "True" and job.status == "True" and observed.stalled:
        ready = Condition("Ready", "False", STALLED, observed.stalled)
    elif table.status == "True" and job.status == "True" and observed.rolled_back:
        ready = Condition("Ready", "True", ROLLED_BACK, observed.rolled_back)
    elif table.status == "True" and job.status == "True":
        ready = Condition("Ready", "True", "Landing", "the job is running and the table exists")
    else:
        failing = next((c for c in (table, job) if c.status != "True"), job)
        ready = Condition("Ready", "False", failing.reason, failing.message)
    return [
        ready,
        job,
        table,
        schema,
        maintenance_condition(observed),
        dead_letter_condition(observed),
    ]


def dead_letter_condition(observed: Observation) -> Condition:
    """Whether the newest commit's undecodable records reached the dead-letter topic.  When it
    refused them they are still in the table (``value_raw``), so Ready is not affected."""
    if not observed.dead_letter_topic:
        return Condition(
            "DeadLetter",
            "True",
            "NotConfigured",
            "no deadLetter.topic: undecodable records are kept in value_raw only",
        )
    if observed.dead_letter_error:
        return Condition("DeadLetter", "False", "DeadLetterFailing", observed.dead_letter_error)
    return Condition(
        "DeadLetter",
        "True",
        "Delivering",
        f"undecodable records go to {observed.dead_letter_topic} and value_raw",
    )


def maintenance_condition(observed: Observation) -> Condition:
    if observed.maintenance is None:
        return Condition(
            "MaintenanceScheduled",
            "Unknown",
            "Pending",
            "the maintenance CronJobs are not applied yet",
        )
    if observed.suspended:
        return Condition(
            "MaintenanceScheduled",
            "False",
            "Suspended",
            "spec.suspend is true: the CronJobs are suspended",
        )
    if not observed.maintenance:
        return Condition(
            "MaintenanceScheduled", "False", "Disabled", "every maintenance action is disabled"
        )
    failed = sorted(
        a
        for a, run in observed.maintenance_runs.items()
        if a in observed.maintenance and run.get("outcome") == "Failed"
    )
    schedules = "; ".join(
        f"{action} {entry['schedule']}" for action, entry in observed.maintenance.items()
    )
    if failed:
        return Condition(
            "MaintenanceScheduled",
            "True",
            "LastRunFailed",
            f"{schedules}; last run failed: "
            + "; ".join(observed.maintenance_runs[a].get("message", a) for a in failed)[:800],
        )
    return Condition("MaintenanceScheduled", "True", "Scheduled", schedules)


def phase(observed: Observation, ready: Condition) -> str:
    if (
        observed.invalid_spec
        or observed.table_in_use
        or observed.layout_error
        or observed.job_stopped
    ):
        return "Failed"  # the user has to change something
    if observed.suspended:
        return "Suspended"
    if ready.reason == ROLLED_BACK:
        return "RolledBack"
    if ready.status == "True":
        return "Running"
    if (observed.app_state or "") in SHOWN_FAILED or ready.reason == STALLED:
        return "Degraded"
    return "Pending"


def merge_conditions(
    previous: list[dict[str, Any]] | None, current: list[Condition], generation: int, now: str
) -> list[dict[str, Any]]:
    """The conditions with ``lastTransitionTime`` moved to ``now`` (the visit's time) where
    their status changed."""
    before = {c.get("type"): c for c in previous or []}
    merged = []
    for condition in current:
        old = before.get(condition.type)
        moved = old is None or old.get("status") != condition.status
        merged.append(
            {
                "type": condition.type,
                "status": condition.status,
                "reason": condition.reason,
                "message": condition.message,
                "observedGeneration": generation,
                "lastTransitionTime": (
                    now if moved or old is None else old.get("lastTransitionTime", now)
                ),
            }
        )
    return merged


def steady_lag(current: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """A progress entry (``status.offsets``, or one of ``status.tables``) with Kafka's latest
    offsets and the lag as the status showed them, unless the committed offsets moved or the
    lag turned to or from zero: the end offsets of a busy topic move at every visit, and a
    status rewritten at every visit wakes every client that watches the resource. The live
    lag is the operator's metric floe_topic_lag_records."""
    if not previous or "lag" not in current or "lag" not in previous:
        return current
    if current.get("committed") != previous.get("committed") or (current["lag"] > 0) != (
        previous["lag"] > 0
    ):
        return current
    kept = {**current, "lag": previous["lag"]}
    if "latest" in current and "latest" in previous:
        kept["latest"] = previous["latest"]
    return kept


def status(observed: Observation, previous: dict[str, Any] | None) -> dict[str, Any]:
    current = conditions(observed)
    result: dict[str, Any] = {
        "observedGeneration": observed.generation,
        "phase": phase(observed, current[0]),
        "conditions": merge_conditions(
            (previous or {}).get("conditions"),
            current,
            observed.generation,
            iso(observed.now_ms / 1000),
        ),
    }
    if observed.app_name:
        result["sparkApplication"] = {
            "name": observed.app_name,
            "state": observed.app_state or "",
            "attempts": observed.app_attempts,
        }
        if observed.app_error:
            result["sparkApplication"]["lastFailure"] = observed.app_error[:1000]
        for key, value in (
            ("failovers", observed.failovers),
            ("lastFailoverTime", observed.last_failover_time),
            ("lastFailure", observed.last_failure),
        ):
            if value is not None:
                result["sparkApplication"][key] = value
    if observed.table_exists:
        table: dict[str, Any] = {"schemaId": observed.schema_id}
        if observed.snapshot_id is not None:
            table["snapshotId"] = str(observed.snapshot_id)
        if observed.committed_at_ms is not None:
            table["committedAt"] = iso(observed.committed_at_ms / 1000)
        if observed.registry_version is not None:
            table["registryVersion"] = observed.registry_version
        result["table"] = table
    if observed.offsets is not None:
        result["offsets"] = steady_lag(observed.offsets, (previous or {}).get("offsets"))
    if observed.tables is not None:
        before = {t.get("identifier"): t for t in (previous or {}).get("tables") or []}
        result["tables"] = [steady_lag(t, before.get(t.get("identifier"))) for t in observed.tables]
    elif (previous or {}).get("tables"):  # the routes are gone (the status is merge-patched)
        result["tables"] = None
    if observed.vtts_ms is not None:
        result["landedThrough"] = iso(observed.vtts_ms / 1000)
    if "freshnessSeconds" in (previous or {}):  # written by floe before landedThrough
        result["freshnessSeconds"] = None
    if (previous or {}).get("observedGeneration") != observed.generation or not (
        previous or {}
    ).get("specChangedAt"):
        result["specChangedAt"] = iso(observed.now_ms / 1000)
    if observed.stable is not None:
        result["stable"] = observed.stable
    if observed.auto_rollback is not None:
        result["autoRollback"] = observed.auto_rollback
    elif (previous or {}).get("autoRollback"):
        result["autoRollback"] = None
    if observed.schema_change is not None:
        version, changes = observed.schema_change
        result["schemaChange"] = {"registryVersion": version, "changes": list(changes)}
    elif (previous or {}).get("schemaChange"):
        result["schemaChange"] = None
    if observed.branch is not None:
        result["branch"] = observed.branch
    elif (previous or {}).get("branch"):
        result["branch"] = None
    if observed.maintenance is not None:
        result["maintenance"] = {
            action: {
                **entry,
                **(
                    {"lastRun": observed.maintenance_runs[action]}
                    if action in observed.maintenance_runs
                    else {}
                ),
            }
            for action, entry in observed.maintenance.items()
        }
        # The status is merge-patched: an action no longer scheduled is removed explicitly.
        for gone in set((previous or {}).get("maintenance") or {}) - set(observed.maintenance):
            result["maintenance"][gone] = None
    return result
