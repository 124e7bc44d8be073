"""Why a replay is refused: :class:`ReplayRefused`, whose message says what to change, among
it the target's retention (rows that keep their timestamps are refused where the topic's
time-based retention would delete them soon after they are produced).
"""

from __future__ import annotations

import datetime as dt

ORIGINAL_TIMESTAMP = "floe.original-timestamp"  # timestamps now: the row's, epoch ms as text


class ReplayRefused(ValueError):
    """The target cannot take the replay: the message says what to change."""


def retention_horizon(configs: dict[str, str], now_ms: int) -> int | None:
    """The Kafka timestamp (epoch ms) below which a topic with ``configs`` deletes a record
    produced with it now, or None where it keeps it: the topic is only compacted, keeps
    records for ever (``retention.ms`` -1), or stamps them itself (LogAppendTime)."""
    retention = int(configs.get("retention.ms") or -1)
    if (
        "delete" not in configs.get("cleanup.policy", "delete")
        or retention < 0
        or configs.get("message.timestamp.type", "CreateTime") != "CreateTime"
    ):
        return None
    return now_ms - retention


def retention_refusal(
    topic: str, configs: dict[str, str], older: int, oldest_ms: int
) -> str | None:
    """Why rows cannot be replayed with their timestamps to ``topic``, whose retention deletes
    ``older`` of them (the oldest stamped ``oldest_ms``), or None where it deletes none."""
    if not older:
        return None
    retention = int(configs["retention.ms"])
    oldest = dt.datetime.fromtimestamp(oldest_ms / 1000, dt.timezone.utc)
    return (
        f"topic {topic} deletes records older than {_span(retention)} (retention.ms "
        f"{retention}), and {older} of the rows to replay are older (the oldest from "
        f"{oldest:%Y-%m-%dT%H:%M:%SZ}): with their timestamps they would be deleted soon "
        "after they are produced. Set replay.timestamps: now (each record stamped when "
        f"produced, its original timestamp kept in header {ORIGINAL_TIMESTAMP}), or raise "
        "the topic's retention.ms (-1 keeps records for ever)"
    )


def _span(ms: int) -> str:
    for unit, size in (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size} {unit}" + "s" * (ms != size)
    return f"{ms} ms"
