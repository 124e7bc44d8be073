"""KafkaIcebergOperation: an operation on a KafkaIcebergTopic's table, declared as an object of
its own (GitOps-friendly: applied once, its status says how far it got and what it did).

The models here are the operation CRD's source (``python -m floe_operator.crd``); the planner
(:func:`plan`) is pure, as the topics' is: :mod:`observe` builds the :class:`OperationWorld`,
:mod:`act` runs the actions, and the status is written from the plan.

**Rollback** moves the table's ``main`` back to a snapshot (an ancestor of it: by id, or the
newest committed at or before a time) and restarts the topic's job, which goes on from that
snapshot's offsets: the records after it land again, once. The move and a record of it
(:func:`floe_sparkapp.ledger.roll_back`) are one commit that holds only if ``main`` did not
move since it was read, so a commit of the running job in between is never lost under it, and
an operation tried again after a crash of the operator finds its record and does not move
``main`` a second time. It succeeds once the table holds again every offset it held before.

:func:`plan` is here; the rest, a module per concern, is all imported from here:

- :mod:`.spec`: the spec (:class:`OperationSpec`, :class:`RollbackSpec`) and the CRD's names;
- :mod:`.status`: the status (:class:`OperationStatus` and each type's outcome);
- :mod:`.world`: what the planner reads (:class:`OperationWorld`);
- :mod:`.actions`: what it asks for, and :class:`OperationPlan`;
- :mod:`.rollback`: a roll back's target, whether it is safe, and the job's restart;
- :mod:`.batch`: Repair, Backfill and Replay, run as Spark jobs: their attempts, progress and
  outcome (:data:`BATCHES`).
"""

from __future__ import annotations

from typing import Any

from ..clock import epoch, iso
from ..view import by_partition
from .actions import DeleteRun, OperationAction, OperationPlan, RestartJob, RollBack, StartRun
from .batch import BATCHES, FAILED_STATES, MAX_ATTEMPTS, batch
from .rollback import restart_value, target, unsafe_rollback
from .spec import KIND, PLURAL, SHORT_NAMES, SINGULAR, OperationSpec, RollbackSpec
from .status import (
    BackfillStatus,
    LeftOut,
    OffsetRange,
    OperationStatus,
    RedriveStatus,
    RepairStatus,
    ReplayStatus,
    RollbackStatus,
    StayRaw,
)
from .world import OperationWorld, Run, Snapshot

__all__ = [
    "BATCHES",
    "FAILED_STATES",
    "KIND",
    "MAX_ATTEMPTS",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "TERMINAL",
    "BackfillStatus",
    "DeleteRun",
    "LeftOut",
    "OffsetRange",
    "OperationAction",
    "OperationPlan",
    "OperationSpec",
    "OperationStatus",
    "OperationWorld",
    "RedriveStatus",
    "RepairStatus",
    "ReplayStatus",
    "RestartJob",
    "RollBack",
    "RollbackSpec",
    "RollbackStatus",
    "Run",
    "Snapshot",
    "StartRun",
    "StayRaw",
    "plan",
    "restart_value",
    "target",
]

TERMINAL = ("Succeeded", "Failed")


def plan(world: OperationWorld) -> OperationPlan:
    """What to do next for an operation, and its status."""
    previous = dict(world.status or {})
    status: dict[str, Any] = {
        "observedGeneration": world.generation,
        "startedAt": previous.get("startedAt") or iso(world.now_ms / 1000),
    }

    def ends(phase: str, message: str, **more: Any) -> OperationPlan:
        return OperationPlan(
            (),
            {
                **status,
                "phase": phase,
                "message": message,
                "finishedAt": iso(world.now_ms / 1000),
                **more,
            },
        )

    def waits(
        message: str, *actions: OperationAction, phase: str = "Pending", **more: Any
    ) -> OperationPlan:
        return OperationPlan(actions, {**status, "phase": phase, "message": message, **more})

    if previous.get("phase") in TERMINAL:
        return OperationPlan((), {})  # done: its status stays as it ended
    if world.invalid is not None or world.spec is None:
        return ends("Failed", f"invalid spec: {world.invalid}")
    spec = world.spec
    if not world.topic_found:
        return waits(f"waiting for KafkaIcebergTopic {spec.topic} in this namespace")
    if spec.table is not None and spec.table not in world.tables:
        return ends(
            "Failed",
            f"table {spec.table} is not one of KafkaIcebergTopic "
            f"{spec.topic}'s tables ({', '.join(world.tables)})",
        )
    if spec.type in BATCHES:
        return batch(world, spec, ends, waits)
    rollback = spec.rollback
    assert rollback is not None
    table = rollback.table or (world.tables[0] if world.tables else "")
    if world.refused is not None:
        return ends("Failed", f"cannot roll back: {world.refused}")
    if world.table_error is not None:
        return waits(f"table {table} could not be read: {world.table_error}")
    record = world.record
    if record is None:
        if not world.ancestry:
            return ends("Failed", f"table {table} has no snapshot: nothing to roll back")
        found = target(rollback, world.ancestry)
        if isinstance(found, str):
            return ends("Failed", found)
        head = world.ancestry[0]
        if found.snapshot_id == head.snapshot_id:
            return ends(
                "Succeeded",
                f"main of {table} is at snapshot {head.snapshot_id} already: nothing to roll back",
            )
        unsafe = unsafe_rollback(world, table, found.snapshot_id)
        if unsafe is not None:
            phase, message = unsafe
            return ends(phase, message) if phase == "Failed" else waits(message)
        moved = {
            "table": table,
            "fromSnapshotId": str(head.snapshot_id),
            "toSnapshotId": str(found.snapshot_id),
            "fromOffsets": by_partition(world.offsets),
            "toOffsets": by_partition(world.offsets_at.get(found.snapshot_id, {})),
            "rolledBackAt": iso(world.now_ms / 1000),
        }
        return waits(
            f"moving main of {table} back from snapshot {head.snapshot_id} to {found.snapshot_id}",
            RollBack(table, head.snapshot_id, found.snapshot_id, moved),
            phase="Running",
        )
    shown = {**record, "jobRestarted": world.topic_restart == restart_value(world)}
    if not shown["jobRestarted"]:
        return waits(
            f"main of {table} is at snapshot {record['toSnapshotId']}: restarting "
            f"the job of KafkaIcebergTopic {spec.topic}",
            RestartJob(spec.topic, restart_value(world)),
            phase="Running",
            rollback={**shown, "jobRestarted": True},
        )
    wanted = {int(p): o for p, o in (record.get("fromOffsets") or {}).items()}
    behind = sum(max(0, o - world.offsets.get(p, 0)) for p, o in wanted.items())
    if behind == 0:
        return ends(
            "Succeeded",
            f"main of {table} was moved back to snapshot "
            f"{record['toSnapshotId']}, and the job has landed again "
            "every record it held before",
            rollback=shown,
        )
    lost = world.topic_data_loss
    if lost is not None and epoch(lost[1]) >= epoch(record["rolledBackAt"]):
        return ends(
            "Failed",
            f"main of {table} was moved back to snapshot "
            f"{record['toSnapshotId']}, but the job stopped before landing "
            f"the records after it again ({behind} to go): Kafka no longer "
            f"holds them ({lost[0]}). Their rows are still in "
            f"snapshot {record['fromSnapshotId']} until it expires: restore "
            f"them with CALL <catalog>.system.set_current_snapshot('{table}', "
            f"{record['fromSnapshotId']}), then delete the job's "
            "SparkApplication so that it starts again",
            rollback=shown,
        )
    suspended = (
        (f" (KafkaIcebergTopic {spec.topic} is suspended: they land once it is resumed)")
        if world.topic_suspended
        else ""
    )
    return waits(
        f"main of {table} is at snapshot {record['toSnapshotId']}; the job lands "
        f"the records after it again: {behind} to go{suspended}",
        phase="Running",
        rollback=shown,
    )
