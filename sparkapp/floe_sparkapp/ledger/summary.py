"""What a floe snapshot's summary carries (its keys, written by :func:`summary_properties`),
and whether a snapshot is a state of the table between batches (:func:`torn`)."""

from __future__ import annotations

import json
from typing import Any

WRITER = "floe.writer"
OFFSETS = "floe.offsets"
VTTS = "floe.vtts"
GENERATION = "floe.generation"
BATCH_ID = "floe.batch-id"
TOPIC = "floe.topic"
TOPIC_ID = "floe.kafka-topic-id"  # <cluster id>/<topic id>: which topic the offsets are of
TABLES = "floe.tables"  # a routed topic's tables, as the job that committed had them
ROUTING = "floe.routing"  # a routed topic's routing (its digest) the batch was committed with
BATCH_START = "floe.batch-start"  # a routed batch's start, per partition: where it was read from
# On the snapshots an upsert batch makes before its last (its deletes, on the batch's branch):
# not a state of the table between batches, so never a target to publish or roll back to.
BATCH_PART = "floe.batch-part"
DEAD_LETTER_ERROR = "floe.dead-letter-error"  # undecodable records the dead-letter topic refused


def torn(snapshot: Any) -> bool:
    """Whether ``snapshot`` is one an upsert batch made before its last (:data:`BATCH_PART`):
    the table as no batch left it."""
    summary = getattr(snapshot, "summary", None)
    return summary is not None and summary.get(BATCH_PART) is not None


def merge_offsets(committed: dict[int, int], batch_next: dict[int, int]) -> dict[int, int]:
    merged = dict(committed)
    for partition, offset in batch_next.items():
        merged[partition] = max(offset, merged.get(partition, 0))
    return merged


def summary_properties(
    writer: str,
    topic: str,
    offsets: dict[int, int],
    vtts: int | None,
    generation: int,
    batch_id: int,
    topic_id: str | None = None,
    tables: tuple[str, ...] = (),
    routing: str | None = None,
    batch_start: dict[int, int] | None = None,
) -> dict[str, str]:
    """A floe snapshot's summary; ``tables``: a routed topic's tables (identifiers), with the
    digest of its ``routing`` and where the batch was read from (``batch_start``): enough to
    finish a batch that stopped between two tables' commits as it began."""
    props = {
        WRITER: writer,
        TOPIC: topic,
        OFFSETS: json.dumps({str(p): o for p, o in sorted(offsets.items())}, separators=(",", ":")),
        GENERATION: str(generation),
        BATCH_ID: str(batch_id),
    }
    if vtts is not None:
        props[VTTS] = str(vtts)
    if topic_id is not None:
        props[TOPIC_ID] = topic_id
    if tables:
        props[TABLES] = ",".join(tables)
    if routing is not None:
        props[ROUTING] = routing
    if batch_start is not None:
        props[BATCH_START] = json.dumps(
            {str(p): o for p, o in sorted(batch_start.items())}, separators=(",", ":")
        )
    return props
