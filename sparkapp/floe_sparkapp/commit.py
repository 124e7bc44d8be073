"""The exactly-once commit protocol: how a batch becomes one commit (the ledger it writes and
reads, the snapshot summary, the writer's claim and tag, is :mod:`.ledger`'s).

Each floe commit is one snapshot on ``main`` whose summary carries ``floe.writer`` (the
resource's namespace/name), ``floe.offsets`` (next offset per partition, cumulative over all
partitions ever committed), ``floe.vtts`` (valid-through timestamp, ms), ``floe.generation``
and ``floe.batch-id``.  Readers walk ``main``'s ancestry to the newest snapshot of their writer,
so maintenance commits in between do not hide the offsets.

A batch is committed like this:

1. read the newest floe snapshot of this writer on ``main`` (snapshot S, offsets O);
2. drop the batch's rows below O (a replayed batch becomes a no-op);
3. write the rows' data files without committing them (:meth:`BranchCommitter.stage`: Spark
   writes them as Iceberg's file rewrites do, and hands the files back instead of committing);
4. in one metadata commit, a compare-and-set on ``main``: add a snapshot B appending those
   files on top of ``main``'s snapshot M, with the summary above, move ``main`` from M to B
   and the writer's tag (``floe_offsets_<digest of writer>``) to B.  When ``main`` is no
   longer at M (a second, zombie writer committed, maintenance did, or a user rolled it back),
   the files are deleted and the batch starts over from step 1, so rows another writer
   committed are never written twice and a rollback is never undone.

A catalog's answer to a commit is not the truth about it: a JDBC catalog that lost the reply
to its UPDATE retries it and reports a conflict for a commit it applied, a REST catalog's
timeout leaves the outcome unknown.  So whatever a commit raises, the committer looks: a
snapshot it tried that is in ``main``'s ancestry has landed.  It deletes staged files only
when it knows no snapshot can refer to them (``main`` moved away from M without any of its
snapshots, and a compare-and-set on M can no longer succeed); when the catalog cannot be read,
it keeps them (:class:`CommitUnknown`; at worst they are orphans for ``remove_orphan_files``)
and the batch starts over from the table's truth.

The files are written before the summary is made, so the batch is read from Kafka once: the
summary's valid-through timestamp and the writer schema ids found are counted while the files
are written (a schema id the batch was not decoded for sends it back to step 1, decoded for
it).  A killed batch leaves files no snapshot refers to, for ``remove_orphan_files``.

An upsert or cdc batch changes rows that are already in the table, which Spark commits
itself: its step 3 creates a branch at M, deletes its keys' rows and appends its rows there
(:meth:`.upsert.Upsert.apply`; the append is snapshot B), and its step 4
moves ``main`` and the tag to B and drops the branch, in one compare-and-set as above.

The tag keeps the newest floe snapshot from expiry.  After maintenance commits on top of it
(a compaction, then a manifest rewrite) and someone's ``expire_snapshots(retain_last => 1)``
removes the snapshots between, ``main``'s ancestry is cut before it reaches a floe snapshot:
the offsets are then read from the tag (:func:`last_commit`), so they survive a lost
checkpoint.  An ancestry that ends at the table's root without a floe snapshot is the truth
(``main`` was rolled back before the first commit): nothing has landed.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from . import metrics
from .jvm_udf import java
from .ledger import MAIN, OFFSETS, OFFSETS_TAG_PREFIX, branch_prefix, held_since, offsets_tag
from .steps import step

log = logging.getLogger("floe.commit")
T = TypeVar("T")


class CommitConflict(RuntimeError):
    """``main`` moved while a batch was being written; the batch is retried."""


class CommitFailed(RuntimeError):
    """A batch could not be committed within the attempt limit."""


class CommitUnknown(RuntimeError):
    """The catalog did not answer whether a commit landed, and looking could not tell: the
    batch's files stay (a snapshot may refer to them) and the batch starts over from what the
    table then says."""


_UNNAMED_BRANCH = re.compile(r"floe_[0-9a-f]{16}")  # before branches carried their writer


def sweep_branches(table: Any, writer: str) -> list[str]:
    """Drops the batch branches this writer left behind (a batch killed between creating its
    branch and dropping it), and unnamed ones of older floe versions.  Runs when the job
    starts, before its first batch: none of them is in flight then, but a zombie's, which may
    not commit anyway.  Returns what it dropped."""
    prefix = branch_prefix(writer)
    stale = sorted(
        name for name in table.refs() if name.startswith(prefix) or _UNNAMED_BRANCH.fullmatch(name)
    )
    if stale:
        with table.manage_snapshots() as refs:
            for name in stale:
                refs.remove_branch(name)
    return stale


def is_conflict(error: Exception) -> bool:
    text = str(error)
    return "CommitFailedException" in text or "ValidationException" in text


def _table_cache(spark: Any) -> Any:
    """Iceberg's ``SparkTableCache.get()``, through reflection: py4j cannot call a static
    method that shares its name with an instance method (``get(String)``)."""
    gateway = spark.sparkContext._gateway
    cls = (
        java("java.lang.Thread", spark._jvm)
        .currentThread()
        .getContextClassLoader()
        .loadClass("org.apache.iceberg.spark.SparkTableCache")
    )
    method = cls.getMethod("get", gateway.new_array(java("java.lang.Class", spark._jvm), 0))
    return method.invoke(None, gateway.new_array(java("java.lang.Object", spark._jvm), 0))


def _metadata_classes(spark: Any) -> tuple[Any, Any]:
    """Iceberg's ``TableMetadata`` and ``SnapshotRef`` (Java)."""
    return (
        java("org.apache.iceberg.TableMetadata", spark._jvm),
        java("org.apache.iceberg.SnapshotRef", spark._jvm),
    )


def _kafka_order_id(table: Any) -> int | None:
    """The id of the table's sort order when it is floe's own, ``kafka.partition,
    kafka.offset`` ascending (the order records arrive in); None for any other (a user's)."""
    order = table.sortOrder()
    schema = table.schema()
    wanted = [schema.findField(name).fieldId() for name in ("kafka.partition", "kafka.offset")]
    fields = list(order.fields())
    if [f.sourceId() for f in fields] != wanted or not all(
        f.transform().isIdentity() and f.direction().toString() == "ASC" for f in fields
    ):
        return None
    order_id: int = order.orderId()
    return order_id


def _ref_times(metadata: Any) -> list[tuple[str, int | None]]:
    """``(name, snapshot timestamp ms)`` of each ref in the table's (Java) metadata."""
    found = []
    for name in metadata.refs().keySet().toArray():
        snapshot = metadata.snapshot(metadata.ref(str(name)).snapshotId())
        found.append((str(name), None if snapshot is None else snapshot.timestampMillis()))
    return found


def _ref_at(metadata: Any, snapshot_id: int | None, ref: str = MAIN) -> Any:
    """Branch ``ref``'s ref in the table's (Java) metadata, which must still be at
    ``snapshot_id``; None for a branch not made yet, which is made where ``main`` is, so
    ``main`` must be there."""
    found = metadata.ref(ref)
    if found is None and ref != MAIN:
        _ref_at(metadata, snapshot_id)
        return None
    if found is None or found.snapshotId() != snapshot_id:
        raise CommitConflict(
            f"{ref} moved from snapshot {snapshot_id} to "
            f"{None if found is None else found.snapshotId()} during the batch"
        )
    return found


def _moved_by_others(
    metadata: Any, snapshot_id: int | None, ref: str = MAIN, limit: int = 10_000
) -> None:
    """Checks that branch ``ref`` is at ``snapshot_id``, or moved from there only by
    snapshots that are not floe commits (a compaction, a manifest rewrite, a repair's or a
    backfill's chunk: none adds a record at or above the offsets the batch was read from), so
    that an append can go on top of them; raises CommitConflict otherwise (a floe commit in
    between, or the branch rolled back past ``snapshot_id``)."""
    current = _head_id(metadata, ref)
    for _ in range(limit):
        if current == snapshot_id:
            return
        snapshot = None if current is None else metadata.snapshot(current)
        if snapshot is None or snapshot.summary().get(OFFSETS) is not None:
            break
        parent = snapshot.parentId()
        current = None if parent is None else int(parent)
    raise CommitConflict(
        f"{ref} moved from snapshot {snapshot_id} to {_head_id(metadata, ref)} "
        "during the batch, by a floe commit or a roll back"
    )


def _head_id(metadata: Any, ref: str = MAIN) -> int | None:
    """The snapshot id branch ``ref`` is at in the (Java) metadata; ``main``'s for a branch
    not made yet (:func:`~floe_sparkapp.ledger.head`)."""
    found = metadata.ref(ref)
    if found is None and ref != MAIN:
        found = metadata.ref(MAIN)
    return None if found is None else int(found.snapshotId())


def _landed(
    metadata: Any,
    snapshot_ids: set[int],
    base_snapshot_id: int | None,
    limit: int = 10_000,
    ref: str = MAIN,
) -> int | None:
    """Which of ``snapshot_ids`` is in branch ``ref``'s ancestry above ``base_snapshot_id``,
    in the table's (Java) metadata; None when none is."""
    current = _head_id(metadata, ref)
    for _ in range(limit):
        if current is None or current == base_snapshot_id:
            return None
        if current in snapshot_ids:
            return current
        snapshot = metadata.snapshot(current)
        parent = None if snapshot is None else snapshot.parentId()
        current = None if parent is None else int(parent)
    return None


def _between(
    metadata: Any, head: int, base_snapshot_id: int, limit: int = 10_000
) -> set[int] | None:
    """The snapshots from ``head`` down to ``base_snapshot_id`` (not included) in the table's
    (Java) metadata; None when ``head``'s ancestry does not reach it."""
    found: set[int] = set()
    current: int | None = head
    for _ in range(limit):
        if current is None:
            return None
        if current == base_snapshot_id:
            return found
        found.add(current)
        snapshot = metadata.snapshot(current)
        parent = None if snapshot is None else snapshot.parentId()
        current = None if parent is None else int(parent)
    return None


LOOK_WAITS = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)  # seconds before each look at a commit's outcome


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else repr(error))[:500]


@dataclass
class Staged:
    """Data files written by :meth:`BranchCommitter.stage` that no snapshot refers to yet."""

    table: Any  # the Iceberg table (Java) they were written for
    files: list[Any]  # its DataFiles

    def newest_by_partition(self) -> dict[int, int] | None:
        """Per Kafka partition, the newest record timestamp (ms) in the files, read off their
        column bounds (no data read); None when a file's bounds do not say: the table keeps
        no bounds of ``kafka.partition`` or ``kafka.timestamp`` (``write.metadata.metrics``),
        or the file holds records of several partitions."""
        types = java("org.apache.iceberg.types.Types")
        read = java("org.apache.iceberg.types.Conversions").fromByteBuffer
        schema = self.table.schema()
        partition_id = schema.findField("kafka.partition").fieldId()
        timestamp_id = schema.findField("kafka.timestamp").fieldId()
        newest: dict[int, int] = {}
        for data_file in self.files:
            lower, upper = data_file.lowerBounds(), data_file.upperBounds()
            if lower is None or upper is None:
                return None
            low, high, latest = (
                lower.get(partition_id),
                upper.get(partition_id),
                upper.get(timestamp_id),
            )
            if low is None or high is None or latest is None:
                return None
            partition = int(read(types.IntegerType.get(), low))
            if partition != int(read(types.IntegerType.get(), high)):
                return None
            millis = int(read(types.TimestampType.withZone(), latest)) // 1000
            newest[partition] = max(newest.get(partition, millis), millis)
        return newest


@dataclass
class BranchCommitter:
    """Commits a DataFrame to ``main`` with a compare-and-set (module doc): appended rows as
    staged data files, an upsert's changes through a branch."""

    spark: Any
    catalog_name: str
    identifier: str
    writer: str
    ref: str = MAIN  # the branch commits go to: main, or the resource's table.branch

    def _sql(self, statement: str) -> Any:
        return self.spark.sql(statement)

    @property
    def table_ref(self) -> str:
        return f"{self.catalog_name}.{self.identifier}"

    def commit(
        self, rows: Any, base_snapshot_id: int, properties: dict[str, str], upsert: Any = None
    ) -> dict[str, float]:
        """Appends ``rows`` on top of ``base_snapshot_id`` (or, with an
        :class:`~floe_sparkapp.upsert.Upsert`, changes the rows their keys name) and moves
        ``main`` there, or raises CommitConflict when ``main`` is no longer at
        ``base_snapshot_id``.

        Returns the seconds spent writing the data files (``write_seconds``: the Spark job) and
        in the catalog (``commit_seconds``: the branch, then the move of ``main``), and for an
        upsert how many records applied (``applied``)."""
        branch = f"{branch_prefix(self.writer)}{uuid.uuid4().hex[:16]}"
        created = merged = False
        made: list[int | None] = []  # the branch's head after each of an upsert's deletes
        applied = 0
        started = time.monotonic()
        write_seconds = 0.0
        try:
            self._sql(
                f"ALTER TABLE {self.table_ref} CREATE BRANCH `{branch}` "
                f"AS OF VERSION {base_snapshot_id}"
            )
            created = True
            target = f"{self.table_ref}.branch_{branch}"
            write_started = time.monotonic()
            if upsert is not None:
                applied = upsert.apply(
                    rows, target, properties, changed=lambda: made.append(self._head(branch))
                )
            else:
                writer = rows.writeTo(target)
                for key, value in properties.items():
                    writer = writer.option(f"snapshot-property.{key}", value)
                writer.append()
            write_seconds = time.monotonic() - write_started
            metrics.doing("committing")
            self._merge(branch, base_snapshot_id, made)
            merged = True
        except (CommitConflict, CommitUnknown):
            raise
        except Exception as error:  # py4j or analysis errors carry Iceberg's message
            if is_conflict(error):
                raise CommitConflict(str(error).splitlines()[0][:500]) from None
            raise
        finally:
            if created and not merged:
                self._drop(branch)
        outcome = {
            "write_seconds": write_seconds,
            "commit_seconds": time.monotonic() - started - write_seconds,
        }
        if upsert is not None:
            outcome["applied"] = applied
        return outcome

    def append(
        self,
        rows: Any,
        base_snapshot_id: int,
        summary: Callable[[Staged], dict[str, str]],
        tag: bool = True,
        tasks: int | None = None,
        rebase: bool = False,
        table: Any = None,
    ) -> dict[str, float]:
        """Appends ``rows`` on top of ``base_snapshot_id`` in one pass over them: their files are
        written (:meth:`stage`, by ``tasks``, into ``table``), then ``summary`` makes the
        snapshot's summary from them (it may raise to send the batch back: the files are
        deleted) and
        :meth:`publish` commits them (``tag``, ``rebase``: as there); raises CommitConflict
        when ``main`` is no longer at ``base_snapshot_id``.  Returns the seconds spent writing
        the files and committing them."""
        started = time.monotonic()
        with step("write"):
            staged = self.stage(rows, tasks, table)
        write_seconds = time.monotonic() - started
        try:
            properties = summary(staged)
        except Exception:
            self.discard(staged)  # nothing was sent to the catalog
            raise
        try:
            metrics.doing("committing")
            with step("commit"):
                self.publish(staged, base_snapshot_id, properties, tag=tag, rebase=rebase)
        except CommitUnknown:  # a snapshot may refer to the files (or come to): they stay
            raise
        except Exception:  # main moved on without the batch, or nothing reached the catalog
            self.discard(staged)
            raise
        return {
            "write_seconds": write_seconds,
            "commit_seconds": time.monotonic() - started - write_seconds,
        }

    def load(self) -> Any:
        """The table (its ref) through Iceberg's Java API, as the catalog has it now."""
        return self._iceberg_table()

    def spark_schema(self, table: Any) -> Any:
        """The Spark schema of ``table`` (Java), as ``spark.table(...).schema`` gives it."""
        import json

        from pyspark.sql.types import StructType

        converted = java("org.apache.iceberg.spark.SparkSchemaUtil", self.spark._jvm).convert(
            table.schema()
        )
        return StructType.fromJson(json.loads(converted.json()))

    def _iceberg_table(self) -> Any:
        jvm, session = self.spark._jvm, self.spark._jsparkSession
        # The catalogs are the active session's: a thread other than the one that made the
        # session (the job's start, run in a thread) has none until it is made active there.
        java("org.apache.spark.sql.SparkSession", jvm).setActiveSession(session)
        return java("org.apache.iceberg.spark.Spark3Util", jvm).loadIcebergTable(
            session, self.table_ref
        )

    def stage(self, rows: Any, tasks: int | None = None, table: Any = None) -> Staged:
        """Step 3 of an append: writes ``rows``' data files (the table's format, sort order and
        file size) and returns them, committing nothing.  Spark writes them the way Iceberg's
        ``rewrite_data_files`` does: to a file set the table cache names, whose files Iceberg's
        file rewrite coordinator holds for the caller instead of committing them.

        ``tasks``: the rows are read and written by that many tasks (each taking several of
        the Kafka source's partitions, which Spark reads one a task) instead of as they come.
        ``table``: the table (Java) as the rows were decoded for, else as the catalog has it."""
        jvm = self.spark._jvm
        if table is None:
            with step("load_spark_table"):
                table = self._iceberg_table()
        cache = _table_cache(self.spark)
        coordinator = java("org.apache.iceberg.spark.FileRewriteCoordinator", jvm).get()
        file_set = f"floe-{uuid.uuid4().hex}"
        if table.operations().current().formatVersion() >= 3:  # row lineage: new rows have none
            from pyspark.sql import functions as F

            rows = rows.select(
                "*",
                *[
                    F.lit(None).cast("long").alias(name)
                    for name in ("_row_id", "_last_updated_sequence_number")
                ],
            )
        order = _kafka_order_id(table)
        if tasks is not None:
            rows = rows.coalesce(tasks)
            if order is not None:  # (a task's Kafka partitions come in no particular order)
                rows = rows.sortWithinPartitions("kafka.partition", "kafka.offset")
        write = rows.write.format("iceberg").mode("append")
        if order is not None:
            # Each task reads one Kafka partition's offsets in order, and decoding keeps that
            # order: the files are in the table's order without Spark sorting them again.
            # (Without an ordering Iceberg writes one file per table partition a task meets.)
            write = write.option("use-table-distribution-and-ordering", "false").option(
                "output-sort-order-id", str(order)
            )
        cache.add(file_set, table)
        try:
            write.save(file_set)
            files = list(coordinator.fetchNewFiles(table, file_set).toArray())
        finally:
            coordinator.clearRewrite(table, file_set)
            cache.remove(file_set)
        return Staged(table, files)

    def discard(self, staged: Staged) -> None:
        """Deletes staged files that will not be committed (best effort: a file left is an
        orphan, which ``remove_orphan_files`` takes)."""
        io = staged.table.io()
        for data_file in staged.files:
            try:
                io.deleteFile(data_file.location())
            except Exception as error:  # noqa: BLE001
                log.warning(
                    "could not delete uncommitted file %s: %s",
                    data_file.location(),
                    str(error).splitlines()[0][:300],
                )

    def publish(
        self,
        staged: Staged,
        base_snapshot_id: int | None,
        properties: dict[str, str],
        attempts: int = 5,
        tag: bool = True,
        rebase: bool = False,
    ) -> None:
        """Step 4 of an append: one metadata commit that adds a snapshot appending the staged
        files on top of ``base_snapshot_id`` with ``properties`` in its summary, makes it
        ``main``'s head and moves the writer's tag there; a compare-and-set, as
        :meth:`_merge`.  Raises CommitConflict only when ``main`` moved on without any of the
        snapshots tried, CommitUnknown when the catalog kept failing to answer or anything
        failed once a commit had been sent; any other error only before that.  Without
        ``tag`` (a commit that is not the writer's: an operation's), the tag stays.  With
        ``rebase`` (the job's batch), snapshots that are not floe commits added on top of
        ``base_snapshot_id`` meanwhile do not send the batch back: the files go on top of
        them (:func:`_moved_by_others`), so maintenance and operations beside a busy job do
        not make it write its batches again and again."""
        tried: set[int] = set()
        try:
            self._publish(staged, base_snapshot_id, properties, attempts, tried, tag, rebase)
        except (CommitConflict, CommitUnknown):
            raise
        except Exception as error:  # after a commit was sent, it may land
            if tried:
                raise CommitUnknown(
                    f"the batch's commit was sent, then: {_first_line(error)}"
                ) from error
            raise

    def publish_summary(
        self, base_snapshot_id: int | None, properties: dict[str, str], tag: bool = True
    ) -> None:
        """A commit without files on top of ``base_snapshot_id``: only its summary, such as
        offsets that move on with no record to land (:meth:`publish`, as there)."""
        self.publish(Staged(self._iceberg_table(), []), base_snapshot_id, properties, tag=tag)

    def _publish(
        self,
        staged: Staged,
        base_snapshot_id: int | None,
        properties: dict[str, str],
        attempts: int,
        tried: set[int],
        tag: bool = True,
        rebase: bool = False,
    ) -> None:
        TableMetadata, _ = _metadata_classes(self.spark)  # noqa: N806
        table = staged.table
        operations = table.operations()
        last_error: Exception | None = None
        for _ in range(attempts):
            append = table.newAppend()  # merges small manifests as Spark's own appends do
            if self.ref != MAIN:  # on the branch's head (main's when it is not made yet)
                append = append.toBranch(self.ref)
            for data_file in staged.files:
                append.appendFile(data_file)
            for key, value in properties.items():
                append.set(key, value)
            snapshot = append.apply()  # the manifests, on a fresh read of the table
            base = operations.current()
            if _landed(base, tried, base_snapshot_id, ref=self.ref) is not None:
                return
            if rebase:
                _moved_by_others(base, base_snapshot_id, self.ref)
            else:
                _ref_at(base, base_snapshot_id, self.ref)
            tried.add(int(snapshot.snapshotId()))
            builder = TableMetadata.buildFrom(base).setBranchSnapshot(snapshot, self.ref)
            try:
                if tag:
                    builder = self._tag(base, builder, snapshot.snapshotId())
                self._commit_metadata(operations, base, builder.build())
                return
            except Exception as error:  # noqa: BLE001 - whatever it says, look (module doc)
                last_error = error
                if self._outcome(operations, tried, base_snapshot_id, error):
                    return
        raise (
            CommitUnknown(
                f"the batch's commit failed {attempts} times, the last with: "
                f"{_first_line(last_error)}"
            )
            if last_error is not None and not is_conflict(last_error)
            else CommitConflict(
                f"the table kept changing while committing the batch ({attempts} attempts)"
            )
        )

    def _commit_metadata(self, operations: Any, base: Any, metadata: Any) -> None:
        """The catalog's compare-and-set from ``base`` to ``metadata``."""
        operations.commit(base, metadata)

    def _outcome(
        self, operations: Any, tried: set[int], base_snapshot_id: int | None, error: Exception
    ) -> bool:
        """After a commit raised ``error``: whether one of the ``tried`` snapshots is in
        ``main``'s ancestry all the same (the catalog applied it and its reply was lost).
        Looks a few times, as a commit in flight may land a moment later; raises
        CommitUnknown when the catalog cannot be read."""
        unreadable: Exception | None = None
        waits = LOOK_WAITS[:1] if is_conflict(error) else LOOK_WAITS[:4]
        for wait in waits:
            time.sleep(wait)
            try:
                landed = _landed(operations.refresh(), tried, base_snapshot_id, ref=self.ref)
            except Exception as look:  # noqa: BLE001 - the catalog is down: look again
                unreadable = look
                continue
            unreadable = None
            if landed is not None:
                log.warning(
                    "%s: the catalog reported the commit failed (%s), but its snapshot "
                    "%d is on %s: it landed",
                    self.table_ref,
                    _first_line(error),
                    landed,
                    self.ref,
                )
                return True
        if unreadable is not None:
            raise CommitUnknown(
                f"the commit of a batch to {self.table_ref} failed "
                f"({_first_line(error)}) and the table could not be read to "
                f"see whether it landed ({_first_line(unreadable)})"
            )
        log.info(
            "%s: commit failed and did not land (%s): trying again",
            self.table_ref,
            _first_line(error),
        )
        return False

    def _tag(self, base: Any, builder: Any, head: int) -> Any:
        """``builder`` moving the writer's offsets tag to ``head`` and dropping the tags of the
        writers before it (a renamed resource's)."""
        _, SnapshotRef = _metadata_classes(self.spark)  # noqa: N806
        tag = offsets_tag(self.writer)
        old_tag = base.ref(tag)
        new_tag = (
            SnapshotRef.tagBuilder(head)
            if old_tag is None
            else SnapshotRef.builderFrom(old_tag, head)
        ).build()
        builder = builder.setRef(tag, new_tag)
        for name in base.refs().keySet().toArray():
            if str(name).startswith(OFFSETS_TAG_PREFIX) and str(name) != tag:
                builder = builder.removeRef(str(name))
        return builder

    def _head(self, branch: str) -> int | None:
        """Where ``branch`` is now (None: it is gone)."""
        found = self._iceberg_table().operations().refresh().ref(branch)
        return None if found is None else int(found.snapshotId())

    def _merge(
        self, branch: str, base_snapshot_id: int, made: Sequence[int | None] = (), attempts: int = 5
    ) -> None:
        """Step 4: one metadata commit that moves ``main`` from ``base_snapshot_id`` to the
        branch's head, moves the writer's tag there and drops the branch.

        The branch must still hold what the batch made on it (``made``: its head after each
        of an upsert's deletes): a driver that started meanwhile drops the branches it finds
        (:func:`sweep_branches`), and a write to a branch that is gone makes it again at
        ``main``'s head, without the deletes before it, which would leave each key's old row
        beside its new one.  The batch then starts over (CommitConflict).

        A compare-and-set through the table's operations: ``main`` must still be at the batch's
        base, checked on the metadata the commit replaces.  (Iceberg's fast-forward only asks
        that ``main`` be an ancestor of the branch, and re-applies itself on fresh metadata
        when it retries: it would undo a user's ``rollback_to_snapshot`` made meanwhile.)"""
        TableMetadata, SnapshotRef = _metadata_classes(self.spark)  # noqa: N806
        operations = self._iceberg_table().operations()
        metadata = operations.refresh()
        found = metadata.ref(branch)
        if found is None:
            raise CommitConflict(
                f"the batch's branch {branch} was dropped before it was "
                "committed (a driver that started meanwhile drops those it "
                "finds): the batch starts over"
            )
        head = int(found.snapshotId())
        kept = _between(metadata, head, base_snapshot_id)
        lost = [i for i in made if i != base_snapshot_id and (kept is None or i not in kept)]
        if lost:
            raise CommitConflict(
                f"the batch's branch {branch} no longer holds its deletes "
                f"(snapshot {lost[0]}): it was dropped and made again while "
                "the batch wrote; the batch starts over"
            )
        last_error: Exception | None = None
        for _ in range(attempts):
            base = operations.refresh()
            if _landed(base, {head}, base_snapshot_id, ref=self.ref) is not None:
                return
            target = _ref_at(base, base_snapshot_id, self.ref)
            moved = (
                SnapshotRef.branchBuilder(head)
                if target is None
                else SnapshotRef.builderFrom(target, head)
            ).build()
            builder = TableMetadata.buildFrom(base).setRef(self.ref, moved).removeRef(branch)
            try:
                self._commit_metadata(operations, base, self._tag(base, builder, head).build())
                return
            except Exception as error:  # noqa: BLE001 - whatever it says, look (module doc)
                last_error = error
                if self._outcome(operations, {head}, base_snapshot_id, error):
                    return
        raise (
            CommitUnknown(
                f"moving {self.ref} to the batch failed {attempts} times, the last "
                f"with: {_first_line(last_error)}"
            )
            if last_error is not None and not is_conflict(last_error)
            else CommitConflict(
                f"the table kept changing while moving {self.ref} to the batch "
                f"({attempts} attempts)"
            )
        )

    def expire_snapshots(self, older_than_ms: int, retain_last: int) -> int:
        """Expires the snapshots older than ``older_than_ms`` but the newest ``retain_last`` of
        ``main``, and the files only they held, once the table has more than a tenth of
        ``retain_last`` (at least one) such snapshots beyond ``retain_last``: run after each
        commit, it keeps the table's metadata, which every commit rewrites, the same size.

        Refs keep their snapshots: the writer's offsets tag keeps the newest floe snapshot.
        A maintenance action's hold (:data:`HOLD_PREFIX`) keeps its snapshot and every one
        after it.  Returns how many snapshots went (0 when none was due)."""
        table = self._iceberg_table()
        metadata = table.operations().current()
        held = held_since(_ref_times(metadata), int(time.time() * 1000))
        if held is not None:
            older_than_ms = min(older_than_ms, held)
        if self.ref != MAIN and metadata.currentSnapshot() is not None:
            # what the branch gained since main's head stays: publishing checks that main is
            # an ancestor of the branch, through the snapshots between
            older_than_ms = min(older_than_ms, metadata.currentSnapshot().timestampMillis())
        snapshots = metadata.snapshots()
        count: int = snapshots.size()
        # The oldest snapshot comes first: when it is not due, none is.
        if not expiry_due(
            count, snapshots.get(0).timestampMillis() if count else None, older_than_ms, retain_last
        ):
            return 0
        table.expireSnapshots().expireOlderThan(older_than_ms).retainLast(retain_last).commit()
        left: int = table.operations().current().snapshots().size()
        return count - left

    def _drop(self, branch: str) -> None:
        for _ in range(5):
            try:
                self._sql(f"ALTER TABLE {self.table_ref} DROP BRANCH IF EXISTS `{branch}`")
                return
            except Exception as error:  # noqa: BLE001 - a conflict is tried again, else logged
                if not is_conflict(error):
                    break
        # Left behind, the branch only pins its snapshot until someone drops it.
        log.warning("could not drop branch %s of %s", branch, self.table_ref)


# What a neighbour that did not answer looks like, in Python's clients and in the JVM's (the
# catalog's, the object store's, Kafka's): the batch is tried again while it lasts.
_UNANSWERED = re.compile(
    r"Connection refused|Connection reset|connection closed|server closed the connection|"
    r"Broken pipe|timed out|SocketTimeout|TimeoutException|NoHttpResponse|RemoteDisconnected|"
    r"Unable to execute HTTP request|SdkClientException|UncheckedSQLException|"
    r"ServiceUnavailable|ServiceFailure|OperationalError|ConnectError|ConnectionError|"
    r"NewConnectionError|EOFException|SocketException|NoRouteToHost"
)


def expiry_due(count: int, oldest_ms: int | None, older_than_ms: int, retain_last: int) -> bool:
    """Whether a table of ``count`` snapshots, the oldest committed at ``oldest_ms``, has
    snapshots to expire (:meth:`BranchCommitter.expire_snapshots`): more than a tenth of
    ``retain_last`` (at least one) beyond the newest ``retain_last``, and the oldest older
    than ``older_than_ms``."""
    return (
        count > retain_last + max(1, retain_last // 10)
        and oldest_ms is not None
        and oldest_ms < older_than_ms
    )


def unanswered(error: BaseException) -> bool:
    """Whether ``error`` is a neighbour (catalog, object store, registry, Kafka) that did not
    answer, rather than a refusal that trying again cannot change."""
    return isinstance(error, (ConnectionError, TimeoutError)) or bool(
        _UNANSWERED.search(f"{type(error).__name__}: {error}")
    )


def commit_with_retries(
    attempt: Callable[[], T],
    *,
    attempts: int = 10,
    backoff_seconds: float = 0.5,
    outage_seconds: float = 120.0,
) -> tuple[T, int]:
    """Runs ``attempt`` until it finishes without a CommitConflict (committed or nothing to do).

    A neighbour that does not answer (:func:`unanswered`) is waited for, the batch tried again
    from the start (the table's offsets), for up to ``outage_seconds``: a short outage costs a
    pause, not a restart of the job.  Returns what the attempt that finished returned and the
    number of conflicts seen; raises CommitFailed after ``attempts`` conflicts, and the
    neighbour's error when it stays away.
    """
    conflicts = 0
    outage_started: float | None = None
    while True:
        try:
            return attempt(), conflicts
        except (CommitConflict, CommitUnknown) as conflict:
            conflicts += 1
            log.info(
                "commit %s (attempt %d of %d): %s",
                "conflict" if isinstance(conflict, CommitConflict) else "outcome unknown",
                conflicts,
                attempts,
                conflict,
            )
            if conflicts >= attempts:
                raise CommitFailed(
                    f"batch not committed after {attempts} conflicting attempts; another "
                    "writer or maintenance keeps moving the table's main branch"
                ) from None
            time.sleep(backoff_seconds * (2 ** min(conflicts - 1, 5)))
        except Exception as error:  # only an unanswered call is tried again
            now = time.monotonic()
            outage_started = outage_started or now
            if not unanswered(error) or now - outage_started > outage_seconds:
                raise
            log.warning(
                "a neighbour did not answer (%s): the batch is tried again", _first_line(error)
            )
            metrics.doing("retrying")
            time.sleep(min(2.0 + (now - outage_started) / 4, 10.0))
