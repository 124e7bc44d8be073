"""The exactly-once commit protocol.

Each floe commit is one snapshot on ``main`` whose summary carries ``floe.writer`` (the
resource's namespace/name), ``floe.offsets`` (next offset per partition, cumulative over all
partitions ever committed), ``floe.vtts`` (valid-through timestamp, ms), ``floe.generation``
and ``floe.batch-id``.  Readers walk ``main``'s ancestry to the newest snapshot of their writer,
so maintenance commits in between do not hide the offsets.

A batch is committed like this:

1. read the newest floe snapshot of this writer on ``main`` (snapshot S, offsets O);
2. drop the batch's rows below O (a replayed batch becomes a no-op);
3. create a branch at ``main``'s current snapshot M and append the rows there (snapshot B);
4. fast-forward ``main`` to B.  Iceberg refuses when ``main`` has moved past M meanwhile (a
   second, zombie writer committed, or maintenance did); then the branch is dropped and the
   batch starts over from step 1, so rows another writer committed are never written twice.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

log = logging.getLogger("floe.commit")

WRITER = "floe.writer"
OFFSETS = "floe.offsets"
VTTS = "floe.vtts"
GENERATION = "floe.generation"
BATCH_ID = "floe.batch-id"
TOPIC = "floe.topic"


class CommitConflict(RuntimeError):
    """``main`` moved while a batch was being written; the batch is retried."""


class CommitFailed(RuntimeError):
    """A batch could not be committed within the attempt limit."""


@dataclass(frozen=True)
class Committed:
    """What a writer has committed: the snapshot and the next offset per partition."""

    snapshot_id: int | None = None
    offsets: dict[int, int] = field(default_factory=dict)
    vtts: int | None = None
    generation: int | None = None


def last_commit(table: Any, writer: str) -> Committed:
    """The newest snapshot in ``main``'s ancestry written by ``writer`` (PyIceberg table)."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary
        if summary is not None and summary.get(WRITER) == writer:
            offsets = {int(p): int(o) for p, o in json.loads(summary.get(OFFSETS, "{}")).items()}
            vtts = summary.get(VTTS)
            generation = summary.get(GENERATION)
            return Committed(snapshot.snapshot_id, offsets, int(vtts) if vtts else None,
                             int(generation) if generation else None)
        if snapshot.parent_snapshot_id is None:
            break
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
    return Committed()


def commits_since(table: Any, writer: str, since_snapshot_id: int | None,
                  limit: int = 10_000) -> int:
    """How many snapshots of ``writer`` ``main`` gained after ``since_snapshot_id`` (all of
    them, up to ``limit``, when that snapshot is not in the ancestry, e.g. expired or None)."""
    count, walked = 0, 0
    snapshot = table.current_snapshot()
    while snapshot is not None and walked < limit and snapshot.snapshot_id != since_snapshot_id:
        summary = snapshot.summary
        if summary is not None and summary.get(WRITER) == writer:
            count += 1
        walked += 1
        if snapshot.parent_snapshot_id is None:
            break
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
    return count


def merge_offsets(committed: dict[int, int], batch_next: dict[int, int]) -> dict[int, int]:
    merged = dict(committed)
    for partition, offset in batch_next.items():
        merged[partition] = max(offset, merged.get(partition, 0))
    return merged


def summary_properties(writer: str, topic: str, offsets: dict[int, int], vtts: int | None,
                       generation: int, batch_id: int) -> dict[str, str]:
    props = {
        WRITER: writer,
        TOPIC: topic,
        OFFSETS: json.dumps({str(p): o for p, o in sorted(offsets.items())},
                            separators=(",", ":")),
        GENERATION: str(generation),
        BATCH_ID: str(batch_id),
    }
    if vtts is not None:
        props[VTTS] = str(vtts)
    return props


def _is_conflict(error: Exception) -> bool:
    text = str(error)
    return ("not an ancestor" in text or "CommitFailedException" in text
            or "ValidationException" in text or "Cannot fast-forward" in text)


@dataclass
class BranchCommitter:
    """Commits a DataFrame to ``main`` through a branch and a fast-forward (see module doc)."""

    spark: Any
    catalog_name: str
    identifier: str

    def _sql(self, statement: str) -> Any:
        return self.spark.sql(statement)

    @property
    def table_ref(self) -> str:
        return f"{self.catalog_name}.{self.identifier}"

    def commit(self, rows: Any, base_snapshot_id: int,
               properties: dict[str, str]) -> dict[str, float]:
        """Appends ``rows`` on top of ``base_snapshot_id`` and moves ``main`` there, or raises
        CommitConflict when ``main`` is no longer at ``base_snapshot_id``.

        Returns the seconds spent writing the data files (``write_seconds``: the Spark job) and
        in the catalog (``commit_seconds``: branch, fast-forward, drop)."""
        branch = f"floe_{uuid.uuid4().hex[:16]}"
        created = False
        started = time.monotonic()
        write_seconds = 0.0
        try:
            self._sql(f"ALTER TABLE {self.table_ref} CREATE BRANCH `{branch}` "
                      f"AS OF VERSION {base_snapshot_id}")
            created = True
            writer = rows.writeTo(f"{self.table_ref}.branch_{branch}")
            for key, value in properties.items():
                writer = writer.option(f"snapshot-property.{key}", value)
            write_started = time.monotonic()
            writer.append()
            write_seconds = time.monotonic() - write_started
            self._sql(f"CALL {self.catalog_name}.system.fast_forward("
                      f"table => '{self.table_ref}', branch => 'main', to => '{branch}')")
        except Exception as error:  # py4j or analysis errors carry Iceberg's message
            if _is_conflict(error):
                raise CommitConflict(str(error).splitlines()[0][:500]) from None
            raise
        finally:
            if created:
                self._drop(branch)
        return {"write_seconds": write_seconds,
                "commit_seconds": time.monotonic() - started - write_seconds}

    def _drop(self, branch: str) -> None:
        for _ in range(5):
            try:
                self._sql(f"ALTER TABLE {self.table_ref} DROP BRANCH IF EXISTS `{branch}`")
                return
            except Exception as error:
                if not _is_conflict(error):
                    break
        # Left behind, the branch only pins its snapshot until someone drops it.
        log.warning("could not drop branch %s of %s", branch, self.table_ref)


def commit_with_retries(attempt: Callable[[], None], *, attempts: int = 10,
                        backoff_seconds: float = 0.5) -> int:
    """Runs ``attempt`` until it finishes without a CommitConflict (committed or nothing to do).

    Returns the number of conflicts seen; raises CommitFailed after ``attempts`` conflicts.
    """
    for number in range(attempts):
        try:
            attempt()
            return number
        except CommitConflict as conflict:
            log.info("commit conflict (attempt %d of %d): %s", number + 1, attempts, conflict)
            time.sleep(backoff_seconds * (2 ** min(number, 5)))
    raise CommitFailed(f"batch not committed after {attempts} conflicting attempts; another "
                       "writer or maintenance keeps moving the table's main branch")
