"""The status computed from what the operator observed."""

from __future__ import annotations

import pytest

from floe_operator.handlers import failover_delay
from floe_operator.status import Observation, status

pytestmark = pytest.mark.unit


def conditions(result):
    return {c["type"]: (c["status"], c["reason"]) for c in result["conditions"]}


def test_every_condition_is_present_from_the_first_visit():
    result = status(Observation(generation=1), None)
    assert conditions(result) == {
        "Ready": ("False", "Pending"), "JobRunning": ("False", "Starting"),
        "TableReady": ("Unknown", "Pending"), "SchemaInSync": ("Unknown", "Pending")}
    assert result["phase"] == "Pending"
    assert all(c["observedGeneration"] == 1 and c["lastTransitionTime"]
               for c in result["conditions"])


def test_a_running_job_on_an_existing_table_is_ready_with_its_progress():
    observed = Observation(generation=2, app_state="RUNNING", app_name="floe-orders",
                           app_attempts=1, table_exists=True, snapshot_id=42, schema_id=3,
                           committed_at_ms=1_795_000_000_000, registry_version=4,
                           schema_in_sync=True, schema_message="in sync",
                           offsets={"committed": {"0": 10}, "latest": {"0": 12}, "lag": 2},
                           vtts_ms=1_795_000_000_000, now_ms=1_795_000_042_500)
    result = status(observed, None)
    assert conditions(result)["Ready"] == ("True", "Landing")
    assert result["phase"] == "Running"
    assert result["table"] == {"schemaId": 3, "snapshotId": "42",
                               "committedAt": "2026-11-18T11:06:40Z", "registryVersion": 4}
    assert result["offsets"]["lag"] == 2
    assert result["freshnessSeconds"] == 42


def test_transition_times_move_only_when_a_condition_changes():
    first = status(Observation(generation=1), None)
    for condition in first["conditions"]:
        condition["lastTransitionTime"] = "2000-01-01T00:00:00Z"
    again = status(Observation(generation=1, table_exists=True), first)
    times = {c["type"]: c["lastTransitionTime"] for c in again["conditions"]}
    assert times["JobRunning"] == "2000-01-01T00:00:00Z"  # unchanged: still False
    assert times["TableReady"] != "2000-01-01T00:00:00Z"  # Unknown -> True


def test_failed_job_degrades_and_an_invalid_spec_fails_with_its_reason():
    failed = status(Observation(generation=1, app_state="FAILED", app_error="boom",
                                app_name="floe-x", table_exists=True), None)
    assert failed["phase"] == "Degraded"
    assert conditions(failed)["Ready"] == ("False", "JobFailed")
    assert failed["sparkApplication"]["lastFailure"] == "boom"
    invalid = status(Observation(generation=3, invalid_spec="spec.x: wrong"), None)
    assert invalid["phase"] == "Failed"
    assert conditions(invalid)["Ready"] == ("False", "InvalidSpec")
    assert invalid["conditions"][0]["message"] == "spec.x: wrong"


def test_failover_backoff_doubles_up_to_five_minutes():
    assert [failover_delay(n) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]
