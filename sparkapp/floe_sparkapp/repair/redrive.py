"""The dead letters a repair re-drives: why one is left out (:data:`LEFT_OUT`), those that may
land, and the outcome's count of those left out."""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..dead_letters import TABLE

DEAD_LETTERS = "floe.operation.dead-letters"  # a commit's rows re-driven from dead letters
REASON = "_left_out"  # a dead letter's column: why it is not re-driven (null: it may be)
# Why dead letters are not re-driven into the table, and what to do instead (the outcome's
# ``deadLetters.leftOut``, which the operation's status shows)
LEFT_OUT = {
    "uncommitted": (
        "at or above the table's offsets: their batch was not committed when they were sent "
        "(the driver killed, a lost commit), and the job lands these records itself; nothing "
        "to do (a record Kafka no longer has is re-driven by a repair once the table's "
        "offsets are past it)"
    ),
    "otherTable": (
        "sent by another of the topic's tables (a route's): a repair of that table "
        "(repair.table) re-drives them"
    ),
    "unknownTable": (
        "sent before floe named the table on each dead letter, and the topic has several "
        "tables: no repair re-drives them; a Backfill of their partitions and offsets lands "
        "those the table lacks, while Kafka has them"
    ),
}


def why_left_out(table: str, routed: bool, offsets: dict[int, int]) -> Column:
    """Why a dead letter (:func:`.dead_letters.records`) is not re-driven into ``table`` (a
    key of :data:`LEFT_OUT`), or null: another table sent it, or it does not say which table
    did and the topic has several (``routed``); or its record is at or above the table's
    ``offsets`` (any offset of a partition they lack), which the job lands itself."""
    named = F.col(TABLE)
    start = F.lit(0)
    if offsets:
        known = F.create_map(*[F.lit(x) for p, o in sorted(offsets.items()) for x in (p, o)])
        start = F.coalesce(known[F.col("partition")], F.lit(0))
    return (
        F.when(named.isNotNull() & (named != F.lit(table)), F.lit("otherTable"))
        .when(named.isNull() & F.lit(routed), F.lit("unknownTable"))
        .when(F.col("offset") >= start, F.lit("uncommitted"))
    )


def landable_records(letters: DataFrame) -> DataFrame:
    """The dead letters not left out (:data:`REASON`), each record once, as the Kafka records
    they were."""
    return (
        letters.filter(F.col(REASON).isNull())
        .dropDuplicates(["partition", "offset"])
        .drop(REASON, TABLE, "_dead_letter_error")
    )


def left_out(letters: DataFrame) -> dict[str, Any]:
    """The outcome's ``leftOut`` of the dead letters: how many of each reason, and what to do
    instead; nothing when none is left out."""
    counts = {
        r[0]: int(r[1])
        for r in letters.filter(F.col(REASON).isNotNull()).groupBy(REASON).count().collect()
    }
    if not counts:
        return {}
    return {
        "leftOut": {
            reason: {"count": count, "why": LEFT_OUT[reason]}
            for reason, count in sorted(counts.items())
        }
    }
