"""Where a micro-batch starts in one table, checked against the table: the table's offsets
decide, never the checkpoint alone.

The table must be the one the job started on (:func:`check_identity`), and a batch that
would start above the writer's offsets there (``main`` rolled back, the job's branch rolled
back or dropped, the table replaced) is not committed (:func:`checkpoint_ahead`): the job
starts again from the table.  A partition the table has no offsets for starts where the job
says when the table is the topic's only one (:func:`start_floor`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .checkpoint import CheckpointAhead
from .config import JobConfig
from .ledger import MAIN, Committed, tagged_commit

log = logging.getLogger("floe.job")


def check_identity(table: Any, table_uuid: str | None, identifier: str, batch_id: int) -> str:
    """The UUID of the table the job started on (``table_uuid``; None: ``table`` is it).
    Stops the batch when ``table`` is not that one (dropped and created again, or another
    table registered under its name): the job starts again from the new table's offsets."""
    found = str(table.metadata.table_uuid)
    if table_uuid is None:
        table_uuid = found
    elif found != table_uuid:
        raise CheckpointAhead(
            f"CheckpointAhead: table {identifier} was replaced while the "
            f"job ran (table UUID {table_uuid}, now {found}); batch {batch_id} is not "
            "committed and the job starts again from the new table's offsets"
        )
    return table_uuid


def start_floor(
    table: Any,
    start: dict[int, int],
    committed: Committed,
    config: JobConfig,
    floor: Callable[[list[int]], dict[int, int]] | None,
    alone: bool,
) -> dict[int, int] | None:
    """Where the batch's partitions that the table has no offsets for must start, when
    that matters: the table is the topic's only one (``alone``; ``floor``: the job's, given
    the partitions).  One of a routed topic's tables with no offsets (a route just added, its
    table dropped and created again, or ``main`` rolled back to its root) goes on from where
    the topic's other tables are: going back would route to it records another table took
    while it was not there."""
    missing = sorted(set(start) - set(committed.offsets))
    if not missing or floor is None:
        return None
    if not alone:
        if (
            not committed.offsets
            and tagged_commit(table, config.writer, config.kafka.topic).offsets
        ):
            log.warning(
                "table %s has none of topic %s's offsets in main but floe's tag "
                "(main rolled back to its root): as one of the topic's routed "
                "tables it goes on from where the batch starts, %s; the records "
                "before are not ingested into it again",
                config.table.identifier,
                config.kafka.topic,
                start,
            )
        return None
    return floor(missing)


def checkpoint_ahead(
    batch_id: int, writer: str, identifier: str, ref: str, ahead: list[str]
) -> CheckpointAhead:
    """Why the batch is not committed: it would start above the table's offsets (``ahead``:
    :func:`.checkpoint.ahead_of`)."""
    return CheckpointAhead(
        f"CheckpointAhead: batch {batch_id} of {writer} would start above table "
        f"{identifier}'s offsets ({'; '.join(ahead)}); "
        + (
            "main was rolled back"
            if ref == MAIN
            else f"its branch {ref} was rolled back or dropped"
        )
        + " or the table replaced: the job starts again from the table"
    )
