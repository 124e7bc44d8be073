"""The planner: from what a visit observed to the actions and the status, without a cluster."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
from pyiceberg.types import IntegerType, LongType, NestedField, StringType, StructType

from floe_operator import render
from floe_operator.plan import (
    Apply,
    ApplyApproved,
    ClaimTable,
    CreateApp,
    CreateTable,
    DeleteApp,
    DeleteCronJob,
    DropTable,
    Event,
    EvolveTable,
    Log,
    Wait,
    plan,
    plan_delete,
)
from floe_operator.settings import OperatorSettings
from floe_operator.view import App, Children, Deletion, RegistryView, TableView, World

pytestmark = pytest.mark.unit

NOW_MS = 1_795_000_000_000  # 2026-11-18T11:06:40Z
SETTINGS = OperatorSettings(spark_image="floe/floe-spark:test")
BODY = {
    "metadata": {"name": "orders", "namespace": "data", "uid": "u-1", "generation": 2},
    "spec": {
        "kafka": {"bootstrapServers": "kafka:9092", "topic": "orders"},
        "value": {
            "format": "avro",
            "schemaRegistry": {"url": "http://registry:8081", "subject": "orders-value"},
        },
        "table": {
            "catalog": {"uri": "jdbc:sqlite:/lake/catalog.db", "warehouse": "file:///lake/wh"},
            "identifier": "analytics.orders",
        },
        "maintenance": {
            "compaction": {"enabled": True},
            "expireSnapshots": {"enabled": True},
            "removeOrphans": {"enabled": False},
            "rewriteManifests": {"enabled": False},
        },
    },
}
V1 = StructType(
    NestedField(10, "id", LongType(), required=False),
    NestedField(11, "quantity", IntegerType(), required=False),
)
V2 = StructType(*V1.fields, NestedField(12, "note", StringType(), required=False))
V3 = StructType(
    NestedField(10, "id", LongType(), required=False),
    NestedField(11, "quantity", StringType(), required=False),
)


def topic_of(**spec_changes):
    body = copy.deepcopy(BODY)
    for path, value in spec_changes.items():
        node = body["spec"]
        *parents, leaf = path.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return render.Topic.from_body(body)


TOPIC = topic_of()


def fingerprint(topic=TOPIC):
    return render.spark_application(topic, SETTINGS)["metadata"]["annotations"][
        "floe.dev/job-fingerprint"
    ]


def steady(topic=TOPIC, **changes) -> World:
    """A resource whose table, job and CronJobs are all as its spec says, and whose job runs."""
    cron_jobs = {}
    for cron_job in render.cron_jobs(topic, SETTINGS):
        body, digest = render.stamped(cron_job)
        cron_jobs[body["metadata"]["name"]] = digest
    world = World(
        now_ms=NOW_MS,
        children=Children(
            app=App(
                "floe-orders",
                state="RUNNING",
                attempts=1,
                fingerprint=fingerprint(topic),
                generation="2",
            ),
            config_map=render.stamped(render.config_map(topic, SETTINGS))[1],
            cron_jobs=cron_jobs,
        ),
        table=TableView(
            exists=True,
            owner="data/orders",
            value=V1,
            schema_id=1,
            snapshot_id=42,
            committed_at_ms=NOW_MS - 5000,
            offsets={0: 10},
            vtts_ms=NOW_MS - 7000,
        ),
        registry=RegistryView(version=1, value=V1),
        latest_offsets={0: 12},
    )
    return replace(world, **changes)


def with_app(world: World, **changes) -> World:
    return replace(
        world, children=replace(world.children, app=replace(world.children.app, **changes))
    )


def conditions(status):
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def kinds(actions):
    return [f"Apply{a.kind}" if isinstance(a, Apply) else type(a).__name__ for a in actions]


FAILED = {
    "state": "FAILED",
    "error": "driver container failed with ExitCode: 1, Reason: Error",
    "terminated_at": "2026-11-18T11:06:35Z",
}  # 5 s before NOW_MS
FAILED_ON_DATA_LOSS = dict(FAILED, error="driver container failed with ExitCode: 3")
APPLICATION_RECORD = {
    "sparkApplication": {
        "name": "floe-orders",
        "failovers": 2,
        "lastFailoverTime": "2026-11-18T10:00:00Z",
    }
}

# (case, world, previous status, approved version, actions, Ready, phase). The status is the
# one of the world observed: the handler plans again on the world the actions left.
CASES = [
    ("steady: nothing to do", steady(), {}, None, [], ("True", "Landing"), "Running"),
    (
        "a new resource: table, config, job and CronJobs are created",
        World(now_ms=NOW_MS, registry=RegistryView(1, V1)),
        {},
        None,
        ["CreateTable", "ApplyConfigMap", "CreateApp", "ApplyCronJob", "ApplyCronJob"],
        ("False", "Pending"),
        "Pending",
    ),
    (
        "the registry cannot be reached: no table is created from a guess",
        World(now_ms=NOW_MS, registry=RegistryView(error="ConnectionError: refused")),
        {},
        None,
        ["ApplyConfigMap", "CreateApp", "ApplyCronJob", "ApplyCronJob"],
        ("False", "RegistryUnavailable"),
        "Pending",
    ),
    (
        "the catalog cannot be reached: nothing is made or changed, the job goes on",
        steady(table=TableView(error="ConnectionError: reset")),
        {},
        None,
        [],
        ("False", "CatalogUnavailable"),
        "Pending",
    ),
    (
        "a table that could not be read is neither claimed nor changed",
        steady(
            table=TableView(exists=True, error="OSError: metadata unreadable"),
            registry=RegistryView(2, V2),
        ),
        {},
        None,
        [],
        ("True", "Landing"),
        "Running",
    ),
    (
        "a table nobody claimed is claimed",
        steady(table=replace(steady().table, owner=None)),
        {},
        None,
        ["ClaimTable"],
        ("True", "Landing"),
        "Running",
    ),
    (
        "a table another resource writes: no job, the user is told",
        steady(table=replace(steady().table, owner="data/other")),
        {},
        None,
        ["DeleteApp"],
        ("False", "TableInUse"),
        "Failed",
    ),
    (
        "a table whose writer is gone is taken over",
        steady(table=replace(steady().table, owner="data/renamed"), owner_claims_table=False),
        {},
        None,
        ["ClaimTable", "Event"],
        ("True", "Landing"),
        "Running",
    ),
    (
        "a table floe did not make: no job, the user is told",
        steady(
            table=TableView(
                exists=True, layout_error="table analytics.orders exists but is not a floe table"
            )
        ),
        {},
        None,
        ["DeleteApp"],
        ("False", "LayoutMismatch"),
        "Failed",
    ),
    (
        "an additive registry version evolves the table",
        steady(registry=RegistryView(2, V2)),
        {},
        None,
        ["EvolveTable"],
        ("True", "Landing"),
        "Running",
    ),
    (
        "a breaking registry version waits for its approval",
        steady(registry=RegistryView(3, V3)),
        {},
        "2",
        [],
        ("True", "Landing"),
        "Running",
    ),
    (
        "an approved breaking version is applied",
        steady(registry=RegistryView(3, V3)),
        {},
        "3",
        ["ApplyApproved"],
        ("True", "Landing"),
        "Running",
    ),
    (
        "a spec change that the job depends on restarts it",
        with_app(steady(), fingerprint="older", generation="1"),
        {},
        None,
        ["Event", "DeleteApp", "CreateApp"],
        ("False", "Starting"),
        "Pending",
    ),
    (
        "a failed job waits for its backoff",
        with_app(steady(), **FAILED),
        {},
        None,
        [],
        ("False", "JobFailed"),
        "Degraded",
    ),
    (
        "a failed job is recreated after its backoff",
        replace(with_app(steady(), **FAILED), now_ms=NOW_MS + 60_000),
        {},
        None,
        ["Event", "DeleteApp", "CreateApp"],
        ("False", "JobFailed"),
        "Degraded",
    ),
    (
        "a job that stopped on data loss is left for the user",
        replace(with_app(steady(), **FAILED_ON_DATA_LOSS), now_ms=NOW_MS + 600_000),
        APPLICATION_RECORD,
        None,
        [],
        ("False", "DataLoss"),
        "Failed",
    ),
    (
        "a job that completed is recreated",
        replace(
            with_app(steady(), state="COMPLETED", terminated_at="2026-11-18T11:06:00Z"),
            now_ms=NOW_MS + 60_000,
        ),
        {},
        None,
        ["Event", "DeleteApp", "CreateApp"],
        ("False", "JobCompleted"),
        "Pending",
    ),
    (
        "a suspended resource's job is deleted",
        steady(topic_of(suspend=True)),
        {},
        None,
        ["DeleteApp"],
        ("False", "Suspended"),
        "Suspended",
    ),
    (
        "a disabled action's CronJob is removed",
        steady(
            children=replace(
                steady().children,
                cron_jobs={**steady().children.cron_jobs, "floe-orders-remove-orphans": "x"},
            )
        ),
        {},
        None,
        ["DeleteCronJob"],
        ("True", "Landing"),
        "Running",
    ),
    (
        "an application under an older name is deleted before the new one is made",
        steady(children=replace(steady().children, app=None, other_apps=("floe-orders-cut",))),
        {},
        None,
        ["DeleteApp", "CreateApp"],
        ("False", "Starting"),
        "Pending",
    ),
    (
        "a changed maintenance setting updates the config, not the job",
        steady(),
        {},
        None,
        ["ApplyConfigMap"],
        ("True", "Landing"),
        "Running",
    ),
]


@pytest.mark.parametrize(
    "case, world, previous, approved, actions, ready, phase", CASES, ids=[c[0] for c in CASES]
)
def test_plan(case, world, previous, approved, actions, ready, phase):
    topic = (
        topic_of(suspend=True)
        if "suspended" in case
        else topic_of(maintenance__compaction={"enabled": True, "minInputFiles": 9})
        if "maintenance setting" in case
        else TOPIC
    )
    planned = plan(topic, world, previous, SETTINGS, approved)
    assert kinds(planned.actions) == actions
    assert conditions(planned.status)["Ready"] == ready
    assert planned.status["phase"] == phase


def test_a_plan_is_the_same_for_the_same_world_and_changes_nothing_it_was_given():
    world = replace(with_app(steady(), **FAILED), now_ms=NOW_MS + 60_000)
    before = copy.deepcopy(APPLICATION_RECORD)
    first = plan(TOPIC, world, APPLICATION_RECORD, SETTINGS)
    again = plan(TOPIC, world, APPLICATION_RECORD, SETTINGS)
    assert first.actions == again.actions
    assert first.status == again.status
    assert before == APPLICATION_RECORD


def test_a_new_table_is_made_for_this_resource_and_its_job_created_with_an_event():
    planned = plan(TOPIC, World(now_ms=NOW_MS, registry=RegistryView(1, V1)), {}, SETTINGS)
    assert planned.actions[0] == CreateTable()
    create = next(a for a in planned.actions if isinstance(a, CreateApp))
    assert create.announce and create.body["metadata"]["name"] == "floe-orders"
    config = next(a for a in planned.actions if isinstance(a, Apply) and a.kind == "ConfigMap")
    assert config.body["metadata"]["annotations"]["floe.dev/applied-hash"] == config.digest
    assert config.name == "floe-orders-job"
    assert {a.name for a in planned.actions if isinstance(a, Apply) and a.kind == "CronJob"} == {
        "floe-orders-compaction",
        "floe-orders-expire-snapshots",
    }


def test_taking_over_a_table_says_from_whom_and_why():
    world = steady(table=replace(steady().table, owner="data/renamed"), owner_claims_table=False)
    claim, event = plan(TOPIC, world, {}, SETTINGS).actions
    assert claim == ClaimTable(taking_over_from="data/renamed")
    assert event == Event(
        False,
        "TableAdopted",
        (
            "table analytics.orders was written by data/renamed, which is gone: this resource "
            "takes it over and goes on from the offsets committed for Kafka topic orders"
        ),
    )
    in_use = plan(TOPIC, steady(table=replace(steady().table, owner="data/other")), {}, SETTINGS)
    message = next(c["message"] for c in in_use.status["conditions"] if c["type"] == "Ready")
    assert message.startswith(
        "table analytics.orders is written by KafkaIcebergTopic "
        "data/other; one table has one writer"
    )


def test_schema_versions_evolve_wait_for_approval_or_apply_and_say_so_on_the_status():
    def schema(planned):
        return next(
            (c["status"], c["reason"], c["message"])
            for c in planned.status["conditions"]
            if c["type"] == "SchemaInSync"
        )

    unreadable = plan(
        TOPIC,
        steady(
            table=TableView(exists=True, error="OSError: unreadable"), registry=RegistryView(2, V2)
        ),
        {},
        SETTINGS,
    )
    assert schema(unreadable)[:2] == ("Unknown", "Pending")  # not compared with a guess

    evolve = plan(TOPIC, steady(registry=RegistryView(2, V2)), {}, SETTINGS)
    assert evolve.actions == (EvolveTable(2, ("value.note: new field of type string",)),)
    assert schema(evolve) == ("True", "InSync", "table matches registry version 2")
    assert evolve.status["table"]["registryVersion"] == 2

    waiting = plan(TOPIC, steady(registry=RegistryView(3, V3)), {}, SETTINGS)
    assert schema(waiting) == (
        "False",
        "BreakingChange",
        "registry version 3: breaking schema change: value.quantity: type changed from int to "
        "string; the table keeps its schema and those records land in value_raw until the "
        'annotation floe.dev/approve-schema-version: "3" approves the change',
    )
    assert waiting.status["schemaChange"] == {
        "registryVersion": 3,
        "changes": ["value.quantity: type changed from int to string"],
    }
    assert plan(TOPIC, steady(), waiting.status, SETTINGS).status["schemaChange"] is None

    approved = plan(TOPIC, steady(registry=RegistryView(3, V3)), {}, SETTINGS, approved="3")
    assert approved.actions == (ApplyApproved(3),)
    applied = plan(
        TOPIC,
        steady(
            registry=RegistryView(3, V3),
            schema_applied=(
                "applied approved registry version 3: value.quantity -> quantity_before_v3"
            ),
        ),
        {},
        SETTINGS,
        approved="3",
    )
    assert applied.actions == ()
    assert schema(applied) == (
        "True",
        "InSync",
        "applied approved registry version 3: value.quantity -> quantity_before_v3",
    )

    frozen = plan(
        topic_of(schemaEvolution={"mode": "none"}),
        steady(topic_of(schemaEvolution={"mode": "none"}), registry=RegistryView(2, V2)),
        {},
        SETTINGS,
    )
    assert frozen.actions == ()


def test_failover_backs_off_records_each_failover_and_resets_once_healthy():
    failed = with_app(steady(), **FAILED)
    planned = plan(TOPIC, replace(failed, now_ms=NOW_MS + 30_000), APPLICATION_RECORD, SETTINGS)
    assert kinds(planned.actions) == []  # after two failovers: 40 s after it ended
    shorter = OperatorSettings(spark_image="floe/floe-spark:test", failover_backoff_seconds=5)
    assert kinds(
        plan(TOPIC, replace(failed, now_ms=NOW_MS + 30_000), APPLICATION_RECORD, shorter).actions
    ) == ["Event", "DeleteApp", "CreateApp"]  # 20 s
    capped = OperatorSettings(spark_image="floe/floe-spark:test", failover_backoff_max_seconds=25)
    assert kinds(
        plan(TOPIC, replace(failed, now_ms=NOW_MS + 30_000), APPLICATION_RECORD, capped).actions
    ) == ["Event", "DeleteApp", "CreateApp"]  # 40 s, capped
    later = replace(failed, now_ms=NOW_MS + 40 * 60_000)
    planned = plan(TOPIC, later, APPLICATION_RECORD, SETTINGS)
    event, delete, create = planned.actions
    assert event.warning and event.reason == "Failover"
    assert event.message == (
        "job failed (FAILED); recreating it (failover 3): driver container "
        "failed with ExitCode: 1, Reason: Error"
    )
    assert delete == DeleteApp("floe-orders") and not create.announce
    record = planned.status["sparkApplication"]
    assert record["failovers"] == 3
    assert record["lastFailoverTime"] == "2026-11-18T11:46:40Z"
    assert record["lastFailure"] == FAILED["error"]

    healthy = plan(
        TOPIC, replace(steady(), now_ms=NOW_MS + 40 * 60_000), APPLICATION_RECORD, SETTINGS
    )
    assert healthy.status["sparkApplication"]["failovers"] == 0
    assert kinds(healthy.actions) == ["Event"]
    recent = plan(
        TOPIC,
        replace(steady(), now_ms=NOW_MS),
        {"sparkApplication": {"failovers": 2, "lastFailoverTime": "2026-11-18T11:00:00Z"}},
        SETTINGS,
    )
    assert recent.status["sparkApplication"]["failovers"] == 2  # not 10 minutes yet


def test_a_job_stopped_for_the_user_keeps_its_record_and_says_what_to_do():
    world = with_app(steady(), **FAILED_ON_DATA_LOSS)
    planned = plan(TOPIC, world, APPLICATION_RECORD, SETTINGS)
    assert planned.actions == ()
    job = next(c for c in planned.status["conditions"] if c["type"] == "JobRunning")
    assert (job["status"], job["reason"]) == ("False", "DataLoss")
    assert "kubectl logs -n data floe-orders-driver" in job["message"]
    assert planned.status["sparkApplication"]["failovers"] == 2


def test_an_application_spark_operator_never_takes_up_is_named_with_the_command_that_fixes_it():
    created = "2026-11-18T11:06:00Z"  # 40 s before NOW_MS
    unseen = with_app(steady(), state="", attempts=0, created_at=created)
    early = plan(TOPIC, replace(unseen, now_ms=NOW_MS - 20_000), {}, SETTINGS)  # 20 s: waiting
    assert conditions(early.status)["JobRunning"] == ("False", "Starting")
    assert kinds(early.actions) == []

    planned = plan(TOPIC, unseen, {}, SETTINGS)  # 40 s, past FLOE_SUBMIT_WAIT_SECONDS (30)
    assert conditions(planned.status)["JobRunning"] == ("False", "SparkOperatorNotWatching")
    assert conditions(planned.status)["Ready"] == ("False", "SparkOperatorNotWatching")
    job = next(c for c in planned.status["conditions"] if c["type"] == "JobRunning")
    assert job["message"].startswith(
        "spark-operator has not taken up SparkApplication floe-orders in 40s"
    )
    assert "--set 'spark.jobNamespaces={<the namespaces it has>,data}'" in job["message"]
    assert planned.actions == ()  # the application stays: spark-operator may come
    # Taken up at last: the job starts.
    seen = with_app(unseen, state="SUBMITTED")
    assert conditions(plan(TOPIC, seen, planned.status, SETTINGS).status)["JobRunning"] == (
        "False",
        "Starting",
    )


def test_a_missing_driver_account_is_named_and_the_job_waits_for_it():
    from floe_operator.view import Account

    missing = replace(steady(), children=replace(steady().children, app=None, account_seen=True))
    planned = plan(TOPIC, missing, {}, SETTINGS)
    assert "CreateApp" not in kinds(planned.actions)  # spark-submit would fail, again and again
    assert conditions(planned.status)["JobRunning"] == ("False", "ServiceAccountMissing")
    assert conditions(planned.status)["Ready"] == ("False", "ServiceAccountMissing")
    job = next(c for c in planned.status["conditions"] if c["type"] == "JobRunning")
    assert job["message"].startswith("ServiceAccount floe-spark not found in namespace data")
    assert "--set 'watch.namespaces={<the namespaces it has>,data}'" in job["message"]
    there = replace(missing, children=replace(missing.children, account=Account()))
    assert "CreateApp" in kinds(plan(TOPIC, there, planned.status, SETTINGS).actions)
    unwatched = replace(missing, children=replace(missing.children, account_seen=False))
    assert "CreateApp" in kinds(plan(TOPIC, unwatched, {}, SETTINGS).actions)


def test_the_operator_makes_the_default_driver_account_where_a_resource_needs_it():
    from floe_operator.plan import EnsureAccount
    from floe_operator.view import Account

    making = OperatorSettings(
        spark_image="floe/floe-spark:test", spark_account_role="floe-spark-driver"
    )
    missing = replace(steady(), children=replace(steady().children, app=None, account_seen=True))
    actions = plan(TOPIC, missing, {}, making).actions
    assert EnsureAccount("floe-spark", "floe-spark-driver") in actions
    assert kinds(actions).index("EnsureAccount") < kinds(actions).index("CreateApp")
    # Made for another resource: this one becomes an owner too, so it outlives either.
    shared = replace(
        steady(),
        children=replace(steady().children, account_seen=True, account=Account(True, ("u-other",))),
    )
    assert (
        EnsureAccount("floe-spark", "floe-spark-driver") in plan(TOPIC, shared, {}, making).actions
    )
    owned = replace(
        shared, children=replace(shared.children, account=Account(True, ("u-1", "u-other")))
    )
    assert "EnsureAccount" not in kinds(plan(TOPIC, owned, {}, making).actions)
    # Someone else's account of that name is used as it is; a named one is never made.
    theirs = replace(shared, children=replace(shared.children, account=Account(False, ())))
    assert "EnsureAccount" not in kinds(plan(TOPIC, theirs, {}, making).actions)
    named = topic_of(spark={"serviceAccount": "team-spark"})
    planned = plan(named, replace(missing, children=replace(missing.children)), {}, making)
    assert "EnsureAccount" not in kinds(planned.actions)
    assert conditions(planned.status)["JobRunning"] == ("False", "ServiceAccountMissing")


def test_progress_comes_from_the_table_and_kafka():
    planned = plan(TOPIC, steady(), {}, SETTINGS)
    assert planned.status["offsets"] == {"committed": {"0": 10}, "latest": {"0": 12}, "lag": 2}
    assert planned.status["landedThrough"] == "2026-11-18T11:06:33Z"
    assert planned.status["table"] == {
        "schemaId": 1,
        "snapshotId": "42",
        "committedAt": "2026-11-18T11:06:35Z",
        "registryVersion": 1,
    }


def test_a_neighbour_the_operator_cannot_reach_leaves_the_progress_it_showed_and_says_so():
    shown = plan(TOPIC, steady(), {}, SETTINGS).status
    # Kafka: the committed offsets are the table's; latest and lag stay (the status is
    # merge-patched) and the error says they are old; the next visit that reaches Kafka clears it.
    kafka = plan(
        TOPIC, steady(latest_offsets=None, kafka_error="KafkaException: timed out"), shown, SETTINGS
    ).status
    assert kafka["offsets"]["committed"] == {"0": 10}
    assert "latest" not in kafka["offsets"] and "lag" not in kafka["offsets"]
    assert "KafkaException: timed out" in kafka["offsets"]["error"]
    again = plan(
        TOPIC, steady(), {**shown, "offsets": {**shown["offsets"], **kafka["offsets"]}}, SETTINGS
    ).status
    assert again["offsets"] == {
        "committed": {"0": 10},
        "latest": {"0": 12},
        "lag": 2,
        "error": None,
    }
    # The catalog: nothing of the table's progress is said (not "no offsets", not a lag of
    # the whole topic), and TableReady says why.
    catalog = plan(
        TOPIC, steady(table=TableView(error="ConnectionError: reset")), shown, SETTINGS
    ).status
    assert not {"offsets", "table", "landedThrough"} & set(catalog)
    assert conditions(catalog)["TableReady"] == ("False", "CatalogUnavailable")
    # The registry: a table that exists is ready; the schema cannot be compared.
    registry = plan(
        TOPIC, steady(registry=RegistryView(error="ConnectionError: refused")), shown, SETTINGS
    ).status
    assert conditions(registry)["TableReady"] == ("True", "TableExists")
    assert conditions(registry)["SchemaInSync"] == ("Unknown", "RegistryUnavailable")
    assert registry["offsets"] == shown["offsets"]
    # All three at once: each says so.
    down = plan(
        TOPIC,
        steady(
            table=TableView(error="ConnectionError: reset"),
            registry=RegistryView(error="ConnectionError: refused"),
            latest_offsets=None,
            kafka_error="KafkaException: timed out",
        ),
        shown,
        SETTINGS,
    ).status
    assert list(down["offsets"]) == ["error"]
    assert conditions(down)["TableReady"] == ("False", "CatalogUnavailable")
    assert conditions(down)["SchemaInSync"] == ("Unknown", "RegistryUnavailable")


def test_with_routes_each_table_has_its_progress_and_the_columns_show_the_one_behind():
    routed = topic_of(
        routes=[
            {"field": "region", "values": ["eu"], "table": {"identifier": "analytics.orders_eu"}},
            {"field": "region", "values": ["us"], "table": {"identifier": "analytics.orders_us"}},
        ]
    )
    europe = TableView(
        exists=True,
        owner="data/orders",
        value=V1,
        schema_id=1,
        snapshot_id=7,
        committed_at_ms=NOW_MS - 9000,
        offsets={0: 8},
        vtts_ms=NOW_MS - 30_000,
    )
    world = steady(routed, routes={"analytics.orders_eu": europe})  # us: made as the job starts
    planned = plan(routed, world, {}, SETTINGS)
    assert planned.status["tables"] == [
        {
            "identifier": "analytics.orders",
            "exists": True,
            "snapshotId": "42",
            "committedAt": "2026-11-18T11:06:35Z",
            "committed": {"0": 10},
            "lag": 2,
            "landedThrough": "2026-11-18T11:06:33Z",
        },
        {
            "identifier": "analytics.orders_eu",
            "exists": True,
            "snapshotId": "7",
            "committedAt": "2026-11-18T11:06:31Z",
            "committed": {"0": 8},
            "lag": 4,
            "landedThrough": "2026-11-18T11:06:10Z",
        },
        {"identifier": "analytics.orders_us", "exists": False},
    ]
    assert planned.status["offsets"] == {"committed": {"0": 8}, "latest": {"0": 12}, "lag": 4}
    assert planned.status["landedThrough"] == "2026-11-18T11:06:10Z"
    assert planned.status["table"]["snapshotId"] == "42"  # the topic's own table
    # A route's table the catalog cannot show keeps its last line, with the error; the
    # topic's offsets (the lowest of the tables') are not said without it.
    unreadable = plan(
        routed,
        steady(routed, routes={"analytics.orders_eu": TableView(error="OSError: timed out")}),
        planned.status,
        SETTINGS,
    )
    assert unreadable.status["tables"][1] == {
        **planned.status["tables"][1],
        "error": "OSError: timed out",
    }
    assert "offsets" not in unreadable.status and "landedThrough" not in unreadable.status
    unrouted = plan(TOPIC, steady(), planned.status, SETTINGS)
    assert unrouted.status["tables"] is None  # removed from the status


def test_a_removed_maintenance_action_is_deleted_and_dropped_from_the_status():
    world = steady(
        children=replace(
            steady().children,
            cron_jobs={**steady().children.cron_jobs, "floe-orders-remove-orphans": "x"},
        )
    )
    planned = plan(TOPIC, world, {"maintenance": {"remove-orphans": {"schedule": "x"}}}, SETTINGS)
    assert planned.actions == (DeleteCronJob("floe-orders-remove-orphans"),)
    assert planned.status["maintenance"]["remove-orphans"] is None


def test_the_children_are_read_from_the_indexes_the_watches_keep():
    from floe_operator import view

    app = {
        "metadata": {
            "name": "floe-orders",
            "annotations": {"floe.dev/job-fingerprint": "f1", "floe.dev/generation": "2"},
            "creationTimestamp": "2026-11-18T11:00:00Z",
        },
        "status": {"applicationState": {"state": "RUNNING"}, "executionAttempts": 1},
    }
    old = {"metadata": {"name": "floe-orders-cut"}}
    labels = {"floe.dev/topic": "orders"}
    apps, config_maps, cron_jobs = {}, {}, {}
    for body in (app, old):
        for key, value in view.app_entry("data", labels, body).items():
            apps.setdefault(key, []).append(value)
    config_maps.update(
        {
            k: [v]
            for k, v in view.config_map_entry(
                "data", "floe-orders-job", {"floe.dev/applied-hash": "c1"}
            ).items()
        }
    )
    for name in ("floe-orders-compaction", "floe-orders-expire-snapshots"):
        for key, value in view.cron_job_entry(
            "data", name, labels, {"floe.dev/applied-hash": name[-4:]}
        ).items():
            cron_jobs.setdefault(key, []).append(value)
    assert view.app_entry("data", {}, app) == {}  # not a floe child

    found = view.children(TOPIC, apps, config_maps, cron_jobs)
    assert found.app == App(
        "floe-orders",
        state="RUNNING",
        attempts=1,
        fingerprint="f1",
        generation="2",
        created_at="2026-11-18T11:00:00Z",
        driver="floe-orders-driver",
    )
    assert found.other_apps == ("floe-orders-cut",)
    assert found.config_map == "c1"
    assert found.cron_jobs == {
        "floe-orders-compaction": "tion",
        "floe-orders-expire-snapshots": "hots",
    }
    assert view.children(TOPIC, {}, {}, {}) == Children()


def test_a_visit_that_changed_nothing_writes_nothing():
    from floe_operator.handlers import _changed

    first = plan(TOPIC, steady(), {}, SETTINGS).status
    again = plan(TOPIC, steady(), first, SETTINGS).status
    assert _changed(first, again) == {}
    # Kafka's end offsets moving on (a busy topic, at every visit) are not worth a write; the
    # table's offsets moving, or the lag turning to or from zero, are.
    moved = plan(TOPIC, steady(latest_offsets={0: 20}), first, SETTINGS).status
    assert _changed(first, moved) == {}
    committed = plan(
        TOPIC,
        steady(
            latest_offsets={0: 20},
            table=replace(steady().table, offsets={0: 15}, vtts_ms=NOW_MS - 1000),
        ),
        first,
        SETTINGS,
    ).status
    assert _changed(first, committed) == {
        "offsets": {"committed": {"0": 15}, "latest": {"0": 20}, "lag": 5},
        "landedThrough": "2026-11-18T11:06:39Z",
    }
    caught_up = plan(TOPIC, steady(latest_offsets={0: 10}), first, SETTINGS).status
    assert _changed(first, caught_up) == {
        "offsets": {"committed": {"0": 10}, "latest": {"0": 10}, "lag": 0}
    }


# --- the last stable spec, and autoRollback ---------------------------------------------------


def test_a_changed_spec_whose_job_never_lands_runs_the_last_stable_spec_until_the_next_change():
    import copy as copying

    # Generation 2's job runs and has committed since it started: the last stable spec.
    running = replace(steady().children.app, created_at="2026-11-18T11:00:00Z")
    landing = steady(children=replace(steady().children, app=running))
    first = plan(TOPIC, landing, {}, SETTINGS).status
    assert first["stable"]["generation"] == 2
    assert first["stable"]["spec"]["kafka"]["topic"] == "orders"
    assert first["specChangedAt"] == "2026-11-18T11:06:40Z"
    assert "stable" not in plan(TOPIC, landing, first, SETTINGS).status  # written once

    # Generation 3 (a spec change, autoRollback on) whose job keeps failing.
    body = copying.deepcopy(BODY)
    body["metadata"]["generation"] = 3
    body["spec"]["autoRollback"] = {"enabled": True, "window": "5m"}
    body["spec"]["commit"] = {"interval": "10s"}
    changed = render.Topic.from_body(body)
    failing = with_app(steady(changed), **FAILED, generation="3")
    seen = {**first, **plan(changed, failing, first, SETTINGS).status}
    assert seen["specChangedAt"] == "2026-11-18T11:06:40Z" and "autoRollback" not in seen
    later = replace(failing, now_ms=NOW_MS + 301_000)
    rolled = plan(changed, later, seen, SETTINGS)
    assert rolled.status["autoRollback"] == {
        "failedGeneration": 3,
        "restoredGeneration": 2,
        "at": "2026-11-18T11:11:41Z",
        "reason": "driver container failed with ExitCode: 1, Reason: Error",
    }
    events = [a for a in rolled.actions if isinstance(a, Event)]
    assert [(e.warning, e.reason) for e in events if e.reason == "RolledBack"] == [
        (True, "RolledBack")
    ]
    # The next visit runs generation 2's spec for generation 3: the job is made again from it.
    after = {**seen, **rolled.status}
    runs = changed.running(after)
    assert runs.rolled_back_to == 2 and runs.generation == 3
    assert runs.spec.commit.interval == "60s" and not runs.spec.auto_rollback.enabled
    restarted = plan(
        runs,
        replace(
            later,
            children=replace(
                later.children,
                app=App("floe-orders", state="RUNNING", generation="3", fingerprint="old"),
            ),
        ),
        after,
        SETTINGS,
    )
    assert next(e.message for e in restarted.actions if isinstance(e, Event)).startswith(
        "generation 3 is rolled back: generation 2's spec runs"
    )
    # Its job landing: Ready, with the reason; the phase says so.
    landed = plan(
        runs,
        replace(
            steady(runs),
            now_ms=NOW_MS + 400_000,
            children=replace(
                steady(runs).children,
                app=replace(running, generation="3", fingerprint=fingerprint(runs)),
            ),
            table=replace(steady().table, committed_at_ms=NOW_MS + 399_000),
        ),
        after,
        SETTINGS,
    )
    assert conditions(landed.status)["Ready"] == ("True", "RolledBack")
    assert landed.status["phase"] == "RolledBack"
    assert "stable" not in landed.status  # generation 2 stays the stable one
    # Generation 4: tried; the roll back is over.
    body["metadata"]["generation"] = 4
    newer = render.Topic.from_body(body).running(after)
    assert newer.rolled_back_to is None and newer.spec.commit.interval == "10s"
    assert plan(newer, steady(newer), after, SETTINGS).status["autoRollback"] is None
    # Generation 4 as generation 2 was (the change undone): it renders the job that runs, which
    # is not restarted, and is healthy as that job is.
    back = copy.deepcopy(BODY)
    back["metadata"]["generation"] = 4
    undone = render.Topic.from_body(back).running(after)
    same = replace(
        landed_world := replace(
            steady(runs),
            now_ms=NOW_MS + 400_000,
            table=replace(steady().table, committed_at_ms=NOW_MS + 399_000),
        ),
        children=replace(
            landed_world.children,
            app=replace(running, generation="3", fingerprint=fingerprint(undone)),
        ),
    )
    again = plan(undone, same, after, SETTINGS)
    assert not [a for a in again.actions if isinstance(a, (DeleteApp, CreateApp))]
    assert again.status["stable"]["generation"] == 4 and again.status["autoRollback"] is None


def test_without_autorollback_or_a_stable_spec_a_failing_change_is_only_failed_over():
    body = copy.deepcopy(BODY)
    body["metadata"]["generation"] = 3
    changed = render.Topic.from_body(body)
    stable = {
        "stable": {"generation": 2, "spec": TOPIC.spec.model_dump(mode="json", by_alias=True)},
        "observedGeneration": 3,
        "specChangedAt": "2026-11-18T10:00:00Z",
    }
    failing = with_app(steady(changed), **FAILED, generation="3")
    assert "autoRollback" not in plan(changed, failing, stable, SETTINGS).status
    body["spec"]["autoRollback"] = {"enabled": True}
    opted = render.Topic.from_body(body)
    assert "autoRollback" not in plan(opted, failing, {}, SETTINGS).status  # nothing stable
    assert plan(opted, failing, stable, SETTINGS).status["autoRollback"]["restoredGeneration"] == 2
    # An idle topic's job that runs is healthy: nothing to land is not a failure.
    idle = steady(
        changed,
        latest_offsets={0: 10},
        children=replace(
            steady(changed).children,
            app=App(
                "floe-orders",
                state="RUNNING",
                generation="3",
                created_at="2026-11-18T11:06:30Z",
                fingerprint=fingerprint(changed),
            ),
        ),
    )
    assert plan(changed, idle, stable, SETTINGS).status["stable"]["generation"] == 3


# --- a stall ------------------------------------------------------------------------------------


def test_a_running_job_that_commits_nothing_for_several_intervals_while_kafka_has_records_stalls():
    from floe_operator.plan import stall_seconds, stalled_since

    interval = TOPIC.spec.commit.interval_seconds
    assert stall_seconds(TOPIC, SETTINGS) == max(5 * interval, 120)
    old = NOW_MS - int(stall_seconds(TOPIC, SETTINGS) * 1000) - 1000
    started = "2026-11-18T10:00:00Z"
    app = replace(steady().children.app, created_at=started, driver="floe-orders-driver")
    stuck = steady(
        children=replace(steady().children, app=app),
        table=replace(steady().table, committed_at_ms=old),
    )
    assert stalled_since(TOPIC, stuck, SETTINGS) == old
    planned = plan(
        TOPIC,
        replace(
            stuck,
            job_activity=("committing micro-batch 17 to the catalog (since 2026-11-18T11:00:00Z)"),
        ),
        {},
        SETTINGS,
    )
    assert conditions(planned.status)["Ready"] == ("False", "Stalled")
    assert conditions(planned.status)["JobRunning"] == ("True", "Running")
    assert planned.status["phase"] == "Degraded"
    message = {c["type"]: c["message"] for c in planned.status["conditions"]}["Ready"]
    assert "committed nothing since 2026-11-18T11:0" in message
    assert "committing micro-batch 17 to the catalog (since 2026-11-18T11:00:00Z)" in message
    assert "kubectl logs -n data floe-orders-driver" in message
    # The same stall seen again writes nothing new; a commit ends it.
    from floe_operator.handlers import _changed

    again = plan(
        TOPIC,
        replace(
            stuck,
            now_ms=NOW_MS + 10_000,
            job_activity=("committing micro-batch 17 to the catalog (since 2026-11-18T11:00:00Z)"),
        ),
        planned.status,
        SETTINGS,
    )
    assert _changed(planned.status, again.status) == {}
    moving = plan(
        TOPIC, steady(children=replace(steady().children, app=app)), planned.status, SETTINGS
    )
    assert conditions(moving.status)["Ready"] == ("True", "Landing")
    # Not a stall: nothing waits in Kafka; a job that started since; a job not running.
    assert stalled_since(TOPIC, replace(stuck, latest_offsets={0: 10}), SETTINGS) is None
    restarted = replace(app, created_at="2026-11-18T11:06:00Z")
    assert (
        stalled_since(
            TOPIC, replace(stuck, children=replace(stuck.children, app=restarted)), SETTINGS
        )
        is None
    )
    submitted = replace(app, submitted_at="2026-11-18T11:06:00Z")
    assert (
        stalled_since(
            TOPIC, replace(stuck, children=replace(stuck.children, app=submitted)), SETTINGS
        )
        is None
    )
    failing = replace(app, state="FAILING")
    assert (
        stalled_since(
            TOPIC, replace(stuck, children=replace(stuck.children, app=failing)), SETTINGS
        )
        is None
    )
    # A table the catalog cannot show is not taken for a stall.
    assert stalled_since(TOPIC, replace(stuck, table=TableView(error="OSError")), SETTINGS) is None


# --- the deletion ------------------------------------------------------------------------------

DELETED_MS = NOW_MS - 5_000  # the deletionTimestamp: 5 s ago


def deletion(**seen):
    return Deletion(now_ms=NOW_MS, since_ms=DELETED_MS, **seen)


def test_a_deletion_removes_the_job_then_waits_for_its_pods():
    assert plan_delete(
        TOPIC, deletion(app_state="RUNNING", pods=("floe-orders-driver",)), SETTINGS
    ) == (
        DeleteApp("floe-orders", why="the resource is deleted"),
        Wait("waiting for the job's pods to stop: floe-orders-driver"),
    )
    assert plan_delete(TOPIC, deletion(), SETTINGS) == ()  # Retain: the table stays


def test_a_job_spark_operator_is_submitting_is_waited_for_before_it_is_removed():
    submitting = deletion(app_state="", app_created_ms=NOW_MS - 3_000)
    assert plan_delete(TOPIC, submitting, SETTINGS) == (
        Wait(
            "waiting for spark-operator to finish submitting SparkApplication floe-orders (new) "
            "before deleting it"
        ),
    )
    # Never taken up by spark-operator (no namespace it serves): nothing submits it.
    ignored = replace(submitting, app_created_ms=NOW_MS - 1000 * (SETTINGS.submit_wait_seconds + 1))
    assert plan_delete(TOPIC, ignored, SETTINGS) == (
        DeleteApp("floe-orders", why="the resource is deleted"),
    )


def test_a_deletion_stops_waiting_after_the_deletion_wait():
    late = Deletion(
        now_ms=NOW_MS,
        since_ms=NOW_MS - 1000 * int(SETTINGS.deletion_wait_seconds + 1),
        app_state="NEW",
        app_created_ms=NOW_MS - 1000,
        pods=("floe-orders-driver",),
    )
    actions = plan_delete(TOPIC, late, SETTINGS)
    assert [type(a) for a in actions] == [Log, DeleteApp, Log]
    assert all(a.warning for a in actions if isinstance(a, Log))


def test_deletion_policy_delete_drops_the_tables_it_writes_and_keeps_anothers():
    topic = topic_of(table__deletionPolicy="Delete")
    seen = deletion(
        tables={
            "analytics.orders": topic.writer,
            "analytics.other": "data/other",
            "analytics.new": None,
        }
    )
    assert plan_delete(topic, seen, SETTINGS) == (
        DropTable("analytics.orders"),
        Log("deletionPolicy Delete: table analytics.other is written by data/other, kept"),
        DropTable("analytics.new"),
    )
    # Nothing is dropped while the job's pods may still write.
    running = replace(seen, pods=("floe-orders-exec-1",))
    assert not any(isinstance(a, DropTable) for a in plan_delete(topic, running, SETTINGS))


def test_a_restart_annotation_restarts_the_job_once_and_says_so():
    body = copy.deepcopy(BODY)
    body["metadata"]["annotations"] = {render.RESTART: "2026-11-26T21:00:00Z"}
    asked = render.Topic.from_body(body)
    event, delete = plan(asked, steady(), {}, SETTINGS).actions[:2]
    assert (event.reason, delete) == ("JobRestarted", DeleteApp("floe-orders"))
    assert event.message == (
        "restart asked for (floe.dev/restart: 2026-11-26T21:00:00Z): restarting the job"
    )
    # The job made again under that annotation is not restarted again; a new value restarts it.
    assert list(plan(asked, steady(asked), {}, SETTINGS).actions) == []
    body["metadata"]["annotations"][render.RESTART] = "2026-11-26T22:00:00Z"
    again = render.Topic.from_body(body)
    assert kinds(plan(again, steady(asked), {}, SETTINGS).actions)[:2] == ["Event", "DeleteApp"]
    assert fingerprint(TOPIC) == render.job_fingerprint(TOPIC, SETTINGS)  # none: as before


def test_a_branch_is_on_the_status_and_a_publish_annotation_publishes_it_once():
    """table.branch: the status shows the branch, main and the unpublished commits; each new
    value of the publish annotation is one PublishBranch (a snapshot id, or the head for any
    other value), whose outcome the status keeps until the next."""
    from floe_operator.names import PUBLISH
    from floe_operator.plan import PublishBranch
    from floe_operator.view import BranchView

    body = copy.deepcopy(BODY)
    body["spec"]["table"]["branch"] = "audit"
    topic = render.Topic.from_body(body)
    branch = BranchView("audit", head_snapshot_id=42, main_snapshot_id=7, unpublished=3)
    world = steady(topic, table=replace(steady().table, branch=branch))
    planned = plan(topic, world, {}, SETTINGS)
    assert planned.actions == ()
    assert planned.status["branch"] == {
        "name": "audit",
        "snapshotId": "42",
        "mainSnapshotId": "7",
        "unpublishedCommits": 3,
    }

    body["metadata"]["annotations"] = {PUBLISH: "42"}
    asked = render.Topic.from_body(body)
    assert plan(asked, world, {}, SETTINGS).actions == (PublishBranch("42", 42),)
    # what the act left: main at 42; the status keeps the answer, and the same value is not
    # published again
    published = replace(
        world,
        table=replace(world.table, branch=replace(branch, main_snapshot_id=42, unpublished=0)),
        published=("42", 42, None),
    )
    after = plan(asked, published, {}, SETTINGS)
    assert after.actions == ()
    assert after.status["branch"]["lastPublish"] == {
        "request": "42",
        "snapshotId": "42",
        "at": "2026-11-18T11:06:40Z",
    }
    assert plan(asked, replace(published, published=None), after.status, SETTINGS).actions == ()
    # any other value publishes the head; a refusal says why
    body["metadata"]["annotations"] = {PUBLISH: "now"}
    head = render.Topic.from_body(body)
    assert plan(head, world, after.status, SETTINGS).actions == (PublishBranch("now"),)
    refused = plan(
        head, replace(world, published=("now", 7, "main diverged")), after.status, SETTINGS
    )
    assert refused.status["branch"]["lastPublish"] == {
        "request": "now",
        "snapshotId": "7",
        "at": "2026-11-18T11:06:40Z",
        "error": "main diverged",
    }
    # without a branch, the annotation means nothing and the status has no branch
    assert (
        "branch"
        not in plan(
            render.Topic.from_body(
                {**BODY, "metadata": {**BODY["metadata"], "annotations": {PUBLISH: "42"}}}
            ),
            steady(),
            {},
            SETTINGS,
        ).status
    )


def test_plain_json_declared_columns_evolve_the_table_and_a_conflict_says_what_to_change():
    """Plain JSON without a registry: the declared value.columns stand for the registry's
    version (none), as the operator observes them."""
    from floe_operator.observe import observe_registry
    from floe_sparkapp.config import parse_config

    def schema(planned):
        return next(
            (c["status"], c["reason"], c["message"])
            for c in planned.status["conditions"]
            if c["type"] == "SchemaInSync"
        )

    job = parse_config(
        {
            **render.job_config(TOPIC, SETTINGS).model_dump(
                by_alias=True, mode="json", exclude_none=True
            ),
            "value": {
                "format": "json",
                "columns": [
                    {"name": "id", "type": "long"},
                    {"name": "quantity", "type": "int"},
                    {"name": "note", "type": "string"},
                ],
            },
        }
    )
    declared = observe_registry(job, None)
    assert declared.version is None and [(f.name, f.field_type) for f in declared.value.fields] == [
        ("id", LongType()),
        ("quantity", IntegerType()),
        ("note", StringType()),
    ]
    evolve = plan(TOPIC, steady(registry=declared), {}, SETTINGS)
    assert evolve.actions == (EvolveTable(None, ("value.note: new field of type string",)),)
    assert schema(evolve) == ("True", "InSync", "table matches the declared value.columns")

    conflict = RegistryView(value=StructType(NestedField(1, "id", StringType())))
    assert schema(plan(TOPIC, steady(registry=conflict), {}, SETTINGS)) == (
        "False",
        "BreakingChange",
        "the declared value.columns: breaking schema change: value.id: type changed from long "
        "to string; the table keeps its schema and those records land in value_raw: declare "
        "the column's type as the table has it",
    )
    inferred_only = job.model_copy(
        update={"value": job.value.model_copy(update={"columns": (), "infer_schema": True})}
    )
    assert observe_registry(inferred_only, None) is None  # made by the job's first batch
