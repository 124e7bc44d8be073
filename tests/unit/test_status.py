"""The status computed from what the operator observed."""

from __future__ import annotations

import pytest

from floe_operator import handlers, plan
from floe_operator.plan import failover_delay
from floe_operator.status import Observation, status
from floe_operator.view import App

pytestmark = pytest.mark.unit


def conditions(result):
    return {c["type"]: (c["status"], c["reason"]) for c in result["conditions"]}


def test_every_condition_is_present_from_the_first_visit():
    result = status(Observation(generation=1), None)
    assert conditions(result) == {
        "Ready": ("False", "Pending"),
        "JobRunning": ("False", "Starting"),
        "TableReady": ("Unknown", "Pending"),
        "SchemaInSync": ("Unknown", "Pending"),
        "MaintenanceScheduled": ("Unknown", "Pending"),
        "DeadLetter": ("True", "NotConfigured"),
    }
    assert result["phase"] == "Pending"
    assert all(
        c["observedGeneration"] == 1 and c["lastTransitionTime"] for c in result["conditions"]
    )


def test_a_running_job_on_an_existing_table_is_ready_with_its_progress():
    observed = Observation(
        generation=2,
        app_state="RUNNING",
        app_name="floe-orders",
        app_attempts=1,
        table_exists=True,
        snapshot_id=42,
        schema_id=3,
        committed_at_ms=1_795_000_000_000,
        registry_version=4,
        schema_in_sync=True,
        schema_message="in sync",
        offsets={"committed": {"0": 10}, "latest": {"0": 12}, "lag": 2},
        vtts_ms=1_795_000_000_000,
        now_ms=1_795_000_042_500,
    )
    result = status(observed, None)
    assert conditions(result)["Ready"] == ("True", "Landing")
    assert result["phase"] == "Running"
    assert result["table"] == {
        "schemaId": 3,
        "snapshotId": "42",
        "committedAt": "2026-11-18T11:06:40Z",
        "registryVersion": 4,
    }
    assert result["offsets"]["lag"] == 2
    assert result["landedThrough"] == "2026-11-18T11:06:40Z"


def test_a_dead_letter_topic_that_refused_the_newest_commits_records_is_failing_not_unready():
    landing = {
        "generation": 1,
        "app_state": "RUNNING",
        "app_name": "floe-orders",
        "table_exists": True,
        "dead_letter_topic": "orders.dlq",
    }
    assert conditions(status(Observation(**landing), None))["DeadLetter"] == ("True", "Delivering")
    message = (
        "2 undecodable record(s) not sent to dead-letter topic orders.dlq after 3 "
        "attempts (they are in value_raw): RecordTooLargeException: ..."
    )
    result = status(Observation(**landing, dead_letter_error=message), None)
    assert conditions(result)["DeadLetter"] == ("False", "DeadLetterFailing")
    assert conditions(result)["Ready"] == ("True", "Landing")
    assert next(c["message"] for c in result["conditions"] if c["type"] == "DeadLetter") == message


def test_transition_times_move_only_when_a_condition_changes():
    first = status(Observation(generation=1), None)
    for condition in first["conditions"]:
        condition["lastTransitionTime"] = "2000-01-01T00:00:00Z"
    again = status(Observation(generation=1, table_exists=True), first)
    times = {c["type"]: c["lastTransitionTime"] for c in again["conditions"]}
    assert times["JobRunning"] == "2000-01-01T00:00:00Z"  # unchanged: still False
    assert times["TableReady"] != "2000-01-01T00:00:00Z"  # Unknown -> True


def test_events_mark_each_change_and_a_topic_first_seen_ready(monkeypatch):
    posted = []
    monkeypatch.setattr(
        handlers.kopf,
        "info",
        lambda body, reason, message: posted.append(("Normal", reason, message)),
    )
    monkeypatch.setattr(
        handlers.kopf,
        "warn",
        lambda body, reason, message: posted.append(("Warning", reason, message)),
    )
    ready = status(
        Observation(generation=1, app_state="RUNNING", app_name="floe-orders", table_exists=True),
        None,
    )
    pending = status(Observation(generation=1), None)
    handlers._post_transitions({}, {}, pending)  # first visit, nothing ready: no noise
    assert posted == []
    handlers._post_transitions({}, pending, ready)
    assert [(kind, reason) for kind, reason, _ in posted] == [
        ("Normal", "Landing"),
        ("Normal", "Running"),
        ("Normal", "TableExists"),
    ]
    posted.clear()
    handlers._post_transitions({}, {}, ready)  # the first status written is already Ready
    assert posted == [
        ("Normal", "Landing", "Ready is True: the job is running and the table exists")
    ]
    posted.clear()
    failed = status(
        Observation(
            generation=1,
            app_state="FAILED",
            app_error="boom",
            app_name="floe-orders",
            table_exists=True,
        ),
        ready,
    )
    handlers._post_transitions({}, ready, failed)
    assert [(kind, reason) for kind, reason, _ in posted] == [
        ("Warning", "JobFailed"),
        ("Warning", "JobFailed"),
    ]


def test_a_reason_only_the_user_can_resolve_posts_one_warning_though_the_job_was_down(monkeypatch):
    posted = []
    monkeypatch.setattr(
        handlers.kopf,
        "info",
        lambda body, reason, message: posted.append(("Normal", reason, message)),
    )
    monkeypatch.setattr(
        handlers.kopf,
        "warn",
        lambda body, reason, message: posted.append(("Warning", reason, message)),
    )
    starting = status(Observation(generation=1, app_name="floe-orders", table_exists=True), None)
    for field, reason in (
        ("app_unseen", "SparkOperatorNotWatching"),
        ("account_missing", "ServiceAccountMissing"),
    ):
        posted.clear()
        stuck = status(
            Observation(
                generation=1, app_name="floe-orders", table_exists=True, **{field: "what to run"}
            ),
            starting,
        )
        handlers._post_transitions({}, starting, stuck)
        assert posted == [("Warning", reason, "what to run")]
        handlers._post_transitions({}, stuck, stuck)  # the next visits: said already
        assert len(posted) == 1


def test_failed_job_degrades_and_an_invalid_spec_fails_with_its_reason():
    failed = status(
        Observation(
            generation=1, app_state="FAILED", app_error="boom", app_name="floe-x", table_exists=True
        ),
        None,
    )
    assert failed["phase"] == "Degraded"
    assert conditions(failed)["Ready"] == ("False", "JobFailed")
    assert failed["sparkApplication"]["lastFailure"] == "boom"
    invalid = status(Observation(generation=3, invalid_spec="spec.x: wrong"), None)
    assert invalid["phase"] == "Failed"
    assert conditions(invalid)["Ready"] == ("False", "InvalidSpec")
    assert invalid["conditions"][0]["message"] == "spec.x: wrong"


def test_a_table_written_by_another_resource_is_reported_on_every_condition():
    message = "table analytics.orders is written by KafkaIcebergTopic data/orders; ..."
    result = status(Observation(1, table_in_use=message, table_exists=True), {})
    conditions = {c["type"]: (c["status"], c["reason"]) for c in result["conditions"]}
    assert conditions["Ready"] == ("False", "TableInUse")
    assert conditions["JobRunning"] == ("False", "TableInUse")
    assert conditions["TableReady"] == ("False", "TableInUse")
    assert all(c["message"] == message for c in result["conditions"])
    assert result["phase"] == "Failed"


def test_failover_backoff_doubles_up_to_five_minutes():
    assert [failover_delay(n) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]
    assert [failover_delay(n, 3, 20) for n in range(4)] == [3, 6, 12, 20]


def test_maintenance_is_scheduled_with_each_actions_last_run_on_the_status():
    scheduled = {
        "compaction": {"schedule": "17 * * * *", "cronJob": "floe-orders-compaction"},
        "expire-snapshots": {"schedule": "43 3 * * *", "cronJob": "floe-orders-expire-snapshots"},
    }
    runs = {
        "compaction": {
            "time": "2026-11-22T05:17:00Z",
            "outcome": "Succeeded",
            "rewritten_data_files_count": 12,
        },
        "remove-orphans": {"outcome": "Failed", "message": "old run of a disabled action"},
    }
    result = status(Observation(generation=1, maintenance=scheduled, maintenance_runs=runs), None)
    assert conditions(result)["MaintenanceScheduled"] == ("True", "Scheduled")
    assert result["maintenance"]["compaction"]["lastRun"]["rewritten_data_files_count"] == 12
    assert "lastRun" not in result["maintenance"]["expire-snapshots"]
    assert "remove-orphans" not in result["maintenance"]

    runs["expire-snapshots"] = {
        "outcome": "Failed",
        "message": "expire-snapshots on a.b failed after 5 attempt(s): x",
    }
    failed = status(Observation(generation=1, maintenance=scheduled, maintenance_runs=runs), None)
    condition = next(c for c in failed["conditions"] if c["type"] == "MaintenanceScheduled")
    assert (condition["status"], condition["reason"]) == ("True", "LastRunFailed")
    assert "failed after 5 attempt(s)" in condition["message"]

    disabled = status(
        Observation(generation=1, maintenance={"compaction": scheduled["compaction"]}), result
    )
    assert disabled["maintenance"]["expire-snapshots"] is None  # removed by the merge patch
    none = status(Observation(generation=1, maintenance={}), None)
    assert conditions(none)["MaintenanceScheduled"] == ("False", "Disabled")
    suspended = status(Observation(generation=1, suspended=True, maintenance=scheduled), None)
    assert conditions(suspended)["MaintenanceScheduled"] == ("False", "Suspended")


def test_a_job_that_stopped_on_data_loss_is_not_failed_over_and_says_what_to_do():
    def app(error):
        return App("floe-orders", state="FAILED", error=error)

    assert (
        plan.stopped_for_the_user(
            app("driver container failed with ExitCode: 137, Reason: Error"), "data"
        )
        is None
    )
    reason, message = plan.stopped_for_the_user(
        app("driver container failed with ExitCode: 3, Reason: Error"), "data"
    )
    assert reason == "DataLoss"
    assert message.startswith(
        "the job stopped (exit code 3): Kafka no longer has records the table has not got"
    )
    assert "kubectl logs -n data floe-orders-driver" in message
    assert "delete SparkApplication floe-orders" in message
    assert (
        plan.stopped_for_the_user(
            app("driver container failed with ExitCode: 5, Reason: Error"), "data"
        )[0]
        == "TableInUse"
    )

    observed = Observation(
        generation=1,
        app_state="FAILED",
        app_name="floe-orders",
        table_exists=True,
        job_stopped=(reason, message),
    )
    result = status(observed, None)
    assert conditions(result)["JobRunning"] == ("False", "DataLoss")
    assert conditions(result)["Ready"] == ("False", "DataLoss")
    assert result["phase"] == "Failed"


def test_a_refresh_busy_when_the_deletion_begins_ends_before_it_and_none_acts_after(monkeypatch):
    import threading

    import kopf

    happened: list[str] = []
    busy, release = threading.Event(), threading.Event()

    def refreshing(body, patch, logger, **indexes):
        happened.append("refresh")
        busy.set()
        release.wait(10)
        return {}, None

    monkeypatch.setattr(handlers, "_reconcile", refreshing)
    monkeypatch.setattr(handlers, "_delete", lambda body, logger: happened.append("delete"))
    body = {"metadata": {"uid": "deleted-while-refreshing", "namespace": "ns", "name": "orders"}}
    refresh = threading.Thread(
        target=handlers.reconcile, kwargs={"body": body, "patch": kopf.Patch(), "logger": None}
    )
    refresh.start()
    assert busy.wait(10)
    deletion = threading.Thread(target=handlers.on_delete, kwargs={"body": body, "logger": None})
    deletion.start()
    deletion.join(0.5)
    assert deletion.is_alive()  # waits for the refresh
    release.set()
    refresh.join(10)
    deletion.join(10)
    handlers.reconcile(body=body, patch=kopf.Patch(), logger=None)  # after: acts on nothing
    marked = {
        "metadata": {
            **body["metadata"],
            "uid": "marked",
            "deletionTimestamp": "2026-11-24T00:00:00Z",
        }
    }
    handlers.reconcile(body=marked, patch=kopf.Patch(), logger=None)
    assert happened == ["refresh", "delete"]


def test_a_visit_reading_the_status_before_the_last_visits_patch_posts_nothing_again(monkeypatch):
    """A timer's body can predate the watch event of the previous visit's patch: the change it
    sees was said already, once; the same reason appearing again after another is said again."""
    posted = []
    monkeypatch.setattr(
        handlers.kopf, "info", lambda body, reason, message: posted.append(("Normal", reason))
    )
    monkeypatch.setattr(
        handlers.kopf, "warn", lambda body, reason, message: posted.append(("Warning", reason))
    )
    body = {"metadata": {"uid": "u-stale"}}
    starting = status(Observation(generation=1, app_name="floe-orders", table_exists=True), None)
    stuck = status(
        Observation(
            generation=1, app_name="floe-orders", table_exists=True, account_missing="make it"
        ),
        starting,
    )
    handlers._post_transitions(body, starting, stuck)
    handlers._post_transitions(body, starting, stuck)  # the stale body: Starting still
    assert posted == [("Warning", "ServiceAccountMissing")]
    handlers._post_transitions(body, stuck, starting)
    handlers._post_transitions(body, starting, stuck)  # missing again: said again
    assert posted == [("Warning", "ServiceAccountMissing")] * 2
