"""A roll back's decisions: the snapshot to move ``main`` back to, whether moving it would lose
rows for good, and the topic's restart annotation that restarts its job once."""

from __future__ import annotations

from ..clock import epoch
from .spec import RollbackSpec
from .world import OperationWorld, Snapshot


def restart_value(world: OperationWorld) -> str:
    """The topic's restart annotation that this operation sets: its own, so setting it again
    after a crash restarts nothing."""
    return f"rollback {world.name} {world.uid[:8]}"


def target(spec: RollbackSpec, ancestry: tuple[Snapshot, ...]) -> Snapshot | str:
    """The snapshot to move back to, or why there is none."""
    if spec.snapshot_id is not None:
        wanted = int(spec.snapshot_id)
        at = next((i for i, s in enumerate(ancestry) if s.snapshot_id == wanted), None)
        if at is None:
            return (
                f"snapshot {wanted} is not in main's history (a snapshot of another branch, "
                "expired, or mistyped): nothing was changed"
            )
        if ancestry[at].torn:
            before = next((s.snapshot_id for s in ancestry[at + 1 :] if not s.torn), None)
            after = next((s.snapshot_id for s in reversed(ancestry[:at]) if not s.torn), None)
            return (
                f"snapshot {wanted} is the first half of an upsert batch (its keys' rows "
                "deleted, its records not yet added): the table was never in that state "
                f"between batches. Roll back to {before} (before the batch) or {after} "
                "(after it); nothing was changed"
            )
        return ancestry[at]
    limit = epoch(spec.before) * 1000 if spec.before else 0
    found = next((s for s in ancestry if s.timestamp_ms <= limit and not s.torn), None)
    if found is None:
        return f"main has no snapshot committed at or before {spec.before}: nothing was changed"
    return found


def unsafe_rollback(world: OperationWorld, table: str, to: int) -> tuple[str, str] | None:
    """Why moving ``main`` of ``table`` back to snapshot ``to`` would lose rows for good, as
    the operation's phase and message (``Pending`` while Kafka has not answered), or None: a
    route's table before its first commit (it would go on from where the topic's other tables
    are), or records after the snapshot that Kafka no longer holds (the job could not land
    them again)."""
    at = world.offsets_at.get(to, {})
    if world.tables and table != world.tables[0] and not at:
        return "Failed", (
            f"cannot roll back: snapshot {to} of {table} is before the table's first commit of "
            "the topic's records, and a route's table without offsets goes on from where the "
            "topic's other tables are: the rows after it would not land again. Roll back to a "
            "snapshot at or after its first commit (the oldest whose summary has floe.offsets)"
            "; nothing was changed"
        )
    if world.kafka_holds is None:
        return "Pending", (
            f"asking Kafka whether it still holds the records after snapshot {to} of {table} "
            f"(the job lands them again): {world.kafka_error or 'no answer yet'}"
        )
    gone = {
        p: (at.get(p, 0), low)
        for p, low in sorted(world.kafka_holds.items())
        if world.offsets.get(p, 0) > at.get(p, 0) and low > at.get(p, 0)
    }
    if not gone:
        return None
    where = ", ".join(
        f"partition {p} offsets {since} to {low - 1}" for p, (since, low) in gone.items()
    )
    return "Failed", (
        f"cannot roll back: Kafka no longer holds records after snapshot {to} of {table} that "
        f"main holds and the job would have to land again ({where}: past the topic's "
        "retention), so their rows would be lost. Roll back to a later snapshot, or keep the "
        "rows and fix them with a Repair; nothing was changed"
    )
