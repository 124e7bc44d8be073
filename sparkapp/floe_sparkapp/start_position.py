"""Where the streaming query starts: what the topic's tables committed, the lowest of their
offsets (a table whose route was added, or added back, joining where the others are), a
checkpoint that would resume above them removed, and a ``latest`` job's first start recorded on
the tables.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import SparkSession

from . import checkpoint
from .commit import BranchCommitter
from .config import JobConfig
from .kafka_offsets import floor_offsets, watermarks
from .ledger import Committed, head, last_commit, summary_properties

log = logging.getLogger("floe.job")


def rewind_checkpoint(
    spark: SparkSession, config: JobConfig, committed: Committed, partitions: list[int]
) -> tuple[bool, dict[int, int]]:
    """Removes a checkpoint that would resume above the table's offsets (it outlived its table,
    or ``main`` was rolled back), so the query starts from the table's offsets.  Returns
    whether the query resumes from the checkpoint, and the floor of the partitions the table
    has no offsets for (:func:`floor_offsets`)."""
    location = config.checkpoint_location
    if removed := checkpoint.clear_unfinished_writes(spark, location):
        log.warning(
            "the checkpoint at %s held the unfinished write of a killed process's "
            "first batch (%s): removed, the batch runs again",
            location,
            ", ".join(removed),
        )
    resume = checkpoint.resume_offsets(spark, location, config.kafka.topic)
    if resume is None:
        return False, {}
    floor = floor_offsets(spark, config, sorted(set(resume) - set(committed.offsets)))
    ahead = checkpoint.ahead_of(resume, committed.offsets, floor)
    if not ahead:
        return True, floor
    log.warning(
        "the checkpoint at %s is ahead of table %s (%s): it is removed and the job "
        "starts from the table's offsets %s",
        location,
        config.table.identifier,
        "; ".join(ahead),
        committed.offsets or floor or config.kafka.starting_offsets,
    )
    checkpoint.remove(spark, location)
    return False, floor


def table_commits(config: JobConfig, tables: list[Any]) -> list[Committed]:
    """What the topic's tables have committed (:func:`~.commit.last_commit` of each)."""
    return [
        last_commit(table, config.writer, config.kafka.topic, ref=config.table.ref)
        for table in tables
    ]


def rejoining(config: JobConfig, found: list[Committed]) -> list[bool]:
    """Which of a routed topic's tables (what they committed, :func:`table_commits`) join it
    where the other tables are: those that the newest commit of the topic's tables does not
    name among them (only the topic's own table, when it was not routed).  A route added goes
    on from there (a batch read again must not give it records another table holds); a route
    removed, then added back, too, not from its own older offsets (the topic's own table took
    its records meanwhile): no record lands in two tables."""
    dated = [c for c in found if c.timestamp_ms is not None]
    if len(found) == 1 or not dated:
        return [False] * len(found)
    names = [d.table.identifier for d in config.destinations()]
    newest = max(dated, key=lambda c: c.timestamp_ms or 0)
    known = newest.tables if newest.tables is not None else (names[0],)
    return [name not in known for name in names]


def start_position(config: JobConfig, found: list[Committed]) -> tuple[Committed, list[bool]]:
    """Where the query starts (:func:`lowest_commit` of the tables but those that join again)
    and which tables join again (:func:`rejoining`)."""
    rejoin = rejoining(config, found)
    return lowest_commit([c for c, again in zip(found, rejoin) if not again]), rejoin


def lowest_commit(found: list[Committed]) -> Committed:
    """Where the topic's tables (what they committed, :func:`table_commits`) are all committed
    up to: per partition, the lowest of their offsets.  The query starts there, and each table
    skips what it already has.  A table with no offsets yet (a route just added) goes on from
    where the others are."""
    if len(found) == 1:
        return found[0]
    committed = [c for c in found if c.offsets]
    if not committed:
        return Committed()
    partitions = set().union(*(c.offsets for c in committed))
    return Committed(
        offsets={
            p: min(c.offsets[p] for c in committed if p in c.offsets) for p in sorted(partitions)
        }
    )


def record_first_start(
    spark: SparkSession,
    config: JobConfig,
    tables: list[Any],
    partitions: list[int],
    topic_id: str | None,
) -> Committed:
    """A ``latest`` job's very first start: Kafka's end offsets now, committed (no rows) to
    each of the topic's tables, so that where it started outlives the checkpoint: a job that
    lost its checkpoint before its first batch goes on from there, not from Kafka's end
    again, and the records in between are not skipped."""
    offsets = {p: high for p, (_, high) in watermarks(config, partitions).items()}
    names, routing = config.recorded_routing()
    properties = summary_properties(
        config.writer,
        config.kafka.topic,
        offsets,
        None,
        config.generation,
        0,
        topic_id,
        names,
        routing,
        offsets if names else None,
    )
    for destination, table in zip(config.destinations(), tables):
        committer = BranchCommitter(
            spark,
            destination.table.catalog.name,
            destination.table.identifier,
            config.writer,
            destination.table.ref,
        )
        base = head(table, destination.table.ref)
        committer.publish_summary(base.snapshot_id if base is not None else None, properties)
    log.info(
        "first start of %s at Kafka's latest offsets %s: recorded on its tables",
        config.writer,
        offsets,
    )
    return Committed(offsets=offsets)
