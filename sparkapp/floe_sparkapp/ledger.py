"""The ledger: what a table says about the writers that land topics in it, read by the
operator and the job alike (the one module of the job the operator imports).

- **The claim.** A table has one writer, the resource recorded in its property ``floe.writer``
  (:func:`claim_table`, :func:`hand_over_table`).
- **The commits.** Each floe commit is one snapshot on ``main`` whose summary carries
  ``floe.writer``, ``floe.topic``, ``floe.offsets`` (the next offset per partition, cumulative
  over every partition ever committed), ``floe.vtts`` (valid-through timestamp, ms),
  ``floe.generation`` and ``floe.batch-id``; a routed topic's also ``floe.tables``,
  ``floe.routing`` and ``floe.batch-start`` (:func:`summary_properties`). The newest one for a
  topic in ``main``'s ancestry is where the topic stands (:func:`last_commit`); maintenance
  commits in between do not hide it.
- **The tag.** The writer's tag (``floe_offsets_<digest of writer>``) is on its newest commit
  and keeps it from expiry: when ``main``'s ancestry is cut before it reaches a floe snapshot,
  the offsets are read from the tag, so they survive a lost checkpoint.
- **The holds.** A maintenance action tags the snapshot it starts from while it runs
  (``floe_hold_``); the job's expiry keeps what a hold needs.
- **The operations.** An operation that changes ``main`` (a roll back) records what it did in
  the same commit, as the table property ``floe.operation.<uid>`` (:func:`roll_back`): done
  once, however often it is tried.

How a commit is made (staged files, the compare-and-set on ``main``) is :mod:`.commit`'s.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

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
OWNER = "floe.writer"  # the table property naming the resource that writes the table
T = TypeVar("T")


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


MAIN = "main"


def head(table: Any, ref: str = MAIN) -> Any:
    """The snapshot branch ``ref`` is at; a branch not made yet is where it will be made, at
    ``main``'s (None for a table without snapshots)."""
    made = table.refs().get(ref) if ref != MAIN else None
    return table.current_snapshot() if made is None else table.snapshot_by_id(made.snapshot_id)


def last_commit(
    table: Any, writer: str, topic: str | None = None, at: int | None = None, ref: str = MAIN
) -> Committed:
    """The newest floe snapshot in branch ``ref``'s ancestry (``main``'s, or the branch the
    resource lands in, :func:`head`) for ``topic`` (see :func:`_counts`), or in the ancestry of
    snapshot ``at``.

    When the ancestry is cut (a parent expired) before it reaches one, the snapshot of the
    writer's offsets tag, which no expiry removes (module doc); when it ends at the table's
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


OPERATION_PREFIX = "floe.operation."  # a table property: what operation <uid> did
OPERATION = "floe.operation"  # in a snapshot's summary: the uid of the operation that made it
OPERATION_ROWS = "floe.operation.rows"  # in its snapshot's summary: the rows it changed or added


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


def torn(snapshot: Any) -> bool:
    """Whether ``snapshot`` is one an upsert batch made before its last (:data:`BATCH_PART`):
    the table as no batch left it."""
    summary = getattr(snapshot, "summary", None)
    return summary is not None and summary.get(BATCH_PART) is not None


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
