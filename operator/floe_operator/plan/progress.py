"""What the status says of the tables' progress: each table's snapshot, offsets, lag and
freshness, and the resource's offsets and lag (a routed topic's: its table furthest behind)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..clock import iso
from ..render import Topic
from ..view import TableView, World, as_status_offsets, by_partition
from .actions import Decisions


def plan_progress(
    topic: Topic, world: World, decided: Decisions, previous: Mapping[str, Any]
) -> None:
    """The tables' progress and the lag.  A table the catalog could not show leaves the status
    as it was (it is merge-patched): its offsets are not known to be gone, and a lag counted
    from none would say the whole topic is behind."""
    table = world.table
    decided.say(table_exists=table.exists)
    if table.exists:
        decided.say(
            snapshot_id=table.snapshot_id,
            committed_at_ms=table.committed_at_ms,
            schema_id=table.schema_id,
            maintenance_runs=dict(table.maintenance_runs),
            dead_letter_error=table.dead_letter_error,
        )
    identifiers = [t.identifier for t in topic.spec.tables()]
    views = [table, *(world.routes.get(i, TableView()) for i in identifiers[1:])]
    known = not any(view.error for view in views)
    offsets, vtts = table.offsets, table.vtts_ms
    if len(views) > 1:  # the printer columns show the table furthest behind
        before = {entry.get("identifier"): entry for entry in previous.get("tables") or []}
        decided.say(
            tables=[
                {**before.get(identifier, {"identifier": identifier}), "error": view.error[:500]}
                if view.error
                else _table_entry(identifier, view, world)
                for identifier, view in zip(identifiers, views)
            ]
        )
        written = [v for v in views if v.exists and v.offsets]
        offsets = _lowest(views)
        stamps = [v.vtts_ms for v in written if v.vtts_ms is not None]
        vtts = min(stamps) if stamps else None
    if known:
        decided.say(vtts_ms=vtts)
    shown: dict[str, Any] = {}
    if world.latest_offsets is not None:
        if known:
            shown = as_status_offsets(offsets, world.latest_offsets)
        if (previous.get("offsets") or {}).get("error"):
            shown["error"] = None  # removed (the status is merge-patched)
    elif world.kafka_error:  # latest and lag stay as they were, and say so
        if known:
            shown["committed"] = by_partition(offsets)
        shown["error"] = (
            f"Kafka could not be asked for the latest offsets, so latest and lag "
            f"are as of an earlier visit: {world.kafka_error}"
        )[:500]
    if shown:
        decided.say(offsets=shown)


def _lowest(views: list[TableView]) -> dict[int, int]:
    """Per partition, the lowest offset the tables that hold any have committed (what the
    status shows for a routed topic)."""
    written = [view for view in views if view.exists and view.offsets]
    partitions = set().union(*(view.offsets for view in written))
    return {p: min(view.offsets.get(p, 0) for view in written) for p in partitions}


def lag_of(world: World) -> int | None:
    """The records in Kafka past the resource's tables' offsets (the status's lag), if Kafka
    and every table could be read."""
    views = [world.table, *world.routes.values()]
    if world.latest_offsets is None or any(view.error for view in views):
        return None
    lag: int | None = as_status_offsets(_lowest(views), world.latest_offsets)["lag"]
    return lag


def _table_entry(identifier: str, view: TableView, world: World) -> dict[str, Any]:
    """One table's line in ``status.tables``: its snapshot, offsets, lag and freshness."""
    entry: dict[str, Any] = {"identifier": identifier, "exists": view.exists}
    if view.layout_error:
        entry["error"] = view.layout_error[:500]
    if view.snapshot_id is not None:
        entry["snapshotId"] = str(view.snapshot_id)
    if view.committed_at_ms is not None:
        entry["committedAt"] = iso(view.committed_at_ms / 1000)
    if view.exists:
        entry["committed"] = by_partition(view.offsets)
    if world.latest_offsets is not None and view.exists:
        entry["lag"] = as_status_offsets(view.offsets, world.latest_offsets)["lag"]
    if view.vtts_ms is not None:
        entry["landedThrough"] = iso(view.vtts_ms / 1000)
    return entry
