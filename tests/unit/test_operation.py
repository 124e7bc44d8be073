"""KafkaIcebergOperation's planner: from what a visit saw of the operation, its topic and its
table, to the actions and the status."""

from __future__ import annotations

from dataclasses import replace

import pytest

from floe_operator.operation import (
    DeleteRun,
    OperationSpec,
    OperationStatus,
    OperationWorld,
    RestartJob,
    RollBack,
    Run,
    Snapshot,
    StartRun,
    plan,
    restart_value,
)

pytestmark = pytest.mark.unit

NOW_MS = 1_795_000_000_000  # 2026-11-18T11:06:40Z
# main's history, newest first: three commits a minute apart.
ANCESTRY = (
    Snapshot(30, NOW_MS - 60_000),
    Snapshot(20, NOW_MS - 120_000),
    Snapshot(10, NOW_MS - 180_000),
)


def world(rollback=None, **changes) -> OperationWorld:
    spec = OperationSpec.model_validate(
        {"topic": "orders", "type": "Rollback", "rollback": rollback or {"snapshotId": "20"}}
    )
    seen = OperationWorld(
        now_ms=NOW_MS,
        name="undo",
        uid="0123456789abcdef",
        generation=1,
        spec=spec,
        topic_found=True,
        tables=("analytics.orders",),
        ancestry=ANCESTRY,
        offsets={0: 300, 1: 290},
        offsets_at={20: {0: 200, 1: 190}},
        kafka_holds={0: 0, 1: 0},
    )
    return replace(seen, **changes)


def test_a_rollback_that_would_lose_rows_for_good_is_refused_and_changes_nothing():
    """Kafka's retention has passed offset 200 of partition 0: the rows main holds after
    snapshot 20 could not land again.  A route's table rolled back before its first commit
    would go on from where the other tables are.  Both refused, with what to do instead;
    while Kafka does not answer, the operation waits."""
    gone = plan(world(kafka_holds={0: 250, 1: 0}))
    assert gone.actions == () and gone.status["phase"] == "Failed"
    assert gone.status["message"] == (
        "cannot roll back: Kafka no longer holds records after snapshot 20 of analytics.orders "
        "that main holds and the job would have to land again (partition 0 offsets 200 to "
        "249: past the topic's retention), so their rows would be lost. Roll back to a later "
        "snapshot, or keep the rows and fix them with a Repair; nothing was changed"
    )
    assert plan(world(kafka_holds={0: 200, 1: 190})).actions == (
        RollBack("analytics.orders", 30, 20, {}),
    )  # Kafka holds every record after it
    route = plan(
        world(
            {"snapshotId": "20", "table": "analytics.orders_eu"},
            tables=("analytics.orders", "analytics.orders_eu"),
            offsets_at={20: {}},
        )
    )
    assert route.actions == () and route.status["phase"] == "Failed"
    assert route.status["message"].startswith(
        "cannot roll back: snapshot 20 of analytics.orders_eu is before the table's first "
        "commit of the topic's records, and a route's table without offsets goes on from "
        "where the topic's other tables are"
    )
    asking = plan(world(kafka_holds=None, kafka_error="KafkaException: timed out"))
    assert asking.actions == () and asking.status["phase"] == "Pending"
    assert asking.status["message"].endswith(
        "(the job lands them again): KafkaException: timed out"
    )


def test_a_rollback_to_the_first_half_of_an_upsert_batch_is_refused_and_before_skips_it():
    """Snapshot 25 is an upsert batch's delete (its keys' rows gone, its records not yet added
    by snapshot 30): a state no batch left the table in.  Named, it is refused with the
    snapshots before and after the batch; a time that falls on it picks the one before."""
    torn = (ANCESTRY[0], Snapshot(25, NOW_MS - 61_000, torn=True), *ANCESTRY[1:])
    refused = plan(world({"snapshotId": "25"}, ancestry=torn))
    assert refused.actions == () and refused.status["phase"] == "Failed"
    assert refused.status["message"] == (
        "snapshot 25 is the first half of an upsert batch (its keys' rows deleted, its "
        "records not yet added): the table was never in that state between batches. Roll "
        "back to 20 (before the batch) or 30 (after it); nothing was changed"
    )
    before = plan(world({"before": "2026-11-18T11:05:39Z"}, ancestry=torn))  # 25's second
    assert before.actions == (RollBack("analytics.orders", 30, 20, {}),)


def rolled_back() -> dict:
    return {
        "table": "analytics.orders",
        "fromSnapshotId": "30",
        "toSnapshotId": "20",
        "fromOffsets": {"0": 300, "1": 290},
        "toOffsets": {"0": 200, "1": 190},
        "rolledBackAt": "2026-11-18T11:06:40Z",
    }


def test_a_rollback_moves_main_back_then_restarts_the_job_then_waits_for_the_records_again():
    first = plan(world())
    assert first.actions == (RollBack("analytics.orders", 30, 20, {}),)
    assert first.actions[0].record == rolled_back()
    assert first.status["phase"] == "Running"
    assert first.status["startedAt"] == "2026-11-18T11:06:40Z"
    # Its record on the table says it moved main: the job is restarted (once: its own value).
    second = plan(world(record=rolled_back(), offsets={0: 200, 1: 190}, status=first.status))
    assert second.actions == (RestartJob("orders", "rollback undo 01234567"),)
    assert second.status["rollback"]["jobRestarted"] is True
    assert second.status["startedAt"] == "2026-11-18T11:06:40Z"
    relanding = plan(
        world(
            record=rolled_back(),
            offsets={0: 250, 1: 190},
            topic_restart=restart_value(world()),
            status=second.status,
        )
    )
    assert relanding.actions == ()
    assert relanding.status["phase"] == "Running"
    assert relanding.status["message"].endswith(
        "the job lands the records after it again: 150 to go"
    )
    done = plan(
        world(
            record=rolled_back(),
            offsets={0: 301, 1: 290},
            topic_restart=restart_value(world()),
            status=relanding.status,
        )
    )
    assert done.status["phase"] == "Succeeded"
    assert done.status["finishedAt"] == "2026-11-18T11:06:40Z"
    assert done.status["rollback"] == {**rolled_back(), "jobRestarted": True}
    # An operation that ended is not visited again.
    assert plan(world(status=done.status)) == plan(world(status={"phase": "Failed"}))
    assert plan(world(status=done.status)).actions == ()
    for status in (first.status, second.status, relanding.status, done.status):
        OperationStatus.model_validate(status)


def test_a_rollback_whose_records_kafka_deletes_before_they_land_again_fails_saying_where_they_are():  # noqa: E501 - the name is the test's sentence
    """Main moved back, then retention deleted records after the snapshot before the job
    landed them again: the job stops with DataLoss, and the operation ends Failed (not Running
    for ever) naming the snapshot that still holds their rows.  A DataLoss from before the
    roll back is not this one's."""
    stopped = (
        "the job stopped (exit code 3): Kafka no longer has records the table has not got",
        "2026-11-18T11:07:00Z",
    )
    waiting = {
        "record": rolled_back(),
        "offsets": {0: 250, 1: 190},
        "topic_restart": restart_value(world()),
    }
    failed = plan(world(**waiting, topic_data_loss=stopped))
    assert failed.actions == () and failed.status["phase"] == "Failed"
    assert failed.status["message"] == (
        "main of analytics.orders was moved back to snapshot 20, but the job stopped before "
        "landing the records after it again (150 to go): Kafka no longer holds them (the job "
        "stopped (exit code 3): Kafka no longer has records the table has not got). Their rows "
        "are still in snapshot 30 until it expires: restore them with CALL "
        "<catalog>.system.set_current_snapshot('analytics.orders', 30), then delete the job's "
        "SparkApplication so that it starts again"
    )
    earlier = plan(world(**waiting, topic_data_loss=(stopped[0], "2026-11-18T11:00:00Z")))
    assert earlier.status["phase"] == "Running"


def test_before_picks_the_newest_snapshot_committed_at_or_before_the_time():
    planned = plan(world({"before": "2026-11-18T11:04:40Z"}))  # snapshot 20's second
    assert planned.actions[0].to_snapshot_id == 20
    planned = plan(world({"before": "2026-11-18T11:04:39Z"}))
    assert planned.actions[0].to_snapshot_id == 10
    too_early = plan(world({"before": "2026-11-17T00:00:00Z"}))
    assert too_early.status["phase"] == "Failed"
    assert "no snapshot committed at or before 2026-11-17T00:00:00Z" in too_early.status["message"]


def test_what_cannot_be_rolled_back_fails_and_changes_nothing():
    unknown = plan(world({"snapshotId": "99"}))
    assert (unknown.actions, unknown.status["phase"]) == ((), "Failed")
    assert "snapshot 99 is not in main's history" in unknown.status["message"]
    other = plan(world({"snapshotId": "20", "table": "analytics.elsewhere"}))
    assert other.status["phase"] == "Failed"
    assert "not one of KafkaIcebergTopic orders's tables" in other.status["message"]
    there = plan(world({"snapshotId": "30"}))
    assert (there.actions, there.status["phase"]) == ((), "Succeeded")
    invalid = plan(world(spec=None, invalid="rollback needs exactly one of snapshotId and before"))
    assert invalid.status["phase"] == "Failed"


def test_an_operation_waits_for_its_topic_and_a_table_it_cannot_read():
    missing = plan(world(topic_found=False))
    assert (missing.actions, missing.status["phase"]) == ((), "Pending")
    assert missing.status["message"] == "waiting for KafkaIcebergTopic orders in this namespace"
    unread = plan(world(table_error="OSError: timed out"))
    assert unread.status["phase"] == "Pending"
    assert "OSError: timed out" in unread.status["message"]


def test_the_spec_needs_exactly_one_target():
    from pydantic import ValidationError

    for rollback in ({}, {"snapshotId": "1", "before": "2026-11-18T00:00:00Z"}):
        with pytest.raises(ValidationError, match="exactly one of snapshotId and before"):
            OperationSpec.model_validate(
                {"topic": "orders", "type": "Rollback", "rollback": rollback}
            )
    with pytest.raises(ValidationError, match="type Rollback needs the rollback section"):
        OperationSpec.model_validate({"topic": "orders", "type": "Rollback"})


def test_a_roll_back_and_its_record_are_one_commit_that_holds_only_where_main_was(tmp_path):
    """On a real table (PyIceberg's SQL catalog): main moves back and the record is written
    together; a table loaded before a writer's commit cannot roll back over it."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import CommitFailedException

    from floe_sparkapp.ledger import ancestors, operation_record, roll_back

    catalog = SqlCatalog(
        "lake", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path / 'wh'}"
    )
    catalog.create_namespace("analytics")
    rows = pa.table({"id": pa.array([1], pa.int64())})
    table = catalog.create_table("analytics.orders", rows.schema)
    for _ in range(3):
        table.append(rows)
    history = [s.snapshot_id for s in ancestors(table)]
    assert len(history) == 3
    stale = catalog.load_table("analytics.orders")
    table.append(rows)  # a writer's commit after the stale load
    with pytest.raises(CommitFailedException):
        roll_back(stale, history[1], "op-1", {"toSnapshotId": str(history[1])})
    fresh = catalog.load_table("analytics.orders")
    roll_back(fresh, history[1], "op-1", {"toSnapshotId": str(history[1])})
    table = catalog.load_table("analytics.orders")
    assert table.current_snapshot().snapshot_id == history[1]
    assert operation_record(table, "op-1") == {"toSnapshotId": str(history[1])}
    assert operation_record(table, "op-2") is None
    assert len(table.scan().to_arrow()) == 2


# --- Repair ------------------------------------------------------------------------------------


def repair_world(repair=None, **changes) -> OperationWorld:
    spec = OperationSpec.model_validate(
        {"topic": "orders", "type": "Repair", "repair": {} if repair is None else repair}
    )
    seen = OperationWorld(
        now_ms=NOW_MS,
        name="fix",
        uid="0123456789abcdef",
        generation=1,
        spec=spec,
        topic_found=True,
        tables=("analytics.orders",),
    )
    return replace(seen, **changes)


def test_a_repair_starts_its_spark_job_and_shows_what_it_has_decoded_so_far():
    first = plan(repair_world())
    assert first.actions == (StartRun(1),)
    assert first.status["phase"] == "Running" and first.status["attempts"] == 1
    running = plan(
        repair_world(run=Run("floe-op-fix-1", 1, "RUNNING"), progress=(2, 20), status=first.status)
    )
    assert running.actions == ()
    assert running.status["message"] == (
        "attempt 1 of the repair of analytics.orders is "
        "running: 20 rows decoded so far, in 2 commits"
    )
    assert running.status["repair"] == {
        "table": "analytics.orders",
        "dryRun": False,
        "repaired": 20,
        "commits": 2,
    }
    assert running.status["application"] == "floe-op-fix-1"
    record = {
        "type": "Repair",
        "dryRun": False,
        "selected": 40,
        "repaired": 40,
        "commits": 4,
        "stayRaw": 2,
        "stayRawByReason": {"not_framed": {"count": 2, "errors": ["x"]}},
    }
    done = plan(
        repair_world(run=Run("floe-op-fix-1", 1, "COMPLETED"), record=record, status=running.status)
    )
    assert done.actions == ()
    assert done.status["phase"] == "Succeeded"
    assert done.status["message"] == (
        "decoded 40 raw rows of analytics.orders again, in 4 commits; 2 stay raw (not_framed: 2)"
    )
    assert done.status["repair"] == {
        "table": "analytics.orders",
        **{k: v for k, v in record.items() if k != "type"},
    }
    OperationStatus.model_validate(done.status)  # what the CRD's status schema keeps


def test_a_repair_says_which_dead_letters_it_left_out_and_what_to_do_instead():
    from floe_sparkapp.repair import LEFT_OUT

    why = LEFT_OUT["uncommitted"]
    letters = {
        "read": 8,
        "missing": 0,
        "landed": 0,
        "stayUndecodable": 0,
        "leftOut": {"uncommitted": {"count": 8, "why": why}},
    }
    record = {
        "type": "Repair",
        "dryRun": False,
        "selected": 0,
        "repaired": 0,
        "commits": 0,
        "stayRaw": 0,
        "stayRawByReason": {},
        "deadLetters": letters,
    }
    done = plan(repair_world(run=Run("floe-op-fix-1", 1, "COMPLETED"), record=record))
    assert done.status["phase"] == "Succeeded"
    assert done.status["message"] == (
        "decoded 0 raw rows of analytics.orders again, in 0 commits; 0 stay raw; 0 records of "
        "the dead-letter topic the table had no row for landed; 8 records of the dead-letter "
        f"topic left out (uncommitted): {why}"
    )
    assert done.status["repair"]["deadLetters"] == letters
    OperationStatus.model_validate(done.status)  # what the CRD's status schema keeps
    dry = plan(
        repair_world(
            {"dryRun": True},
            run=Run("floe-op-fix-1", 1, "COMPLETED"),
            record={
                **record,
                "dryRun": True,
                "wouldRepair": 0,
                "deadLetters": {**letters, "wouldLand": 0},
            },
        )
    )
    assert dry.status["message"].endswith(
        f"; 8 records of the dead-letter topic left out (uncommitted): {why}"
    )


def test_a_failed_attempt_is_started_again_up_to_three_times():
    failed = Run("floe-op-fix-1", 1, "FAILED", "driver container failed with ExitCode: 137")
    again = plan(repair_world(run=failed, status={"attempts": 1}))
    assert again.actions == (DeleteRun("floe-op-fix-1"), StartRun(2))
    assert again.status["attempts"] == 2
    assert again.status["lastError"] == "driver container failed with ExitCode: 137"
    assert again.status["message"].startswith("attempt 1 failed (driver container failed")
    # The operator crashed after deleting the application: its status still says 2.
    assert plan(repair_world(status=again.status)).actions == (StartRun(3),)
    last = plan(
        repair_world(run=replace(failed, name="floe-op-fix-3", attempt=3), status={"attempts": 3})
    )
    assert last.actions == ()
    assert last.status["phase"] == "Failed"
    assert last.status["message"] == (
        "the repair's Spark job failed 3 times, the last with: "
        "driver container failed with ExitCode: 137"
    )


def test_a_dry_run_says_what_would_change_and_why_the_rest_would_not():
    record = {
        "type": "Repair",
        "dryRun": True,
        "selected": 12,
        "wouldRepair": 10,
        "stayRaw": 2,
        "stayRawByReason": {"malformed": {"count": 2, "errors": []}},
    }
    done = plan(
        repair_world({"dryRun": True}, run=Run("floe-op-fix-1", 1, "COMPLETED"), record=record)
    )
    assert done.status["phase"] == "Succeeded"
    assert done.status["message"] == (
        "dry run: 10 of the 12 selected raw rows of "
        "analytics.orders would be decoded, 2 would stay raw "
        "(malformed: 2)"
    )
    assert done.status["repair"]["wouldRepair"] == 10


def test_a_repair_that_cannot_run_fails_at_once_with_what_to_change():
    refused = plan(repair_world(refused="table analytics.orders is an upsert table: ..."))
    assert refused.actions == () and refused.status["phase"] == "Failed"
    assert refused.status["message"].startswith(
        "cannot repair: table analytics.orders is an upsert table"
    )
    elsewhere = plan(repair_world({"table": "analytics.other"}))
    assert elsewhere.status["phase"] == "Failed"
    assert (
        "analytics.other is not one of KafkaIcebergTopic orders's tables"
        in elsewhere.status["message"]
    )


def test_the_repair_spec_checks_its_ranges():
    with pytest.raises(ValueError, match=r"fromOffset must be below repair.toOffset"):
        OperationSpec.model_validate(
            {"topic": "t", "type": "Repair", "repair": {"fromOffset": 5, "toOffset": 5}}
        )
    with pytest.raises(ValueError, match=r"fromTime must be before repair.toTime"):
        OperationSpec.model_validate(
            {
                "topic": "t",
                "type": "Repair",
                "repair": {"fromTime": "2026-11-27T10:00:00Z", "toTime": "2026-11-27T09:00:00Z"},
            }
        )
    with pytest.raises(ValueError, match="type Repair needs the repair section"):
        OperationSpec.model_validate({"topic": "t", "type": "Repair"})
    with pytest.raises(ValueError):
        OperationSpec.model_validate(
            {"topic": "t", "type": "Repair", "repair": {"reasons": ["no_such_reason"]}}
        )


def test_repair_refuses_what_it_cannot_repair():
    from floe_operator.resource import KafkaIcebergTopicSpec

    base = {
        "kafka": {"bootstrapServers": "k:9092", "topic": "t"},
        "value": {"format": "avro", "schemaRegistry": {"url": "http://r", "subject": "s"}},
        "table": {
            "catalog": {"name": "c", "uri": "jdbc:sqlite:/x.db", "warehouse": "file:///w"},
            "identifier": "a.t",
        },
    }
    spec = OperationSpec.model_validate({"topic": "t", "type": "Repair", "repair": {}}).repair
    topic = KafkaIcebergTopicSpec.model_validate(base)
    assert spec.refused(topic, topic.table) is None
    upsert = KafkaIcebergTopicSpec.model_validate(
        {**base, "table": {**base["table"], "mode": "upsert"}}
    )
    assert "is an upsert table" in spec.refused(upsert, upsert.table)
    raw = KafkaIcebergTopicSpec.model_validate({**base, "value": {"format": "raw"}})
    assert "value.format is raw" in spec.refused(raw, raw.table)


def test_an_attempt_runs_the_topics_job_config_under_the_operations_name_and_labels():
    from floe_operator.render import Topic, operation_application
    from floe_operator.settings import OperatorSettings

    topic = Topic.from_body(
        {
            "metadata": {"namespace": "data", "name": "orders", "uid": "u1"},
            "spec": {
                "kafka": {"bootstrapServers": "k:9092", "topic": "t"},
                "value": {"format": "raw"},
                "table": {
                    "catalog": {"name": "c", "uri": "jdbc:sqlite:/x", "warehouse": "file:///w"},
                    "identifier": "a.t",
                },
            },
        }
    )
    app = operation_application(topic, OperatorSettings(), "fix", "uid-1", 2, '{"x":1}')
    meta = app["metadata"]
    assert meta["name"] == "floe-op-fix-2"
    assert meta["labels"]["floe.dev/operation-uid"] == "uid-1"
    assert meta["labels"]["floe.dev/attempt"] == "2"
    assert "floe.dev/topic" not in meta["labels"]  # the topic's visits never see it
    assert meta["ownerReferences"][0]["kind"] == "KafkaIcebergOperation"
    assert app["spec"]["arguments"] == [
        "operate",
        "--config",
        "/etc/floe/job/job.json",
        "--operation",
        '{"x":1}',
    ]
    for role in ("driver", "executor"):
        labels = app["spec"][role]["labels"]
        assert "floe.dev/topic" not in labels and labels["floe.dev/operation-uid"] == "uid-1"
    assert app["spec"]["restartPolicy"] == {"type": "Never"}  # the operator starts attempts


# --- Backfill ----------------------------------------------------------------------------------


def test_a_backfill_runs_as_a_spark_job_and_says_what_it_landed_where():
    spec = OperationSpec.model_validate(
        {"topic": "orders", "type": "Backfill", "backfill": {"recordsPerCommit": 10}}
    )
    seen = OperationWorld(
        now_ms=NOW_MS,
        name="fill",
        uid="0123456789abcdef",
        generation=1,
        spec=spec,
        topic_found=True,
        tables=("analytics.orders",),
    )
    first = plan(seen)
    assert first.actions == (StartRun(1),)
    running = plan(
        replace(
            seen, run=Run("floe-op-fill-1", 1, "RUNNING"), progress=(3, 30), status=first.status
        )
    )
    assert running.status["message"] == (
        "attempt 1 of the backfill of analytics.orders is "
        "running: 30 rows landed so far, in 3 commits"
    )
    assert running.status["backfill"] == {"table": "analytics.orders", "landed": 30, "commits": 3}
    record = {
        "type": "Backfill",
        "ranges": {"1": {"from": 0, "to": 20}, "0": {"from": 5, "to": 25}},
        "leftOut": {"2": "the table has no offsets for it yet: ..."},
        "landed": 40,
        "commits": 4,
    }
    done = plan(
        replace(
            seen, run=Run("floe-op-fill-1", 1, "COMPLETED"), record=record, status=running.status
        )
    )
    assert done.status["phase"] == "Succeeded"
    assert done.status["message"] == (
        "landed 40 records in analytics.orders, in 4 commits (partition 0 offsets 5 to 25, "
        "partition 1 offsets 0 to 20; the rest were there already); left out: 1 partition(s)"
    )
    assert done.status["backfill"]["ranges"]["0"] == {"from": 5, "to": 25}
    OperationStatus.model_validate(done.status)
    routed = plan(
        replace(
            seen,
            run=Run("floe-op-fill-1", 1, "COMPLETED"),
            record={**record, "leftOut": {}, "heldElsewhere": 7},
            status=running.status,
        )
    )
    assert routed.status["message"].endswith(
        "the rest were there already); 7 records left in the topic's other tables, which "
        "took them before this table's route existed"
    )
    assert routed.status["backfill"]["heldElsewhere"] == 7
    OperationStatus.model_validate(routed.status)
    with pytest.raises(ValueError, match="type Backfill needs the backfill section"):
        OperationSpec.model_validate({"topic": "t", "type": "Backfill"})


def test_an_upsert_table_is_not_backfilled():
    from floe_operator.resource import KafkaIcebergTopicSpec

    topic = KafkaIcebergTopicSpec.model_validate(
        {
            "kafka": {"bootstrapServers": "k:9092", "topic": "t"},
            "value": {"format": "avro", "schemaRegistry": {"url": "http://r", "subject": "s"}},
            "table": {
                "catalog": {"name": "c", "uri": "jdbc:sqlite:/x.db", "warehouse": "file:///w"},
                "identifier": "a.t",
                "mode": "upsert",
            },
        }
    )
    spec = OperationSpec.model_validate({"topic": "t", "type": "Backfill", "backfill": {}})
    assert (
        "older records landed after newer ones would undo their changes"
        in spec.backfill.refused(topic, topic.table)
    )


# --- Replay ------------------------------------------------------------------------------------


def test_a_replay_says_what_it_produced_where():
    spec = OperationSpec.model_validate(
        {"topic": "orders", "type": "Replay", "replay": {"topic": "orders-copy"}}
    )
    seen = OperationWorld(
        now_ms=NOW_MS,
        name="copy",
        uid="0123456789abcdef",
        generation=1,
        spec=spec,
        topic_found=True,
        tables=("analytics.orders",),
    )
    running = plan(replace(seen, run=Run("floe-op-copy-1", 1, "RUNNING"), status={"attempts": 1}))
    assert running.status["message"] == ("attempt 1 of the replay of analytics.orders is running")
    midway = plan(
        replace(
            seen,
            run=Run("floe-op-copy-1", 1, "RUNNING"),
            replayed={0: 5, 1: 7},
            status={"attempts": 1},
        )
    )
    assert midway.status["replay"] == {
        "table": "analytics.orders",
        "topic": "orders-copy",
        "replayedThrough": {"0": 5, "1": 7},
    }
    record = {
        "type": "Replay",
        "topic": "orders-copy",
        "snapshotId": "42",
        "records": 22,
        "partitions": {"0": {"from": 0, "to": 11}},
        "producedThisAttempt": 18,
        "transactionsThisAttempt": 5,
    }
    done = plan(replace(seen, run=Run("floe-op-copy-1", 1, "COMPLETED"), record=record))
    assert done.status["message"] == (
        "produced the 22 rows of analytics.orders at snapshot 42 "
        "to topic orders-copy, each partition's in offset order, "
        "each once"
    )
    assert done.status["replay"]["records"] == 22
    OperationStatus.model_validate(done.status)


def test_replay_refuses_its_own_topic_a_cdc_table_and_protobuf():
    from floe_operator.resource import KafkaIcebergTopicSpec

    base = {
        "kafka": {"bootstrapServers": "k:9092", "topic": "t"},
        "value": {"format": "avro", "schemaRegistry": {"url": "http://r", "subject": "s"}},
        "table": {
            "catalog": {"name": "c", "uri": "jdbc:sqlite:/x.db", "warehouse": "file:///w"},
            "identifier": "a.t",
        },
    }

    def refused(replay: dict, **changes) -> str | None:
        topic = KafkaIcebergTopicSpec.model_validate({**base, **changes})
        spec = OperationSpec.model_validate({"topic": "t", "type": "Replay", "replay": replay})
        return spec.replay.refused(topic, topic.table)

    assert refused({"topic": "copy"}) is None
    assert "is the topic the table lands" in refused({"topic": "t"})
    assert "is a cdc table" in refused({"topic": "copy"}, table={**base["table"], "mode": "cdc"})
    assert "protobuf" in refused(
        {"topic": "copy"},
        value={"format": "protobuf", "schemaRegistry": {"url": "http://r", "subject": "s"}},
    )


def test_a_replay_keeps_the_rows_timestamps_unless_it_is_told_to_stamp_them_now():
    from pydantic import ValidationError

    def replay(**fields):
        return OperationSpec.model_validate(
            {"topic": "t", "type": "Replay", "replay": {"topic": "copy", **fields}}
        ).replay

    assert replay().timestamps == "original"
    assert replay(timestamps="now").model_dump(by_alias=True)["timestamps"] == "now"
    with pytest.raises(ValidationError):
        replay(timestamps="later")


def test_rows_that_keep_their_timestamps_are_refused_where_the_topics_retention_deletes_them():
    """Only a topic that deletes by time, and keeps the producer's timestamps, deletes the rows
    older than its retention; the refusal says how many, the oldest, and what to do."""
    from floe_sparkapp.replay import retention_horizon, retention_refusal

    week = 7 * 86_400_000
    deletes = {
        "cleanup.policy": "delete",
        "retention.ms": str(week),
        "message.timestamp.type": "CreateTime",
    }
    assert retention_horizon(deletes, NOW_MS) == NOW_MS - week
    assert (
        retention_horizon({**deletes, "cleanup.policy": "compact,delete"}, NOW_MS) == NOW_MS - week
    )
    assert retention_horizon({**deletes, "cleanup.policy": "compact"}, NOW_MS) is None
    assert retention_horizon({**deletes, "retention.ms": "-1"}, NOW_MS) is None
    assert retention_horizon({**deletes, "message.timestamp.type": "LogAppendTime"}, NOW_MS) is None
    assert retention_refusal("copy", deletes, 0, NOW_MS - week) is None
    assert retention_refusal("copy", deletes, 12, 1_790_000_000_000) == (
        "topic copy deletes records older than 7 days (retention.ms 604800000), and 12 of the "
        "rows to replay are older (the oldest from 2026-09-21T14:13:20Z): with their "
        "timestamps they would be deleted soon after they are produced. Set "
        "replay.timestamps: now (each record stamped when produced, its original timestamp "
        "kept in header floe.original-timestamp), or raise the topic's retention.ms (-1 keeps "
        "records for ever)"
    )
    assert "older than 1 hour (retention.ms 3600000)" in retention_refusal(
        "copy", {**deletes, "retention.ms": "3600000"}, 1, NOW_MS - week
    )


def test_a_row_stamped_now_carries_its_timestamp_in_a_header():
    """timestamps now: no timestamp for the producer (it stamps the record), the row's in
    header floe.original-timestamp after the row's own headers; original: the row's."""
    import datetime as dt

    from pyspark.sql import Row

    from floe_sparkapp.contract import ReplaySpec
    from floe_sparkapp.replay import Encoder, Replay

    at = dt.datetime.fromtimestamp(1_790_000_000).replace(microsecond=123_000)  # naive, local
    row = Row(
        key=b"k",
        value_raw=b"v",
        kafka=Row(offset=3, timestamp=at, headers=[Row(key="trace", value=bytearray(b"t1"))]),
    )
    replay = Replay.__new__(Replay)
    replay.encoder = Encoder(None, "avro")
    replay.spec = ReplaySpec(topic="copy", timestamps="now")
    assert replay._record(row, 1) == {
        "key": b"k",
        "value": b"v",
        "partition": 1,
        "headers": [("trace", b"t1"), ("floe.original-timestamp", b"1790000000123")],
    }
    replay.spec = ReplaySpec(topic="copy")
    assert replay._record(row, 1) == {
        "key": b"k",
        "value": b"v",
        "partition": 1,
        "headers": [("trace", b"t1")],
        "timestamp": 1_790_000_000_123,
    }


def test_a_row_is_encoded_again_with_its_writer_schema():
    """What Spark reads from the table (rows, naive timestamps, maps as dicts, decimals) is
    written back with the writer schema: fastavro reads the record that was produced."""
    import datetime as dt
    import io
    import json
    from decimal import Decimal

    import fastavro

    from floe_sparkapp.replay import _datum, _named

    schema = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            },
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "tags", "type": {"type": "map", "values": "string"}},
            {
                "name": "lines",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Line",
                        "fields": [{"name": "sku", "type": "string"}],
                    },
                },
            },
            {"name": "again", "type": ["null", "Line"], "default": None},
            {"name": "either", "type": ["null", "int", "string"], "default": None},
            {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW"]}},
            {"name": "blob", "type": "bytes"},
        ],
    }
    at = dt.datetime(2026, 11, 27, 10, 0, tzinfo=dt.timezone.utc)
    row = {
        "id": 7,
        "price": Decimal("1.25"),
        "at": at.astimezone().replace(tzinfo=None),
        "tags": {"n": "7"},
        "lines": [{"sku": "s7"}],
        "again": {"sku": "s8"},
        "either": {"member0": None, "member1": "x"},
        "status": "NEW",
        "blob": bytearray(b"\x01"),
        "added_later": 3,
    }
    named: dict = {}
    _named(schema, named)
    buffer = io.BytesIO()
    parsed = fastavro.parse_schema(json.loads(json.dumps(schema)))
    fastavro.schemaless_writer(buffer, parsed, _datum(row, schema, named))
    buffer.seek(0)
    assert fastavro.schemaless_reader(buffer, parsed) == {
        "id": 7,
        "price": Decimal("1.25"),
        "at": at,
        "tags": {"n": "7"},
        "lines": [{"sku": "s7"}],
        "again": {"sku": "s8"},
        "either": "x",
        "status": "NEW",
        "blob": b"\x01",
    }
