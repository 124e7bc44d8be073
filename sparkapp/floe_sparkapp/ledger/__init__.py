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

The modules: :mod:`.summary`, what a floe snapshot's summary carries; :mod:`.refs`, ``main``
and a branch's head and ancestry, the writer's branches and tag, the holds; :mod:`.claim`,
the table's one writer; :mod:`.commits`, where a topic stands (:class:`Committed`);
:mod:`.operations`, what an operation recorded, and a roll back; :mod:`.publication`, a
branch published.  The names are imported from here.
"""

from __future__ import annotations

from .claim import OWNER, TableInUse, claim_table, hand_over_table
from .commits import Committed, commits_since, last_commit, rows_commit, tagged_commit
from .operations import (
    OPERATION,
    OPERATION_PREFIX,
    OPERATION_ROWS,
    operation_commits,
    operation_record,
    operation_snapshots,
    record_operation,
    retried,
    roll_back,
    summed,
)
from .publication import Publication, publish
from .refs import (
    HOLD_MAX_AGE_MS,
    HOLD_PREFIX,
    MAIN,
    OFFSETS_TAG_PREFIX,
    ancestors,
    branch_prefix,
    head,
    held_since,
    offsets_tag,
)
from .summary import (
    BATCH_ID,
    BATCH_PART,
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
    merge_offsets,
    summary_properties,
    torn,
)

__all__ = [
    "BATCH_ID",
    "BATCH_PART",
    "BATCH_START",
    "DEAD_LETTER_ERROR",
    "GENERATION",
    "HOLD_MAX_AGE_MS",
    "HOLD_PREFIX",
    "MAIN",
    "OFFSETS",
    "OFFSETS_TAG_PREFIX",
    "OPERATION",
    "OPERATION_PREFIX",
    "OPERATION_ROWS",
    "OWNER",
    "ROUTING",
    "TABLES",
    "TOPIC",
    "TOPIC_ID",
    "VTTS",
    "WRITER",
    "Committed",
    "Publication",
    "TableInUse",
    "ancestors",
    "branch_prefix",
    "claim_table",
    "commits_since",
    "hand_over_table",
    "head",
    "held_since",
    "last_commit",
    "merge_offsets",
    "offsets_tag",
    "operation_commits",
    "operation_record",
    "operation_snapshots",
    "publish",
    "record_operation",
    "retried",
    "roll_back",
    "rows_commit",
    "summary_properties",
    "summed",
    "tagged_commit",
    "torn",
]
