"""KafkaIcebergOperations on the node: an operation applied beside a topic whose job keeps
landing, its driver killed midway, and the table's rows compared one by one with what was
produced."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from .kube import admin_client, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.node]

OPERATIONS = ("floe.dev", "v1alpha1")


def operation_status(stack, namespace: str, name: str) -> dict:
    return (
        client.CustomObjectsApi(admin_client(stack))
        .get_namespaced_custom_object(*OPERATIONS, namespace, "kafkaicebergoperations", name)
        .get("status")
        or {}
    )


def orders_landed(stack, namespace: str, catalog, count: int) -> bool:
    """analytics.orders has ``count`` rows, and the topic ``orders`` has no lag."""
    from .test_operator import orders_rows, orders_status

    offsets = orders_status(stack, namespace).get("offsets") or {}
    # The status first: the table is scanned (the test's CPU, beside the job's) once it says so
    return offsets.get("lag") == 0 and len(orders_rows(catalog)) == count


def apply_operation(stack, namespace: str, name: str, kind: str, section: dict) -> str:
    """Applies the KafkaIcebergOperation ``name`` of type ``kind`` on the topic ``orders``;
    returns its uid."""
    made = client.CustomObjectsApi(admin_client(stack)).create_namespaced_custom_object(
        *OPERATIONS,
        namespace,
        "kafkaicebergoperations",
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "KafkaIcebergOperation",
            "metadata": {"name": name},
            "spec": {"topic": "orders", "type": kind, kind.lower(): section},
        },
    )
    return made["metadata"]["uid"]


def commits_of(catalog, uid: str) -> int:
    """The commits operation ``uid`` made in main of analytics.orders."""
    from floe_sparkapp.ledger import operation_commits

    try:
        return operation_commits(catalog.load_table("analytics.orders"), uid)[0]
    except Exception:  # noqa: BLE001 - the catalog busy with a commit
        return 0


def kill_operation_driver(namespace: str, name: str) -> None:
    """SIGKILLs the processes of the driver of operation ``name``'s first attempt."""
    from .test_operator import kubectl

    kubectl(
        "exec",
        "-n",
        namespace,
        f"floe-op-{name}-1-driver",
        "-c",
        "spark-kubernetes-driver",
        "--",
        "sh",
        "-c",
        "kill -KILL -1",
    )


def ended(stack, namespace: str, name: str, tmp_path) -> dict:
    """The status of operation ``name`` once it succeeded (it fails the test otherwise): a
    second attempt after the first's driver was killed."""
    from .test_operator import logs

    assert wait_until(
        lambda: operation_status(stack, namespace, name).get("phase") in ("Succeeded", "Failed"),
        timeout=600,
        interval=1,
    ), f"{operation_status(stack, namespace, name)}\n{logs(tmp_path, namespace)}"
    done = operation_status(stack, namespace, name)
    assert done["phase"] == "Succeeded", done
    assert done["attempts"] == 2 and "ExitCode: 137" in done["lastError"], done
    assert done["application"] == f"floe-op-{name}-2"
    return done


def rows_as_produced(rows: list[dict], sent: dict) -> None:
    """Every produced record is one row, holding what was produced."""
    from ..integration.jobkit import assert_exactly_once
    from ..integration.test_job_roundtrip import normalize

    assert_exactly_once(rows, sent)
    for row in rows:
        produced = sent[(row["kafka"]["partition"], row["kafka"]["offset"])]
        assert row["key"] == produced["key"]
        assert normalize(row["value"]) == normalize(produced["value"])
        assert row["value_error"] is None


def test_a_rollback_moves_main_back_and_the_records_after_it_land_again_once(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    """Main moved back to the snapshot that held the first 20 records, while records keep
    coming; the job goes on from that snapshot's offsets (10 records a commit, one a second at
    most, so landing the 110 after it again takes a while), its driver is killed while it does,
    and the table ends with every record once."""
    from ..integration.nemesis import end_offsets
    from ..integration.test_job_roundtrip import produce_orders
    from .test_operator import (
        declared_orders,
        kill_driver,
        logs,
        orders_rows,
        orders_status,
        topic_catalog,
    )

    kafka_topic = f"rollback-{unique_name}".replace("_", "-")
    producer = declared_orders(
        stack,
        shared,
        namespace,
        kafka_topic,
        20,
        spec={"commit": {"maxRecordsPerCommit": 10, "interval": "1s"}},
    )
    custom = client.CustomObjectsApi(admin_client(stack))
    catalog = topic_catalog(shared)

    def landed(count: int) -> bool:
        return orders_landed(stack, namespace, catalog, count)

    assert wait_until(lambda: landed(20), timeout=300, interval=1), logs(tmp_path, namespace)
    target = orders_status(stack, namespace)["table"]["snapshotId"]
    held = {str(p): o for p, o in end_offsets(stack.bootstrap, kafka_topic, 2).items()}
    produce_orders(producer, 20, 100)
    assert wait_until(lambda: landed(120), timeout=300, interval=1), logs(tmp_path, namespace)
    before = orders_status(stack, namespace)["table"]["snapshotId"]

    def app() -> dict:
        try:
            return custom.get_namespaced_custom_object(
                "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications", "floe-orders"
            )
        except client.ApiException:
            return {}

    first_app = app()["metadata"]["uid"]
    apply_operation(stack, namespace, "undo", "Rollback", {"snapshotId": target})
    produce_orders(producer, 120, 10)  # the job keeps landing meanwhile
    # The restarted job's driver killed while the records after the snapshot land again.
    assert wait_until(
        lambda: (
            app().get("metadata", {}).get("uid") not in (None, first_app)
            and (app().get("status") or {}).get("applicationState", {}).get("state") == "RUNNING"
        ),
        timeout=180,
        interval=0.5,
    ), f"{operation_status(stack, namespace, 'undo')}\n{logs(tmp_path, namespace)}"
    kill_driver(namespace)
    midway = operation_status(stack, namespace, "undo")
    assert midway["phase"] == "Running", midway
    shown = midway["rollback"]
    assert shown["toSnapshotId"] == target and shown["toOffsets"] == held
    assert shown["table"] == "analytics.orders"
    assert wait_until(
        lambda: operation_status(stack, namespace, "undo").get("phase") == "Succeeded",
        timeout=420,
        interval=1,
    ), f"{operation_status(stack, namespace, 'undo')}\n{logs(tmp_path, namespace)}"
    assert wait_until(lambda: landed(130), timeout=300, interval=1), logs(tmp_path, namespace)
    assert wait_until(
        lambda: (
            "ExitCode: 137"
            in orders_status(stack, namespace).get("sparkApplication", {}).get("lastFailure", "")
        ),
        timeout=120,
    ), orders_status(stack, namespace)  # the kill was failed over
    rows_as_produced(orders_rows(catalog), producer.sent)

    done = operation_status(stack, namespace, "undo")
    assert done["finishedAt"] >= done["startedAt"] and done["rollback"]["jobRestarted"]
    assert done["rollback"]["fromSnapshotId"] != target
    # What main held before: at least the 120 records.
    assert sum(done["rollback"]["fromOffsets"].values()) >= 120
    from floe_sparkapp.ledger import ancestors

    ancestry = {str(s.snapshot_id) for s in ancestors(catalog.load_table("analytics.orders"))}
    assert target in ancestry and before not in ancestry  # main went back, then on again
    reasons = [
        e.reason
        for e in client.CoreV1Api(admin_client(stack))
        .list_namespaced_event(namespace, field_selector="involvedObject.name=undo")
        .items
    ]
    assert {"RolledBack", "JobRestarted", "Succeeded"} <= set(reasons), reasons
    # An operation runs once: its spec cannot be changed.
    with pytest.raises(client.ApiException) as refused:
        custom.patch_namespaced_custom_object(
            *OPERATIONS,
            namespace,
            "kafkaicebergoperations",
            "undo",
            {"spec": {"rollback": {"snapshotId": before}}},
        )
    assert "an operation cannot change once applied" in refused.value.body

    # Retention (Kafka's records deleted up to offset 5 past the snapshot's, partition 0):
    # rolled back there, main would lose rows the job could not land again: refused.
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": stack.bootstrap})  # (kept: its futures need it)
    deleted = admin.delete_records([TopicPartition(kafka_topic, 0, held["0"] + 5)])
    for future in deleted.values():
        future.result(timeout=30)
    head = orders_status(stack, namespace)["table"]["snapshotId"]
    apply_operation(stack, namespace, "undo-again", "Rollback", {"snapshotId": target})
    assert wait_until(
        lambda: operation_status(stack, namespace, "undo-again").get("phase") == "Failed",
        timeout=120,
        interval=1,
    ), operation_status(stack, namespace, "undo-again")
    message = operation_status(stack, namespace, "undo-again")["message"]
    assert (
        message.startswith(
            f"cannot roll back: Kafka no longer holds records after snapshot "
            f"{target} of analytics.orders"
        )
        and f"partition 0 offsets {held['0']} to {held['0'] + 4}" in message
    ), message
    assert str(ancestors(catalog.load_table("analytics.orders"))[0].snapshot_id) == head


def test_a_spec_change_whose_job_never_lands_is_rolled_back_to_the_last_stable_spec(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    """spec.autoRollback: a change whose driver cannot start (an image tag that does not
    exist) is not healthy when the window ends, so the last stable spec runs again (the
    resource keeps the spec as written, the status says so, a Warning Event too); the next
    change is tried. Every record lands once throughout."""
    from ..integration.test_job_roundtrip import produce_orders
    from .test_operator import declared_orders, logs, orders_rows, orders_status, topic_catalog

    kafka_topic = f"autorollback-{unique_name}".replace("_", "-")
    producer = declared_orders(stack, shared, namespace, kafka_topic, 10)
    catalog = topic_catalog(shared)
    custom = client.CustomObjectsApi(admin_client(stack))
    args = ("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders")

    def ready() -> tuple[str, str] | None:
        found = {c["type"]: c for c in orders_status(stack, namespace).get("conditions") or []}
        return (found["Ready"]["status"], found["Ready"]["reason"]) if "Ready" in found else None

    def landed(count: int) -> bool:
        return orders_landed(stack, namespace, catalog, count)

    assert wait_until(
        lambda: landed(10) and orders_status(stack, namespace).get("stable"),
        timeout=300,
        interval=1,
    ), logs(tmp_path, namespace)
    assert orders_status(stack, namespace)["stable"]["generation"] == 1
    custom.patch_namespaced_custom_object(
        *args,
        {
            "spec": {
                "spark": {"image": "floe/floe-spark:no-such-tag"},
                "autoRollback": {"enabled": True, "window": "30s"},
            }
        },
    )
    produce_orders(producer, 10, 10)
    assert wait_until(lambda: ready() == ("True", "RolledBack"), timeout=300, interval=1), (
        f"{orders_status(stack, namespace)}\n{logs(tmp_path, namespace)}"
    )
    status = orders_status(stack, namespace)
    assert status["phase"] == "RolledBack"
    assert status["autoRollback"]["failedGeneration"] == 2
    assert status["autoRollback"]["restoredGeneration"] == 1
    assert status["stable"]["generation"] == 1
    stored = custom.get_namespaced_custom_object(*args)
    assert stored["metadata"]["generation"] == 2  # the spec stays as written
    assert stored["spec"]["spark"]["image"] == "floe/floe-spark:no-such-tag"
    events = [
        (e.type, e.reason)
        for e in client.CoreV1Api(admin_client(stack))
        .list_namespaced_event(namespace, field_selector="involvedObject.name=orders")
        .items
    ]
    assert ("Warning", "RolledBack") in events, events
    assert wait_until(lambda: landed(20), timeout=300, interval=1), logs(tmp_path, namespace)

    # The next change is tried: it lands, and becomes the stable spec.
    custom.patch_namespaced_custom_object(*args, {"spec": {"spark": {"image": None}}})
    produce_orders(producer, 20, 10)
    assert wait_until(
        lambda: (
            landed(30)
            and ready() == ("True", "Landing")
            and (orders_status(stack, namespace).get("stable") or {}).get("generation") == 3
        ),
        timeout=300,
        interval=1,
    ), f"{orders_status(stack, namespace)}\n{logs(tmp_path, namespace)}"
    assert "autoRollback" not in orders_status(stack, namespace)
    rows_as_produced(orders_rows(catalog), producer.sent)


def test_a_repair_beside_the_running_job_decodes_the_raw_rows_once_with_its_driver_killed(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    """Records that needed a wider column were kept raw under ``schemaEvolution: none``; the
    spec then allows additive changes and a Repair runs (four rows a commit) while the job
    lands more records. Its driver is killed after its first commit: the operator starts a
    second attempt, which goes on from the rows still raw. Every record ends as one row,
    decoded."""
    from ..integration.test_job_repair import WIDE
    from ..integration.test_job_roundtrip import order, produce_orders
    from .test_operator import declared_orders, logs, orders_rows, topic_catalog

    kafka_topic = f"repair-{unique_name}".replace("_", "-")
    producer = declared_orders(
        stack, shared, namespace, kafka_topic, 10, spec={"schemaEvolution": {"mode": "none"}}
    )
    custom = client.CustomObjectsApi(admin_client(stack))
    catalog = topic_catalog(shared)

    def landed(count: int) -> bool:
        return orders_landed(stack, namespace, catalog, count)

    def raw() -> int:
        return sum(1 for r in orders_rows(catalog) if r["value"] is None)

    # The table is made from the subject's latest version: the wider one comes after
    assert wait_until(lambda: landed(10), timeout=300, interval=1), logs(tmp_path, namespace)
    for i in range(10, 50):
        producer.send(key=f"wide-{i}".encode(), value=order(i, 1), schema=WIDE)
    producer.flush()
    assert wait_until(lambda: landed(50) and raw() == 40, timeout=300, interval=1), logs(
        tmp_path, namespace
    )
    custom.patch_namespaced_custom_object(
        "floe.dev",
        "v1alpha1",
        namespace,
        "kafkaicebergtopics",
        "orders",
        {"spec": {"schemaEvolution": {"mode": "additive"}}},
    )
    produce_orders(producer, 50, 10)
    assert wait_until(lambda: landed(60), timeout=300, interval=1), logs(tmp_path, namespace)

    uid = apply_operation(
        stack, namespace, "fix", "Repair", {"reasons": ["schema_refused"], "rowsPerCommit": 4}
    )
    assert wait_until(lambda: commits_of(catalog, uid) >= 1, timeout=300, interval=0.5), (
        f"{operation_status(stack, namespace, 'fix')}\n{logs(tmp_path, namespace)}"
    )
    kill_operation_driver(namespace, "fix")
    midway = operation_status(stack, namespace, "fix")
    assert midway["phase"] == "Running", midway
    produce_orders(producer, 60, 10)  # the job keeps landing meanwhile
    done = ended(stack, namespace, "fix", tmp_path)
    assert done["repair"]["repaired"] == 40 and done["repair"]["stayRaw"] == 0, done
    assert done["repair"]["commits"] == commits_of(catalog, uid) >= 10
    assert done["message"] == (
        "decoded 40 raw rows of analytics.orders again, in "
        f"{commits_of(catalog, uid)} commits; 0 stay raw"
    )
    assert wait_until(lambda: landed(70), timeout=300, interval=1), logs(tmp_path, namespace)
    rows_as_produced(orders_rows(catalog), producer.sent)
    reasons = [
        e.reason
        for e in client.CoreV1Api(admin_client(stack))
        .list_namespaced_event(namespace, field_selector="involvedObject.name=fix")
        .items
    ]
    assert {"JobCreated", "Succeeded"} <= set(reasons), reasons


def test_a_backfill_beside_the_running_job_lands_the_history_once_with_its_driver_killed(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    """A topic with 40 records is declared with ``startingOffsets: latest``: its job lands only
    what comes after. A Backfill (five offsets a commit) brings the history in while the job
    keeps landing; its driver is killed after its first commit, and the second attempt lands
    only what is not there. Every record ends as one row, and the table's offsets stay the
    job's."""
    from floe_sparkapp.ledger import last_commit

    from ..integration.test_job_roundtrip import produce_orders
    from .test_operator import declared_orders, logs, orders_rows, orders_status, topic_catalog

    kafka_topic = f"backfill-{unique_name}".replace("_", "-")
    producer = declared_orders(
        stack, shared, namespace, kafka_topic, 40, spec={"kafka": {"startingOffsets": "latest"}}
    )
    catalog = topic_catalog(shared)

    def committed() -> dict:
        return (orders_status(stack, namespace).get("offsets") or {}).get("committed") or {}

    produced = 40
    last_sent = -5.0

    def both_partitions() -> bool:  # the job has started: what comes now lands
        nonlocal produced, last_sent
        if len(committed()) == 2:
            return True
        if time.monotonic() - last_sent >= 5:  # 4 more every 5 s; the status read every second
            produce_orders(producer, produced, 4)
            produced += 4
            last_sent = time.monotonic()
        return False

    assert wait_until(both_partitions, timeout=300, interval=1), logs(tmp_path, namespace)
    assert len(orders_rows(catalog)) < produced  # the history is not there

    uid = apply_operation(stack, namespace, "history", "Backfill", {"recordsPerCommit": 5})
    assert wait_until(lambda: commits_of(catalog, uid) >= 1, timeout=300, interval=0.5), (
        f"{operation_status(stack, namespace, 'history')}\n{logs(tmp_path, namespace)}"
    )
    kill_operation_driver(namespace, "history")
    produce_orders(producer, produced, 10)  # the job keeps landing meanwhile
    produced += 10
    done = ended(stack, namespace, "history", tmp_path)
    shown = done["backfill"]
    assert shown["commits"] == commits_of(catalog, uid) >= 8, done
    assert shown["leftOut"] == {}, done
    # The status first: the table is scanned once it says so
    assert wait_until(
        lambda: (
            committed() == {str(p): o for p, o in producer.next_offsets().items()}
            and len(orders_rows(catalog)) == produced
        ),
        timeout=300,
        interval=1,
    ), logs(tmp_path, namespace)
    rows_as_produced(orders_rows(catalog), producer.sent)
    # The history the job had skipped is what the backfill landed, in both attempts.
    history = sum(r["to"] - r["from"] for r in shown["ranges"].values())
    assert shown["landed"] >= 40 and shown["landed"] <= history, done
    assert (
        last_commit(
            catalog.load_table("analytics.orders"), f"{namespace}/orders", kafka_topic
        ).offsets
        == producer.next_offsets()
    )


def test_a_replay_produces_the_table_once_with_its_driver_killed_and_floe_lands_it_again(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    """The table of a topic of 600 records is replayed to another topic, one record a
    transaction; the replay's driver is killed once some transactions have committed, and the
    second attempt goes on after the last. The topic holds each row once (read committed),
    and a second KafkaIcebergTopic landing it makes a table equal to the first."""
    from ..integration.jobkit import AvroProducer, create_topic
    from ..integration.test_job_replay import as_landed, committed_records
    from ..integration.test_job_roundtrip import V1, order
    from .test_operator import logs, orders_status, topic_body, topic_catalog

    kafka_topic = f"replay-{unique_name}".replace("_", "-")
    target = f"{kafka_topic}-copy"
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    create_topic(stack.bootstrap, target, partitions=2)
    producer = AvroProducer(stack, kafka_topic)
    for i in range(600):
        producer.send(
            key=f"k{i}".encode(),
            value=order(i, 1),
            schema=V1,
            headers=[("trace", f"t{i}".encode())] if i % 3 else None,
        )
    producer.flush()
    custom = client.CustomObjectsApi(admin_client(stack))
    custom.create_namespaced_custom_object(
        "floe.dev",
        "v1alpha1",
        namespace,
        "kafkaicebergtopics",
        topic_body(stack, shared, kafka_topic),
    )
    catalog = topic_catalog(shared)

    def rows(identifier: str) -> list[dict]:
        try:
            return catalog.load_table(identifier).scan().to_arrow().to_pylist()
        except Exception:  # noqa: BLE001 - not made yet, or the catalog busy with a commit
            return []

    assert wait_until(lambda: len(rows("analytics.orders")) == 600, timeout=300, interval=2), logs(
        tmp_path, namespace
    )
    apply_operation(
        stack, namespace, "copy", "Replay", {"topic": target, "recordsPerTransaction": 1}
    )

    def some_committed() -> bool:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": stack.bootstrap,
                "group.id": "peek",
                "isolation.level": "read_committed",
            }
        )
        try:
            ends = [
                consumer.get_watermark_offsets(TopicPartition(target, p), timeout=10)[1]
                for p in (0, 1)
            ]
        finally:
            consumer.close()
        return sum(ends) >= 20  # (a committed transaction is a record and its marker)

    assert wait_until(some_committed, timeout=300, interval=0.2), (
        f"{operation_status(stack, namespace, 'copy')}\n{logs(tmp_path, namespace)}"
    )
    kill_operation_driver(namespace, "copy")
    done = ended(stack, namespace, "copy", tmp_path)
    shown = done["replay"]
    assert shown["records"] == 600 and shown["topic"] == target
    assert 0 < shown["producedThisAttempt"] < 600, done  # the second went on after the first
    assert len(committed_records(stack, target)) == 600  # each row once

    copy = topic_body(stack, shared, target)
    copy["metadata"]["name"] = "copy"
    copy["spec"]["table"]["identifier"] = "analytics.copy"
    copy["spec"]["value"]["schemaRegistry"]["subject"] = f"{kafka_topic}-value"
    copy["spec"]["spark"]["checkpointLocation"] = str(shared / "copy-checkpoint")
    custom.create_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", copy
    )
    assert wait_until(lambda: len(rows("analytics.copy")) == 600, timeout=300, interval=2), logs(
        tmp_path, namespace
    )
    assert as_landed(rows("analytics.copy")) == as_landed(rows("analytics.orders"))
    assert orders_status(stack, namespace).get("phase") == "Running"
