"""Repair: a table's raw rows decoded again once their cause is fixed (a schema registered, a
breaking change approved, ``schemaEvolution`` relaxed), beside the streaming job.

The rows kept raw (``value_raw`` + ``value_error``, no ``value``) that the request selects (by
reason, writer schema id, partition, offset or time) are read back as the Kafka records they
were (key, value bytes, lineage) and decoded by the job's own decoder for the table as it is
now (:class:`~.table_writer.TableWriter`: a writer schema the table lacks evolves it, as in
the job).  The rows that now decode replace their raw rows in place, one MERGE per chunk of at
most ``rowsPerCommit`` rows of one Kafka partition: each ``(partition, offset)`` stays one row.
Each chunk's commit carries ``floe.operation`` (the operation's uid) and
``floe.operation.rows`` in its snapshot summary; the MERGE matches only rows still raw, in
the chunk's offset range, so a run killed midway and started again goes on with the rows
still raw, and the streaming job's appends (offsets above every raw row's) never conflict
with it.  Rows that still do not decode stay as they are, counted by their reason now.

With a dead-letter topic, the repair also re-drives it (:meth:`Repair._redrive`): its records of
this table that the table has no row for and that now decode are appended, with their own
lineage.  It leaves out those it must not land (:func:`why_left_out`; counted on the outcome
under ``deadLetters.leftOut``, each reason with what to do instead): a record at or above the
table's offsets, whose batch was not committed when its dead letter was sent (the driver
killed, a lost commit) and which the job lands again itself; and a dead letter another of the
topic's tables sent, or one that does not say which table sent it when the topic has several.
The table is not evolved for the dead letters left out.

The outcome is recorded on the table (:func:`~.ledger.record_operation`), which is how the
operator learns it.  A dry run decodes and counts, and changes no row and no schema: the rows
of a writer schema the table would first evolve for count as decodable, and the outcome names
those changes (``wouldEvolve``).

The modules: :mod:`.attempt`, one run (:class:`Repair`) and :func:`run`; :mod:`.selection`,
the rows it selects, their chunks and the records they were; :mod:`.redrive`, why a dead
letter is left out and those that may land.  The names are imported from here.
"""

from __future__ import annotations

from .attempt import ATTEMPTS, EXAMPLES, Repair, run
from .redrive import DEAD_LETTERS, LEFT_OUT, REASON, why_left_out
from .selection import as_records, chunks, selection

__all__ = [
    "ATTEMPTS",
    "DEAD_LETTERS",
    "EXAMPLES",
    "LEFT_OUT",
    "REASON",
    "Repair",
    "as_records",
    "chunks",
    "run",
    "selection",
    "why_left_out",
]
