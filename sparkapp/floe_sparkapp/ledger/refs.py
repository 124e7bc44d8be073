"""The table's refs as the ledger names and reads them: ``main`` and a branch's head and
ancestry, a writer's batch branches, its offsets tag, and the holds of maintenance actions."""

from __future__ import annotations

import hashlib
from typing import Any

MAIN = "main"


def head(table: Any, ref: str = MAIN) -> Any:
    """The snapshot branch ``ref`` is at; a branch not made yet is where it will be made, at
    ``main``'s (None for a table without snapshots)."""
    made = table.refs().get(ref) if ref != MAIN else None
    return table.current_snapshot() if made is None else table.snapshot_by_id(made.snapshot_id)


def ancestors(table: Any, limit: int = 100_000, ref: str = MAIN) -> list[Any]:
    """Branch ``ref``'s snapshots, newest first, as far as its ancestry reaches."""
    found: list[Any] = []
    snapshot = head(table, ref)
    while snapshot is not None and len(found) < limit:
        found.append(snapshot)
        if snapshot.parent_snapshot_id is None:
            break
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
    return found


def _digest(writer: str) -> str:
    return hashlib.sha256(writer.encode()).hexdigest()[:8]


def branch_prefix(writer: str) -> str:
    """The names of a writer's batch branches start with this: ``floe_<digest of writer>_``."""
    return f"floe_{_digest(writer)}_"


OFFSETS_TAG_PREFIX = "floe_offsets_"
# A maintenance action (compaction, a manifest rewrite) tags the snapshot it starts from while
# it runs: its commit checks the history from there, which the job's expiry then keeps.  A hold
# left by a killed run lapses (Iceberg's expiry drops the tag) after this long.
HOLD_PREFIX = "floe_hold_"
HOLD_MAX_AGE_MS = 6 * 3600 * 1000


def offsets_tag(writer: str) -> str:
    """The tag on the writer's newest committed snapshot.  The table's one writer keeps only
    its own: the first commit after a takeover drops the tag of the writer before it."""
    return f"{OFFSETS_TAG_PREFIX}{_digest(writer)}"


def held_since(refs: Any, now_ms: int) -> int | None:
    """The timestamp (ms) of the oldest snapshot a running maintenance action holds, from the
    table's refs as ``(name, snapshot timestamp ms or None)`` pairs; None when none is held
    (a hold older than :data:`HOLD_MAX_AGE_MS` has lapsed)."""
    held = [
        int(at)
        for name, at in refs
        if name.startswith(HOLD_PREFIX) and at is not None and now_ms - at < HOLD_MAX_AGE_MS
    ]
    return min(held) if held else None
