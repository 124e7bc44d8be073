"""A branch published: ``main`` moved forward to one of the branch's snapshots."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .refs import ancestors
from .summary import torn


@dataclass(frozen=True)
class Publication:
    """What publishing a branch did: ``main``'s head after it (``snapshot_id``), whether it
    moved ``main`` there, and, when it could not, why."""

    snapshot_id: int | None = None
    moved: bool = False
    error: str | None = None


def publish(table: Any, branch: str, snapshot_id: int | None = None) -> Publication:
    """Moves ``main`` to snapshot ``snapshot_id`` of ``branch`` (default: the branch's head)
    when ``main`` is an ancestor of it (a fast-forward: ``main``'s readers gain the branch's
    commits up to there, and nothing they had is lost), in one commit that holds only if
    ``main`` is still where the table was loaded (a concurrent change of ``main`` fails it:
    load and try again).  A snapshot ``main`` already has is published already; a ``main``
    that is not an ancestor (it changed outside floe) is not forced: the error says what to
    do."""
    if branch not in table.refs():
        return Publication(
            getattr(table.current_snapshot(), "snapshot_id", None),
            error=(f"the table has no branch {branch} yet: the job makes it with its first commit"),
        )
    on_branch = ancestors(table, ref=branch)
    target = snapshot_id if snapshot_id is not None else on_branch[0].snapshot_id
    main = table.current_snapshot()
    main_id = None if main is None else main.snapshot_id
    if target == main_id or target in {s.snapshot_id for s in ancestors(table)}:
        return Publication(main_id)  # published already
    position = next((i for i, s in enumerate(on_branch) if s.snapshot_id == target), None)
    if position is None:
        return Publication(
            main_id,
            error=(
                f"snapshot {target} is not on branch {branch}: give one of its snapshots (its head "
                f"is {on_branch[0].snapshot_id})"
            ),
        )
    if torn(on_branch[position]):
        return Publication(
            main_id,
            error=(
                f"snapshot {target} is the first half of an upsert batch on branch {branch} (its "
                f"keys' rows deleted, its records not yet added): publish its parent "
                f"{on_branch[position + 1].snapshot_id if position + 1 < len(on_branch) else ''} "
                f"(before the batch) or the batch's snapshot "
                f"{on_branch[position - 1].snapshot_id if position > 0 else ''} (after it)"
            ),
        )
    below = {s.snapshot_id for s in on_branch[position:]}
    if main_id is not None and main_id not in below:
        return Publication(
            main_id,
            error=(
                f"main (snapshot {main_id}) is not an ancestor of branch {branch}'s snapshot "
                f"{target}: main changed outside floe (a write to main, or a roll back to a "
                f"snapshot the branch does not have), and floe does not force it. Roll main back "
                f"to a snapshot of the branch, or drop the branch: the job then lands again, into "
                f"a new branch made from main, what main lacks"
            ),
        )
    from pyiceberg.table.update.snapshot import ManageSnapshots

    with table.transaction() as transaction:
        ManageSnapshots(transaction).set_current_snapshot(snapshot_id=target)
    return Publication(target, moved=True)
