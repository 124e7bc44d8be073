"""What `floe status` prints for durations, and for a resource the operator has not seen."""

from __future__ import annotations

import datetime as dt

import pytest

from floe_operator import report

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize(
    "seconds, shown",
    [
        (None, "-"),
        (0, "0s"),
        (59, "59s"),
        (60, "1m"),
        (125, "2m5s"),
        (900, "15m"),
        (3600, "1h"),
        (4000, "1h6m"),
        (40_000, "11h"),
        (86_400, "1d"),
        (90_000, "1d1h"),
        (-5, "0s"),
    ],
)
def test_durations_read_like_kubectl(seconds, shown):
    assert report.duration(seconds) == shown


def test_a_generation_not_yet_observed_is_shown_as_updating():
    item = {
        "metadata": {
            "name": "orders",
            "namespace": "data",
            "generation": 3,
            "creationTimestamp": "2026-11-22T11:00:00Z",
        },
        "status": {
            "observedGeneration": 2,
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    row = report.summary_row(item, NOW)
    assert (row["PHASE"], row["READY"], row["AGE"], row["LAG"]) == (
        "Running (updating)",
        "True",
        "1h",
        "-",
    )


def test_the_details_of_a_routed_topic_list_each_table():
    item = {
        "metadata": {
            "name": "inventory",
            "namespace": "data",
            "generation": 1,
            "creationTimestamp": "2026-11-22T11:00:00Z",
        },
        "spec": {"table": {"identifier": "inventory.other"}},
        "status": {
            "observedGeneration": 1,
            "phase": "Running",
            "tables": [
                {
                    "identifier": "inventory.other",
                    "exists": True,
                    "snapshotId": "42",
                    "lag": 0,
                    "landedThrough": "2026-11-22T11:59:56Z",
                },
                {"identifier": "inventory.customers", "exists": False},
            ],
        },
    }
    shown = report.details(item, NOW)
    assert (
        "Tables:\n"
        "  TABLE                 SNAPSHOT       LAG   FRESHNESS\n"
        "  inventory.other       42             0     4s\n"
        "  inventory.customers   not made yet   -     -\n"
    ) in shown


def test_the_details_of_a_topic_landing_in_a_branch_show_it_and_the_last_publish():
    item = {
        "metadata": {
            "name": "orders",
            "namespace": "data",
            "generation": 1,
            "creationTimestamp": "2026-11-22T11:00:00Z",
        },
        "spec": {"table": {"identifier": "analytics.orders", "branch": "audit"}},
        "status": {
            "observedGeneration": 1,
            "phase": "Running",
            "branch": {
                "name": "audit",
                "snapshotId": "42",
                "mainSnapshotId": "7",
                "unpublishedCommits": 2,
                "lastPublish": {"request": "7", "snapshotId": "7", "at": "2026-11-22T11:50:00Z"},
            },
        },
    }
    shown = report.details(item, NOW).splitlines()
    assert "Branch:      audit at 42, 2 commit(s) not published; main at 7" in shown
    assert "Published:   7 at 2026-11-22T11:50:00Z: main at 7" in shown
