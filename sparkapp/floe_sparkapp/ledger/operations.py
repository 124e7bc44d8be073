"""The operations: what an operation did, recorded on the table (the property
``floe.operation.<uid>``) and on the snapshots it committed; a roll back of ``main``, recorded
in the same commit; a metadata-only change tried again."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from .refs import MAIN, ancestors

T = TypeVar("T")


OPERATION_PREFIX = "floe.operation."  # a table property: what operation <uid> did
OPERATION = "floe.operation"  # in a snapshot's summary: the uid of the operation that made it
OPERATION_ROWS = "floe.operation.rows"  # in its snapshot's summary: the rows it changed or added


def operation_record(table: Any, uid: str) -> dict[str, Any] | None:
    """What operation ``uid`` recorded on the table, if it ran."""
    value = table.properties.get(OPERATION_PREFIX + uid)
    return json.loads(value) if value else None


def roll_back(table: Any, snapshot_id: int, uid: str, record: dict[str, Any]) -> Any:
    """Moves ``main`` back to ``snapshot_id`` (an ancestor of it) and records ``record`` as
    operation ``uid``'s, in one commit that holds only if ``main`` is still where this table
    was loaded (a writer's commit in between fails it: load and try again). Returns the
    table after it."""
    from pyiceberg.table.update.snapshot import ManageSnapshots

    with table.transaction() as transaction:
        ManageSnapshots(transaction).rollback_to_snapshot(snapshot_id)
        transaction.set_properties(
            {OPERATION_PREFIX + uid: json.dumps(record, separators=(",", ":"))}
        )
    return table


def operation_snapshots(table: Any, uid: str, ref: str = MAIN) -> list[Any]:
    """The snapshots operation ``uid`` committed in branch ``ref``'s history."""
    return [s for s in ancestors(table, ref=ref) if (s.summary or {}).get(OPERATION) == uid]


def summed(snapshots: list[Any], key: str) -> int:
    """A count the snapshots' summaries carry under ``key``, added up."""
    return sum(int(s.summary.get(key) or 0) for s in snapshots)


def operation_commits(table: Any, uid: str, ref: str = MAIN) -> tuple[int, int]:
    """How many commits operation ``uid`` made in branch ``ref``'s history, and the rows they
    changed or added (:data:`OPERATION_ROWS`)."""
    found = operation_snapshots(table, uid, ref)
    return len(found), summed(found, OPERATION_ROWS)


def retried(table: Any, commit: Callable[[], T], attempts: int = 10) -> T:
    """Runs ``commit`` (a metadata-only change of ``table``: a property, a tag), again on the
    table as it is when a writer committed meanwhile; returns what it returned."""
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(attempts):
        try:
            return commit()
        except CommitFailedException:
            if attempt == attempts - 1:
                raise
            table.refresh()
    raise ValueError(f"retried needs at least one attempt, not {attempts}")


def record_operation(table: Any, uid: str, record: dict[str, Any]) -> None:
    """Records what operation ``uid`` did, as the table property ``floe.operation.<uid>``
    (:func:`retried`)."""
    value = json.dumps(record, separators=(",", ":"), default=str)

    def commit() -> None:
        with table.transaction() as transaction:
            transaction.set_properties({OPERATION_PREFIX + uid: value})

    retried(table, commit)
