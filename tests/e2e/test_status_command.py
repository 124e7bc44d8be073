"""`floe status` against the real API server: what it prints for the topics it finds there.

The statuses here are written through the status subresource, the way the operator writes
them, so each figure on screen can be traced to a field; test_operator checks the command on a
status the running operator wrote.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client

from floe_operator.clock import epoch
from floe_sparkapp.units import duration_seconds

from .kube import FLOE_CRD, admin_client, install_crd

pytestmark = pytest.mark.e2e

FLOE = str(Path(sys.executable).parent / "floe")
ARGS = ("floe.dev", "v1alpha1")

BODY = {
    "apiVersion": "floe.dev/v1alpha1",
    "kind": "KafkaIcebergTopic",
    "spec": {
        "kafka": {"bootstrapServers": "kafka:9092", "topic": "orders"},
        "value": {
            "format": "avro",
            "schemaRegistry": {"url": "http://registry:8081", "subject": "orders-value"},
        },
        "table": {
            "catalog": {
                "name": "lake",
                "uri": "jdbc:postgresql://pg:5432/iceberg",
                "warehouse": "s3://lake/wh",
            },
            "identifier": "analytics.orders",
        },
    },
}


def condition(kind: str, status: str, reason: str, message: str) -> dict:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-11-22T10:00:00Z",
        "observedGeneration": 1,
    }


LANDING = {
    "observedGeneration": 1,
    "phase": "Running",
    "conditions": [
        condition("Ready", "True", "Landing", "the job is running and the table exists"),
        condition("JobRunning", "True", "Running", "SparkApplication floe-orders is running"),
        condition("TableReady", "True", "TableExists", "table has schema 1"),
        condition("SchemaInSync", "True", "InSync", "table matches registry version 2"),
        condition("MaintenanceScheduled", "True", "Scheduled", "compaction 17 * * * *"),
    ],
    "sparkApplication": {"name": "floe-orders", "state": "RUNNING", "attempts": 1, "failovers": 2},
    "table": {
        "snapshotId": "5318008",
        "committedAt": "2026-11-22T10:05:00Z",
        "schemaId": 1,
        "registryVersion": 2,
    },
    "offsets": {"committed": {"0": 1200, "1": 900}, "latest": {"0": 1250, "1": 900}, "lag": 50},
    "landedThrough": 125,  # seconds ago, a timestamp when the fixture writes it
    "maintenance": {
        "compaction": {
            "schedule": "17 * * * *",
            "cronJob": "floe-orders-compaction",
            "lastRun": {"outcome": "Succeeded", "time": "2026-11-22T09:17:40Z"},
        }
    },
}

BREAKING = {
    "observedGeneration": 1,
    "phase": "Running",
    "conditions": [
        condition("Ready", "True", "Landing", "the job is running and the table exists"),
        condition(
            "SchemaInSync",
            "False",
            "BreakingChange",
            "registry version 3: field price changed from double to string",
        ),
    ],
    "table": {"snapshotId": "77", "schemaId": 1, "registryVersion": 3},
    "offsets": {"committed": {"0": 10}, "latest": {"0": 10}, "lag": 0},
    "landedThrough": 4000,
    "schemaChange": {
        "registryVersion": 3,
        "changes": ["value.price: type changed from double to string"],
    },
}


def ago(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds))


@pytest.fixture
def topics(stack, namespace):
    """Three topics in the test's namespace: landing, awaiting schema approval, not visited."""
    admin = admin_client(stack)
    install_crd(admin, FLOE_CRD)
    api = client.CustomObjectsApi(admin)
    for name, status in (("orders", LANDING), ("payments", BREAKING), ("returns", None)):
        body = copy.deepcopy(BODY)
        body["metadata"] = {"name": name}
        api.create_namespaced_custom_object(*ARGS, namespace, "kafkaicebergtopics", body)
        if status:
            status = {**status, "landedThrough": ago(status["landedThrough"])}
            api.patch_namespaced_custom_object_status(
                *ARGS, namespace, "kafkaicebergtopics", name, {"status": status}
            )
    return namespace


def floe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FLOE, "status", *args], capture_output=True, text=True, timeout=60)


def test_the_summary_shows_one_line_per_topic(stack, topics):
    before = time.time()
    shown = floe("-n", topics)
    after = time.time()
    assert shown.returncode == 0, shown.stderr
    lines = [line.split("   ") for line in shown.stdout.splitlines()]
    cells = [[cell.strip() for cell in line if cell.strip()] for line in lines]
    assert cells[0] == ["NAME", "READY", "PHASE", "LAG", "FRESHNESS", "SNAPSHOT", "SCHEMA", "AGE"]
    assert cells[1][:7] == ["orders", "True", "Running", "50", cells[1][4], "5318008", "v2"]
    # the age of its landedThrough (2m5s when the fixture wrote it) when the command ran
    landed = epoch(
        client.CustomObjectsApi(admin_client(stack)).get_namespaced_custom_object(
            *ARGS, topics, "kafkaicebergtopics", "orders"
        )["status"]["landedThrough"]
    )
    assert 125 <= int(before - landed) <= duration_seconds(cells[1][4]) <= after - landed, (
        cells[1][4],
        before - landed,
        after - landed,
    )
    assert cells[2][:7] == [
        "payments",
        "True",
        "Running",
        "0",
        "1h6m",
        "77",
        "v3 (awaiting approval)",
    ]
    assert cells[3][:7] == ["returns", "-", "-", "-", "-", "-", "-"]
    assert len(cells) == 4


def test_the_details_show_offsets_conditions_and_maintenance(topics):
    shown = floe("orders", "-n", topics)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "Topic:       orders (kafka:9092)" in text
    assert "Table:       analytics.orders (catalog lake, sql)" in text
    assert "Job:         SparkApplication floe-orders RUNNING, attempts 1, failovers 2" in text
    assert "Snapshot:    5318008, committed 2026-11-22T10:05:00Z" in text
    offsets = text.split("Offsets:\n", 1)[1].splitlines()
    assert offsets[0].split() == ["PARTITION", "COMMITTED", "LATEST", "LAG"]
    assert offsets[1].split() == ["0", "1200", "1250", "50"]
    assert offsets[2].split() == ["1", "900", "900", "0"]
    conditions = text.split("Conditions:\n", 1)[1].splitlines()
    assert conditions[0].split() == ["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"]
    assert conditions[4].split()[:3] == ["SchemaInSync", "True", "InSync"]
    assert conditions[4].endswith("table matches registry version 2")
    maintenance = text.split("Maintenance:\n", 1)[1].splitlines()
    assert maintenance[1].split() == [
        "compaction",
        "17",
        "*",
        "*",
        "*",
        "*",
        "Succeeded",
        "2026-11-22T09:17:40Z",
    ]

    unvisited = floe("returns", "-n", topics)
    assert "Conditions:\n  none yet: the operator has not visited this resource" in unvisited.stdout


def test_json_output_and_all_namespaces(topics):
    shown = floe("-A", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    mine = [row for row in json.loads(shown.stdout) if row["NAMESPACE"] == topics]
    assert [(r["NAME"], r["READY"], r["LAG"]) for r in mine] == [
        ("orders", "True", "50"),
        ("payments", "True", "0"),
        ("returns", "-", "-"),
    ]
    table = floe("-A")
    assert table.stdout.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert any(line.split()[:2] == [topics, "orders"] for line in table.stdout.splitlines())


def test_a_missing_topic_or_namespace_says_so(topics):
    missing = floe("shipments", "-n", topics)
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        f'floe: KafkaIcebergTopic "shipments" not found in namespace "{topics}"'
    )
    empty = floe("-n", "nothing-here")
    assert empty.returncode == 0
    assert empty.stderr.strip() == 'No KafkaIcebergTopics in namespace "nothing-here".'
