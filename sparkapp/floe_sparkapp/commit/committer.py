""":class:`BranchCommitter`: a batch appended (its files staged, then published) or an
upsert's changes committed through a branch; the branches a killed batch left behind swept;
the snapshots expired as the table grows."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import metrics
from ..ledger import MAIN, branch_prefix, held_since
from ..steps import step
from .metadata import ref_times
from .publish import Publishing
from .retries import CommitConflict, CommitUnknown, is_conflict
from .staging import Staged, Staging

log = logging.getLogger("floe.commit")


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


@dataclass
class BranchCommitter(Publishing, Staging):
    """Commits a DataFrame to ``main`` with a compare-and-set (the package's doc): appended rows as
    staged data files, an upsert's changes through a branch."""

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

    def _head(self, branch: str) -> int | None:
        """Where ``branch`` is now (None: it is gone)."""
        found = self._iceberg_table().operations().refresh().ref(branch)
        return None if found is None else int(found.snapshotId())

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
        held = held_since(ref_times(metadata), int(time.time() * 1000))
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
