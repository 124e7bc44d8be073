"""KafkaIcebergOperations on the node: an operation applied beside a topic whose job keeps
landing, its driver killed midway, and the table's rows compared one by one with what was
produced."""

from __future__ import annotations

import pytest
from kubernetes import client

from .kube import admin_client, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.node]

OPERATIONS = ("floe.dev", "v1alpha1")


def operation_status(stack, namespace: str, name: str) -> dict:
    return client.CustomObjectsApi(admin_client(stack)).get_namespaced_custom_object(
        *OPERATIONS, namespace, "kafkaicebergoperations", name).get("status") or {}


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
        stack, operator, drivers, namespace, shared, tmp_path, unique_name):
    """Main moved back to the snapshot that held the first 20 records, while records keep
    coming; the job restarts from that snapshot's offsets, its driver is killed while it lands
    the rest again, and the table ends with every record once."""
    from ..integration.nemesis import end_offsets
    from ..integration.test_job_roundtrip import produce_orders
    from .test_operator import (declared_orders, kill_driver, logs, orders_rows, orders_status,
                                topic_catalog)

    kafka_topic = f"rollback-{unique_name}".replace("_", "-")
    producer = declared_orders(stack, shared, namespace, kafka_topic, 20)
    catalog = topic_catalog(shared)

    def landed(count: int) -> bool:
        offsets = orders_status(stack, namespace).get("offsets") or {}
        return len(orders_rows(catalog)) == count and offsets.get("lag") == 0

    assert wait_until(lambda: landed(20), timeout=300, interval=2), logs(tmp_path, namespace)
    target = orders_status(stack, namespace)["table"]["snapshotId"]
    held = {str(p): o for p, o in end_offsets(stack.bootstrap, kafka_topic, 2).items()}
    produce_orders(producer, 20, 20)
    assert wait_until(lambda: landed(40), timeout=300, interval=2), logs(tmp_path, namespace)
    before = orders_status(stack, namespace)["table"]["snapshotId"]

    custom = client.CustomObjectsApi(admin_client(stack))
    custom.create_namespaced_custom_object(*OPERATIONS, namespace, "kafkaicebergoperations", {
        "apiVersion": "floe.dev/v1alpha1", "kind": "KafkaIcebergOperation",
        "metadata": {"name": "undo"},
        "spec": {"topic": "orders", "type": "Rollback", "rollback": {"snapshotId": target}}})
    produce_orders(producer, 40, 10)  # the job keeps landing meanwhile
    assert wait_until(lambda: (operation_status(stack, namespace, "undo").get("rollback") or {})
                      .get("jobRestarted"), timeout=120, interval=1), \
        f"{operation_status(stack, namespace, 'undo')}\n{logs(tmp_path, namespace)}"
    shown = operation_status(stack, namespace, "undo")["rollback"]
    assert shown["toSnapshotId"] == target and shown["toOffsets"] == held
    assert shown["table"] == "analytics.orders"
    # The restarted job's driver killed while it lands the records after the snapshot again.
    assert wait_until(lambda: orders_status(stack, namespace).get("sparkApplication", {})
                      .get("state") == "RUNNING", timeout=180, interval=1), \
        logs(tmp_path, namespace)
    kill_driver(namespace)
    assert wait_until(lambda: operation_status(stack, namespace, "undo").get("phase")
                      == "Succeeded", timeout=420, interval=2), \
        f"{operation_status(stack, namespace, 'undo')}\n{logs(tmp_path, namespace)}"
    assert wait_until(lambda: landed(50), timeout=300, interval=2), logs(tmp_path, namespace)
    rows_as_produced(orders_rows(catalog), producer.sent)

    done = operation_status(stack, namespace, "undo")
    assert done["finishedAt"] >= done["startedAt"]
    assert int(done["rollback"]["fromSnapshotId"]) > 0
    # What main held before: at least the 40 records, and those of the 10 it had landed.
    assert all(done["rollback"]["fromOffsets"][p] >= o for p, o in held.items())
    history = catalog.load_table("analytics.orders")
    ancestry = set()
    snapshot = history.current_snapshot()
    while snapshot is not None:
        ancestry.add(str(snapshot.snapshot_id))
        snapshot = (history.snapshot_by_id(snapshot.parent_snapshot_id)
                    if snapshot.parent_snapshot_id else None)
    assert target in ancestry and before not in ancestry  # main went back, then on again
    reasons = [e.reason for e in client.CoreV1Api(admin_client(stack)).list_namespaced_event(
        namespace, field_selector="involvedObject.name=undo").items]
    assert {"RolledBack", "JobRestarted", "Succeeded"} <= set(reasons), reasons
    # An operation runs once: applied again unchanged, it is refused as a change.
    with pytest.raises(client.ApiException) as refused:
        custom.patch_namespaced_custom_object(*OPERATIONS, namespace, "kafkaicebergoperations",
                                              "undo", {"spec": {"rollback": {"snapshotId": before}}})
    assert "an operation cannot change once applied" in refused.value.body
