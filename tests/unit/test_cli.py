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


@pytest.mark.parametrize(
    "argv, kind, section",
    [
        (
            [
                "backfill",
                "orders",
                "--from-time",
                "2026-11-01T00:00:00Z",
                "--partition",
                "2",
                "--partition",
                "0",
            ],
            "Backfill",
            {"fromTime": "2026-11-01T00:00:00Z", "partitions": [0, 2]},
        ),
        (["backfill", "orders", "--table", "analytics.eu"], "Backfill", {"table": "analytics.eu"}),
        (
            ["repair", "orders", "--reason", "schema_refused", "--dry-run"],
            "Repair",
            {"dryRun": True, "reasons": ["schema_refused"]},
        ),
        (["rollback", "orders", "--to", "42"], "Rollback", {"snapshotId": "42"}),
        (
            ["replay", "orders", "--topic", "orders-copy", "--snapshot", "42"],
            "Replay",
            {"topic": "orders-copy", "snapshotId": "42"},
        ),
    ],
)
def test_each_operation_command_makes_its_operation(argv, kind, section, monkeypatch, capsys):
    cluster = Cluster()
    args = cli.argument_parser().parse_args([*argv, "-w"])
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    assert cli.COMMANDS[args.command](cluster, "data", args) == 0
    (body,) = cluster.made
    assert body["kind"] == "KafkaIcebergOperation"
    assert body["metadata"]["name"].startswith(f"orders-{kind.lower()}-")
    assert body["spec"] == {"topic": "orders", "type": kind, kind.lower(): section}
    OperationSpec.model_validate(body["spec"])  # what the API server takes
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        f"kafkaicebergoperation data/{body['metadata']['name']} created",
        "Running: attempt 1 is running",
        "Succeeded: landed 3 records",
    ]


def test_an_unknown_reason_is_refused_before_anything_is_made():
    with pytest.raises(SystemExit):
        cli.argument_parser().parse_args(["repair", "orders", "--reason", "bad"])


class Branched:
    """Holds the topic ``orders`` landing in branch audit at snapshot 42; the operator answers
    a publish at the second read after the annotation."""

    def __init__(self, branch="audit", head="42", answer=None):
        self.branch, self.head, self.answer = branch, head, answer
        self.annotations: dict[str, str] = {}
        self.reads = 0

    def topic(self, namespace, name):
        self.reads += 1
        status = {"branch": {"name": self.branch, "snapshotId": self.head}} if self.head else {}
        if self.annotations and self.reads > 2:
            status["branch"]["lastPublish"] = {
                "request": self.annotations["floe.dev/publish"],
                **(self.answer or {"snapshotId": self.head}),
            }
        return {
            "metadata": {"name": name},
            "spec": {"table": {"branch": self.branch} if self.branch else {}},
            "status": status,
        }

    def annotate(self, namespace, name, key, value):
        self.annotations[key] = value


def test_publish_names_the_head_the_status_shows_and_waits_for_the_answer(monkeypatch, capsys):
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    cluster = Branched()
    args = cli.argument_parser().parse_args(["publish", "orders", "-w"])
    assert cli.COMMANDS["publish"](cluster, "data", args) == 0
    assert cluster.annotations == {"floe.dev/publish": "42"}
    assert capsys.readouterr().out.splitlines()[-1] == "published: main is at snapshot 42"
    refused = Branched(answer={"snapshotId": "7", "error": "main diverged"})
    args = cli.argument_parser().parse_args(["publish", "orders", "--snapshot", "40", "-w"])
    assert cli.COMMANDS["publish"](refused, "data", args) == 1
    assert refused.annotations == {"floe.dev/publish": "40"}
    assert capsys.readouterr().out.splitlines()[-1] == "not published: main diverged"


@pytest.mark.parametrize(
    "cluster, argv, says",
    [
        (Branched(branch=None), [], "lands in main (no spec.table.branch)"),
        (Branched(head=None), [], "has no commit yet"),
        (Branched(), ["--snapshot", "head"], "takes a snapshot id"),
    ],
)
def test_publish_refuses_what_it_cannot_publish(cluster, argv, says):
    args = cli.argument_parser().parse_args(["publish", "orders", *argv])
    with pytest.raises(cli.Failure, match=says.replace("(", r"\(").replace(")", r"\)")):
        cli.COMMANDS["publish"](cluster, "data", args)
    assert cluster.annotations == {}
