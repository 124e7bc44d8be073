"""A routed topic's batch that stopped between two of its tables' commits, finished with the
routing it began with before the job goes on.

A batch commits to the topic's tables one after the other, the topic's own table first, each
on its own (:class:`~.batch_writer.BatchWriter`).  A driver that stops in between (a crash, a
failover, the application replaced for a spec change) leaves some tables at the batch's end and
the others below it.  If the routes changed before the job starts again (a route removed,
added, its values or order changed, ``fanOut`` toggled, the value's conversions changed, a roll
back of the spec), reading that batch again with the new routing would lose the records of a
removed route's table (the own table already holds the batch's end) and give a new route's
table records the own table already holds.

The rule: **a batch lands with the routing it began with.**  Every commit of a routed topic
records the digest of its routing (``floe.routing``) and where its batch was read from
(``floe.batch-start``); the routing itself is kept on the topic's own table (table property
``floe.routing.<digest>``).  At its start the job reads the own table's last commit (the batch
begun last): when a table of that batch's routing is below the batch's end, the batch is read
again from Kafka and landed with that routing, each table taking only what it lacks; then the
job's own routing applies, and a table the last batch's routing did not have goes on from
where the others are (:func:`~.start_position.rejoining`).  A routing change with no partial
batch keeps what it always did: the new routing from the next record on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from . import catalog as catalogs
from .batch_writer import BatchWriter
from .config import JobConfig
from .kafka_offsets import read_range
from .ledger import Committed, last_commit, tagged_commit
from .registry import Registry

log = logging.getLogger("floe.job")

ROUTING_PREFIX = "floe.routing."  # + digest: a routing the topic's tables were committed with


def keep_routing(table: Any, config: JobConfig, last: Committed) -> None:
    """Keeps the job's routing on the topic's own ``table`` (before any batch commits with
    it), and the one the table's ``last`` commit was made with; drops the others."""
    wanted = (
        {f"{ROUTING_PREFIX}{config.routing_digest()}": config.routing()} if config.routes else {}
    )
    kept = {*wanted, f"{ROUTING_PREFIX}{last.routing}"}
    stale = [k for k in table.properties if k.startswith(ROUTING_PREFIX) and k not in kept]
    if not stale and all(table.properties.get(k) == v for k, v in wanted.items()):
        return
    with table.transaction() as update:
        if wanted:
            update.set_properties(wanted)
        if stale:
            update.remove_properties(*stale)


def began_with(config: JobConfig, table: Any, last: Committed) -> JobConfig | None:
    """The job as it was when the own table's ``last`` commit was made: with the routing that
    commit recorded (None when the table no longer has it)."""
    if last.routing == config.routing_digest():
        return config
    recorded = table.properties.get(f"{ROUTING_PREFIX}{last.routing}")
    return config.routed_as(recorded) if recorded is not None else None


def _stopped(table: Any, config: JobConfig, last: Committed, start: dict[int, int]) -> bool:
    """Whether one of the batch's tables stopped where the batch ``last`` committed began: at
    its start, or, the batch being its first, made before it and with no offsets in ``main``
    or the writer's tag.  A table below the start, or emptied since it committed (``main``
    rolled back to its root: the tag still has offsets; dropped and made again after the
    batch) is not one: the job goes on with it as it always did."""
    offsets = last_commit(table, config.writer, config.kafka.topic, ref=config.table.ref).offsets
    if offsets:
        return all(offsets.get(p, o) == o for p, o in start.items())
    if tagged_commit(table, config.writer, config.kafka.topic).offsets:
        return False
    log_ = table.metadata.metadata_log
    made = log_[0].timestamp_ms if log_ else table.metadata.last_updated_ms
    return last.timestamp_ms is not None and made <= last.timestamp_ms


def behind(
    config: JobConfig, destinations: list[JobConfig], last: Committed, start: dict[int, int]
) -> list[str]:
    """The tables of the batch's routing (``destinations``) that stopped where the batch
    ``last`` committed began (:func:`_stopped`); not one the catalog no longer has (dropped,
    with its records)."""
    catalog = catalogs.load_catalog(config.catalog())
    found = []
    for destination in destinations[1:]:
        identifier = destination.table.identifier
        try:
            table = catalog.load_table(identifier)
        except Exception:  # noqa: BLE001 - no such table
            continue
        if _stopped(table, config, last, start):
            found.append(identifier)
    return found


def finish(
    spark: SparkSession,
    config: JobConfig,
    registry: Registry | None,
    table: Any,
    last: Committed,
    topic_id: str | None,
    ready: Callable[[JobConfig], Any],
) -> list[str]:
    """Finishes the batch the topic's own ``table`` committed ``last`` where the driver
    stopped before its other tables committed it: read again from Kafka and landed with the
    routing it began with (``ready`` makes a table of it ready to write).  Returns the tables
    that were behind (none: nothing to finish)."""
    if last.routing is None or last.batch_start is None or not last.tables:
        return []
    began = began_with(config, table, last)
    if began is None:
        log.warning(
            "the last batch of topic %s was committed with a routing (%s) the table "
            "%s no longer records: whether it stopped between two tables' commits "
            "cannot be told, and the job goes on with its own routing",
            config.kafka.topic,
            last.routing,
            config.table.identifier,
        )
        return []
    start = {p: o for p, o in last.batch_start.items() if o < last.offsets.get(p, o)}
    if not start:  # a batch that read nothing (or where a latest job first started)
        return []
    destinations = began.destinations()
    lagging = behind(config, destinations, last, start)
    if not lagging:
        return []
    end = {p: last.offsets[p] for p in start}
    log.warning(
        "the last batch of topic %s (from %s to %s) stopped before tables %s committed "
        "it%s: it is landed in them now, with the routing it began with",
        config.kafka.topic,
        start,
        end,
        ", ".join(lagging),
        "" if began is config else " and the routes changed since",
    )
    tables = [ready(destination) for destination in destinations]
    rejoins = []
    for made in tables:
        committed = last_commit(made, config.writer, config.kafka.topic, ref=config.table.ref)
        below = {p: o for p, o in start.items() if committed.offsets.get(p, 0) < o}
        rejoins.append(below or None)  # (a table with nothing yet, or that joined again)
    writer = BatchWriter(
        began, spark, registry, [str(t.metadata.table_uuid) for t in tables], topic_id, rejoins
    )
    writer.land(read_range(spark, config, start, end), last.batch_id or 0, start, end)
    return lagging
