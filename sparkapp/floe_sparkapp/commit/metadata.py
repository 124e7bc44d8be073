"""The table's (Java) metadata as a commit reads it: where a branch is, what moved it, which
snapshot tried has landed."""

from __future__ import annotations

from typing import Any

from ..jvm_udf import java
from ..ledger import MAIN, OFFSETS
from .retries import CommitConflict


def metadata_classes(spark: Any) -> tuple[Any, Any]:
    """Iceberg's ``TableMetadata`` and ``SnapshotRef`` (Java)."""
    return (
        java("org.apache.iceberg.TableMetadata", spark._jvm),
        java("org.apache.iceberg.SnapshotRef", spark._jvm),
    )


def ref_times(metadata: Any) -> list[tuple[str, int | None]]:
    """``(name, snapshot timestamp ms)`` of each ref in the table's (Java) metadata."""
    found = []
    for name in metadata.refs().keySet().toArray():
        snapshot = metadata.snapshot(metadata.ref(str(name)).snapshotId())
        found.append((str(name), None if snapshot is None else snapshot.timestampMillis()))
    return found


def ref_at(metadata: Any, snapshot_id: int | None, ref: str = MAIN) -> Any:
    """Branch ``ref``'s ref in the table's (Java) metadata, which must still be at
    ``snapshot_id``; None for a branch not made yet, which is made where ``main`` is, so
    ``main`` must be there."""
    found = metadata.ref(ref)
    if found is None and ref != MAIN:
        ref_at(metadata, snapshot_id)
        return None
    if found is None or found.snapshotId() != snapshot_id:
        raise CommitConflict(
            f"{ref} moved from snapshot {snapshot_id} to "
            f"{None if found is None else found.snapshotId()} during the batch"
        )
    return found


def moved_by_others(
    metadata: Any, snapshot_id: int | None, ref: str = MAIN, limit: int = 10_000
) -> None:
    """Checks that branch ``ref`` is at ``snapshot_id``, or moved from there only by
    snapshots that are not floe commits (a compaction, a manifest rewrite, a repair's or a
    backfill's chunk: none adds a record at or above the offsets the batch was read from), so
    that an append can go on top of them; raises CommitConflict otherwise (a floe commit in
    between, or the branch rolled back past ``snapshot_id``)."""
    current = _head_id(metadata, ref)
    for _ in range(limit):
        if current == snapshot_id:
            return
        snapshot = None if current is None else metadata.snapshot(current)
        if snapshot is None or snapshot.summary().get(OFFSETS) is not None:
            break
        parent = snapshot.parentId()
        current = None if parent is None else int(parent)
    raise CommitConflict(
        f"{ref} moved from snapshot {snapshot_id} to {_head_id(metadata, ref)} "
        "during the batch, by a floe commit or a roll back"
    )


def _head_id(metadata: Any, ref: str = MAIN) -> int | None:
    """The snapshot id branch ``ref`` is at in the (Java) metadata; ``main``'s for a branch
    not made yet (:func:`~floe_sparkapp.ledger.head`)."""
    found = metadata.ref(ref)
    if found is None and ref != MAIN:
        found = metadata.ref(MAIN)
    return None if found is None else int(found.snapshotId())


def which_landed(
    metadata: Any,
    snapshot_ids: set[int],
    base_snapshot_id: int | None,
    limit: int = 10_000,
    ref: str = MAIN,
) -> int | None:
    """Which of ``snapshot_ids`` is in branch ``ref``'s ancestry above ``base_snapshot_id``,
    in the table's (Java) metadata; None when none is."""
    current = _head_id(metadata, ref)
    for _ in range(limit):
        if current is None or current == base_snapshot_id:
            return None
        if current in snapshot_ids:
            return current
        snapshot = metadata.snapshot(current)
        parent = None if snapshot is None else snapshot.parentId()
        current = None if parent is None else int(parent)
    return None


def snapshots_between(
    metadata: Any, head: int, base_snapshot_id: int, limit: int = 10_000
) -> set[int] | None:
    """The snapshots from ``head`` down to ``base_snapshot_id`` (not included) in the table's
    (Java) metadata; None when ``head``'s ancestry does not reach it."""
    found: set[int] = set()
    current: int | None = head
    for _ in range(limit):
        if current is None:
            return None
        if current == base_snapshot_id:
            return found
        found.add(current)
        snapshot = metadata.snapshot(current)
        parent = None if snapshot is None else snapshot.parentId()
        current = None if parent is None else int(parent)
    return None
