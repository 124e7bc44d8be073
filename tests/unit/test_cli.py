"""``kubectl floe``'s operation commands: the KafkaIcebergOperation each makes, and what -w
prints until it ends (a cluster that answers as the API server does)."""

from __future__ import annotations

import pytest

from floe_operator import cli
from floe_operator.operation import OperationSpec

pytestmark = pytest.mark.unit


class Cluster:
    """Holds the topic ``orders``; an operation ends the second time it is read."""

    def __init__(self):
        self.made: list[dict] = []
        self.reads = 0

    def topic(self, namespace, name):
        return {"metadata": {"name": name}} if name == "orders" else None

    def create_operation(self, namespace, body):
        self.made.append(body)
        return body

    def operation(self, namespace, name):
        self.reads += 1
        if self.reads == 1:
            return {"status": {"phase": "Running", "message": "attempt 1 is running"}}
        return {"status": {"phase": "Succeeded", "message": "landed 3 records"}}


@pytest.mark.parametrize("argv, kind, section", [
    (["backfill", "orders", "--from-time", "2026-11-01T00:00:00Z", "--partition", "2",
      "--partition", "0"], "Backfill",
     {"fromTime": "2026-11-01T00:00:00Z", "partitions": [0, 2]}),
    (["backfill", "orders", "--table", "analytics.eu"], "Backfill", {"table": "analytics.eu"}),
    (["repair", "orders", "--reason", "schema_refused", "--dry-run"], "Repair",
     {"dryRun": True, "reasons": ["schema_refused"]}),
    (["rollback", "orders", "--to", "42"], "Rollback", {"snapshotId": "42"}),
    (["replay", "orders", "--topic", "orders-copy", "--snapshot", "42"], "Replay",
     {"topic": "orders-copy", "snapshotId": "42"}),
])
def test_each_operation_command_makes_its_operation(argv, kind, section, monkeypatch, capsys):
    cluster = Cluster()
    args = cli._parser().parse_args(argv + ["-w"])
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    assert cli.COMMANDS[args.command](cluster, "data", args) == 0
    (body,) = cluster.made
    assert body["kind"] == "KafkaIcebergOperation"
    assert body["metadata"]["name"].startswith(f"orders-{kind.lower()}-")
    assert body["spec"] == {"topic": "orders", "type": kind, kind.lower(): section}
    OperationSpec.model_validate(body["spec"])  # what the API server takes
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"kafkaicebergoperation data/{body['metadata']['name']} created",
                       "Running: attempt 1 is running", "Succeeded: landed 3 records"]


def test_an_unknown_reason_is_refused_before_anything_is_made():
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["repair", "orders", "--reason", "bad"])
