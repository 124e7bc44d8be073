"""The commits: where a topic stands in a table, read from the newest floe snapshot for it in
a branch's ancestry, from the writer's tag when expiry cut that ancestry, or from the rows of
the snapshot it was cut at."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .refs import MAIN, OFFSETS_TAG_PREFIX, head, offsets_tag
from .summary import (
    BATCH_ID,
    BATCH_START,
    DEAD_LETTER_ERROR,
    GENERATION,
    OFFSETS,
    ROUTING,
    TABLES,
    TOPIC,
    TOPIC_ID,
    VTTS,
    WRITER,
)


@dataclass(frozen=True)
class Committed:
    """What a writer has committed: the snapshot and the next offset per partition."""

    snapshot_id: int | None = None
    offsets: dict[int, int] = field(default_factory=dict)
    vtts: int | None = None
    generation: int | None = None
    dead_letter_error: str | None = None
    from_tag: bool = False  # main's ancestry was cut by expiry: read from the writer's tag
    topic_id: str | None = None  # the Kafka cluster and topic ids the offsets are of
    tables: tuple[str, ...] | None = None  # a routed topic's tables when this was committed
    timestamp_ms: int | None = None  # when it was committed
    routing: str | None = None  # a routed topic's: the digest of the routing of its batch
    batch_start: dict[int, int] | None = None  # a routed topic's: where its batch was read from
    batch_id: int | None = None
    from_rows: bool = False  # main's ancestry was cut with no tag below: read from its rows


def _counts(summary: Any, writer: str, topic: str | None) -> bool:
    """Whether a snapshot's offsets are the ones to go on from: those of the same Kafka topic
    (a table has one writer at a time, a resource one topic), or, for snapshots from before
    floe recorded the topic, those of the same writer."""
    if summary is None:
        return False
    if topic is not None and summary.get(TOPIC) is not None:
        return summary.get(TOPIC) == topic and summary.get(WRITER) is not None
    return bool(summary.get(WRITER) == writer)


def _committed(snapshot: Any, from_tag: bool = False) -> Committed:
    summary = snapshot.summary
    offsets = {int(p): int(o) for p, o in json.loads(summary.get(OFFSETS, "{}")).items()}
    vtts = summary.get(VTTS)
    generation = summary.get(GENERATION)
    tables = summary.get(TABLES)
    start = summary.get(BATCH_START)
    batch_id = summary.get(BATCH_ID)
    return Committed(
        snapshot.snapshot_id,
        offsets,
        int(vtts) if vtts else None,
        int(generation) if generation else None,
        summary.get(DEAD_LETTER_ERROR),
        from_tag,
        summary.get(TOPIC_ID),
        tuple(tables.split(",")) if tables is not None else None,
        snapshot.timestamp_ms,
        summary.get(ROUTING),
        {int(p): int(o) for p, o in json.loads(start).items()} if start is not None else None,
        int(batch_id) if batch_id else None,
    )


def last_commit(
    table: Any, writer: str, topic: str | None = None, at: int | None = None, ref: str = MAIN
) -> Committed:
    """The newest floe snapshot in branch ``ref``'s ancestry (``main``'s, or the branch the
    resource lands in, :func:`head`) for ``topic`` (see :func:`_counts`), or in the ancestry of
    snapshot ``at``.

    When the ancestry is cut (a parent expired) before it reaches one, the snapshot of the
    writer's offsets tag, which no expiry removes (the package's doc); when it ends at the table's
    root, nothing: the branch holds no commit."""
    start = snapshot = head(table, ref) if at is None else table.snapshot_by_id(at)
    while snapshot is not None:
        if _counts(snapshot.summary, writer, topic):
            return _committed(snapshot)
        if snapshot.parent_snapshot_id is None:
            return Committed()
        parent = table.snapshot_by_id(snapshot.parent_snapshot_id)
        if parent is None:
            tagged = tagged_commit(table, writer, topic, below=snapshot)
            return tagged if tagged.snapshot_id is not None else rows_commit(table, start, topic)
        snapshot = parent
    return Committed()


_ROWS_SEEN: dict[tuple[str, int, str], dict[int, int]] = {}  # a snapshot's rows never change


def rows_commit(table: Any, snapshot: Any, topic: str | None) -> Committed:
    """What ``snapshot``'s rows say has landed of ``topic``: per partition, the offset after
    its newest row.  For an ancestry cut at a snapshot that is not floe's (a compaction, a
    manifest rewrite, an operation's chunk, whose parent expired) with no writer's tag below
    it: ``main`` was rolled back there after later commits moved the tag, and the snapshot
    holds every row up to a floe commit whose summary is gone.  Records after the newest row
    that are not rows of the table (routed elsewhere, tombstones) are read again: each table
    leaves what its own offsets hold, and a tombstone deletes a row that is already gone."""
    if topic is None or snapshot is None:
        return Committed()
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.expressions import EqualTo

    key = (str(table.metadata.table_uuid), snapshot.snapshot_id, topic)
    if key not in _ROWS_SEEN:
        newest: dict[int, int] = {}
        scan = table.scan(
            snapshot_id=snapshot.snapshot_id,
            # pyiceberg's EqualTo(term, literal): the pydantic plugin sees only the fields
            row_filter=EqualTo("kafka.topic", topic),  # type: ignore[call-arg]
            selected_fields=("kafka.partition", "kafka.offset"),
        )
        if next(iter(scan.plan_files()), None) is not None:
            for batch in scan.to_arrow_batch_reader():
                kafka = batch.column("kafka")
                rows = pa.table(
                    {
                        "p": pc.struct_field(kafka, "partition"),
                        "o": pc.struct_field(kafka, "offset"),
                    }
                )
                for found in rows.group_by("p").aggregate([("o", "max")]).to_pylist():
                    p, o = int(found["p"]), int(found["o_max"])
                    newest[p] = max(newest.get(p, -1), o)
        if len(_ROWS_SEEN) > 64:
            _ROWS_SEEN.clear()
        _ROWS_SEEN[key] = {p: o + 1 for p, o in newest.items()}
    offsets = _ROWS_SEEN[key]
    if not offsets:
        return Committed()
    return Committed(
        snapshot.snapshot_id, dict(offsets), timestamp_ms=snapshot.timestamp_ms, from_rows=True
    )


def tagged_commit(
    table: Any, writer: str, topic: str | None = None, below: Any = None
) -> Committed:
    """The commit the writer's offsets tag is on (or an earlier writer's tag for the same
    topic), in ``main``'s ancestry or not: that the table has one says floe committed to it
    (``main`` may since have been rolled back before every commit).  With ``below``, where
    ``main``'s ancestry was cut, only a tag on an older snapshot."""
    found = []
    for name, ref in table.refs().items():
        if not name.startswith(OFFSETS_TAG_PREFIX):
            continue
        snapshot = table.snapshot_by_id(ref.snapshot_id)
        if (
            snapshot is not None
            and _counts(snapshot.summary, writer, topic)
            and (below is None or snapshot.sequence_number < below.sequence_number)
        ):
            found.append((name == offsets_tag(writer), snapshot.sequence_number, snapshot))
    if not found:
        return Committed()
    return _committed(max(found, key=lambda f: f[:2])[2], from_tag=True)


def commits_since(
    table: Any,
    writer: str,
    since_snapshot_id: int | None,
    limit: int = 10_000,
    topic: str | None = None,
    ref: str = MAIN,
) -> int:
    """How many snapshots of ``writer`` branch ``ref`` gained after ``since_snapshot_id`` (all
    of them, up to ``limit``, when that snapshot is not in the ancestry, e.g. expired or
    None)."""
    count, walked = 0, 0
    snapshot = head(table, ref)
    while snapshot is not None and walked < limit and snapshot.snapshot_id != since_snapshot_id:
        if _counts(snapshot.summary, writer, topic):
            count += 1
        walked += 1
        if snapshot.parent_snapshot_id is None:
            break
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
    return count
