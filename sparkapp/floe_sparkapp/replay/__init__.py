"""Replay: a table's rows produced back to Kafka, each once (rebuilding a lost topic, seeding
another topic, re-feeding a consumer).

The rows are those of one snapshot (the request's, else the table's when the first attempt
starts, held by the tag ``floe_replay_<uid>`` until the replay is recorded, so an attempt
after a crash replays the same rows and expiry keeps them).  Each Kafka partition's rows go,
in offset order, to the same partition of the target topic, with their key, headers and
timestamp (or, with ``timestamps: now``, stamped when produced, the row's timestamp in header
``floe.original-timestamp``); a value is encoded again in the registry's wire format with the
row's writer schema id (Avro with the writer schema itself, JSON as JSON), and a row kept raw
(or with a part kept raw) is produced as the bytes it came as.

Exactly once: a transactional producer (``transactional.id`` ``floe-replay-<uid>``: a new
attempt fences a zombie of the last one) commits, with each transaction of
``recordsPerTransaction`` records, the partition's progress as the consumer group
``floe-replay-<uid>``'s offset on the target partition (the next source offset to replay).  An
attempt goes on from those offsets; a transaction that did not commit is aborted and its
records never reach a ``read_committed`` consumer (floe's jobs read that way).

Rows that keep their timestamps are refused where the target's time-based retention would
delete them soon after they are produced (while the replay succeeds).

The modules: :mod:`.attempt`, one attempt from the snapshot held to the outcome recorded
(:func:`run`); :mod:`.values`, a value encoded again; :mod:`.refusals`, why a replay is
refused, the target's retention among it.  The names are imported from here.
"""

from __future__ import annotations

from .attempt import HOLD_MAX_AGE_MS, HOLD_PREFIX, PRODUCER_SETTINGS, Replay, run
from .refusals import ORIGINAL_TIMESTAMP, ReplayRefused, retention_horizon, retention_refusal
from .values import Encoder, _datum, _named

__all__ = [
    "HOLD_MAX_AGE_MS",
    "HOLD_PREFIX",
    "ORIGINAL_TIMESTAMP",
    "PRODUCER_SETTINGS",
    "Encoder",
    "Replay",
    "ReplayRefused",
    "_datum",
    "_named",
    "retention_horizon",
    "retention_refusal",
    "run",
]
