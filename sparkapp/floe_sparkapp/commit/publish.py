"""Step 4: the one metadata commit, a compare-and-set on ``main``, that adds a batch's
snapshot with its summary (or moves ``main`` to an upsert's branch) and moves the writer's tag
there; and the look at whether a commit the catalog did not confirm landed all the same."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from ..ledger import MAIN, OFFSETS_TAG_PREFIX, offsets_tag
from .metadata import (
    metadata_classes,
    moved_by_others,
    ref_at,
    snapshots_between,
    which_landed,
)
from .retries import CommitConflict, CommitUnknown, first_line, is_conflict
from .staging import Staged
from .table import CommitterTable

log = logging.getLogger("floe.commit")


LOOK_WAITS = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)  # seconds before each look at a commit's outcome


class Publishing(CommitterTable):
    """Commits staged files, or an upsert's branch, to ``main``
    (:class:`~.committer.BranchCommitter`'s step 4)."""

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
        them (:func:`moved_by_others`), so maintenance and operations beside a busy job do
        not make it write its batches again and again."""
        tried: set[int] = set()
        try:
            self._publish(staged, base_snapshot_id, properties, attempts, tried, tag, rebase)
        except (CommitConflict, CommitUnknown):
            raise
        except Exception as error:  # after a commit was sent, it may land
            if tried:
                raise CommitUnknown(
                    f"the batch's commit was sent, then: {first_line(error)}"
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
        TableMetadata, _ = metadata_classes(self.spark)  # noqa: N806
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
            if which_landed(base, tried, base_snapshot_id, ref=self.ref) is not None:
                return
            if rebase:
                moved_by_others(base, base_snapshot_id, self.ref)
            else:
                ref_at(base, base_snapshot_id, self.ref)
            tried.add(int(snapshot.snapshotId()))
            builder = TableMetadata.buildFrom(base).setBranchSnapshot(snapshot, self.ref)
            try:
                if tag:
                    builder = self._tag(base, builder, snapshot.snapshotId())
                self._commit_metadata(operations, base, builder.build())
                return
            except Exception as error:  # noqa: BLE001 - whatever it says, look (the package's doc)
                last_error = error
                if self._outcome(operations, tried, base_snapshot_id, error):
                    return
        raise (
            CommitUnknown(
                f"the batch's commit failed {attempts} times, the last with: "
                f"{first_line(last_error)}"
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
                landed = which_landed(operations.refresh(), tried, base_snapshot_id, ref=self.ref)
            except Exception as look:  # noqa: BLE001 - the catalog is down: look again
                unreadable = look
                continue
            unreadable = None
            if landed is not None:
                log.warning(
                    "%s: the catalog reported the commit failed (%s), but its snapshot "
                    "%d is on %s: it landed",
                    self.table_ref,
                    first_line(error),
                    landed,
                    self.ref,
                )
                return True
        if unreadable is not None:
            raise CommitUnknown(
                f"the commit of a batch to {self.table_ref} failed "
                f"({first_line(error)}) and the table could not be read to "
                f"see whether it landed ({first_line(unreadable)})"
            )
        log.info(
            "%s: commit failed and did not land (%s): trying again",
            self.table_ref,
            first_line(error),
        )
        return False

    def _tag(self, base: Any, builder: Any, head: int) -> Any:
        """``builder`` moving the writer's offsets tag to ``head`` and dropping the tags of the
        writers before it (a renamed resource's)."""
        _, SnapshotRef = metadata_classes(self.spark)  # noqa: N806
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
        TableMetadata, SnapshotRef = metadata_classes(self.spark)  # noqa: N806
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
        kept = snapshots_between(metadata, head, base_snapshot_id)
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
            if which_landed(base, {head}, base_snapshot_id, ref=self.ref) is not None:
                return
            target = ref_at(base, base_snapshot_id, self.ref)
            moved = (
                SnapshotRef.branchBuilder(head)
                if target is None
                else SnapshotRef.builderFrom(target, head)
            ).build()
            builder = TableMetadata.buildFrom(base).setRef(self.ref, moved).removeRef(branch)
            try:
                self._commit_metadata(operations, base, self._tag(base, builder, head).build())
                return
            except Exception as error:  # noqa: BLE001 - whatever it says, look (the package's doc)
                last_error = error
                if self._outcome(operations, {head}, base_snapshot_id, error):
                    return
        raise (
            CommitUnknown(
                f"moving {self.ref} to the batch failed {attempts} times, the last "
                f"with: {first_line(last_error)}"
            )
            if last_error is not None and not is_conflict(last_error)
            else CommitConflict(
                f"the table kept changing while moving {self.ref} to the batch "
                f"({attempts} attempts)"
            )
        )
