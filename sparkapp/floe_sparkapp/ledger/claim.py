"""The claim: a table has one writer, the resource recorded in its property ``floe.writer``."""

from __future__ import annotations

from typing import Any

OWNER = "floe.writer"  # the table property naming the resource that writes the table


class TableInUse(RuntimeError):
    """Another resource writes the table: one table has one writer."""


def claim_table(table: Any, writer: str) -> None:
    """Records ``writer`` as the table's writer (table property ``floe.writer``) when it has
    none; refuses when another resource is recorded.  The operator hands a table over
    (:func:`hand_over_table`) once the resource that wrote it is gone."""
    owner = table.properties.get(OWNER)
    if owner == writer:
        return
    if owner is not None:
        raise TableInUse(
            f"the table is written by {owner} (its table property {OWNER}); one "
            "table has one writer: point table.identifier at another table, or "
            "delete that resource first"
        )
    hand_over_table(table, writer)


def hand_over_table(table: Any, writer: str) -> None:
    """Makes ``writer`` the table's writer: it goes on from the offsets committed for its Kafka
    topic, whoever committed them (a renamed resource continues where the old name stopped)."""
    with table.transaction() as update:
        update.set_properties({OWNER: writer})
