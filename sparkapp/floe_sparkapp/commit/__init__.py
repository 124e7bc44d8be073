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

The modules: :mod:`.committer`, :class:`BranchCommitter` (a batch appended or an upsert's
changes committed, stale branches swept, snapshots expired); :mod:`.staging`, step 3 (the
files written, :class:`Staged`); :mod:`.publish`, step 4 (the compare-and-set, the summary, the
tag, and whether a commit the catalog did not confirm landed); :mod:`.metadata`, what the
table's metadata says of its branches; :mod:`.table`, the table the committer's parts share;
:mod:`.retries`, the errors and the batch tried again.  The names are imported from here.
"""

from __future__ import annotations

from .committer import BranchCommitter, expiry_due, sweep_branches
from .publish import LOOK_WAITS
from .retries import (
    CommitConflict,
    CommitFailed,
    CommitUnknown,
    commit_with_retries,
    is_conflict,
    unanswered,
)
from .staging import Staged

__all__ = [
    "LOOK_WAITS",
    "BranchCommitter",
    "CommitConflict",
    "CommitFailed",
    "CommitUnknown",
    "Staged",
    "commit_with_retries",
    "expiry_due",
    "is_conflict",
    "sweep_branches",
    "unanswered",
]
