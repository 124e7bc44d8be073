"""Spark's checkpoint, read only to check it against the table.

The table, not the checkpoint, decides where the job is.  Spark's offset log
(``<checkpoint>/offsets/<batch id>``) holds each micro-batch's end offsets; a batch starts
where the one before it ended (batch 0 at the Kafka source's initial offsets,
``<checkpoint>/sources/0/0``).  A batch that starts above the table's committed offsets would
skip the records in between: that happens when the checkpoint outlived its table (a resource
re-created under the same name, a new ``table.identifier``, a purged table) or when a user
rolled ``main`` back.
"""

from __future__ import annotations

import json
from typing import Any

from .jvm_udf import java

Offsets = dict[int, int]


class CheckpointAhead(RuntimeError):
    """A batch would start above the table's committed offsets: records would be skipped."""


def _fs(spark: Any, location: str) -> tuple[Any, Any]:
    path = java("org.apache.hadoop.fs.Path", spark._jvm)(location)
    return path.getFileSystem(spark._jsc.hadoopConfiguration()), path


def _read(spark: Any, location: str) -> str | None:
    fs, path = _fs(spark, location)
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        return str(java("org.apache.commons.io.IOUtils", spark._jvm).toString(stream, "UTF-8"))
    finally:
        stream.close()


def _batch_ids(spark: Any, location: str) -> list[int]:
    fs, path = _fs(spark, location)
    if not fs.exists(path):
        return []
    return sorted(
        int(status.getPath().getName())
        for status in fs.listStatus(path)
        if status.getPath().getName().isdigit()
    )


def parse_offset_log(text: str, topic: str) -> Offsets | None:
    """The Kafka source's offsets for ``topic`` in one offset log entry: a version line, the
    batch's metadata, then one line per source (``-`` for none)."""
    lines = text.splitlines()
    if len(lines) < 3 or lines[2].strip() == "-":
        return None
    return _topic_offsets(lines[2], topic)


def parse_initial_offsets(text: str, topic: str) -> Offsets | None:
    """The Kafka source's initial offsets (``sources/0/0``: a NUL byte, ``v1`` and the JSON)."""
    body = text.lstrip("\x00")
    if body.startswith("v"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
    return _topic_offsets(body, topic) if body.strip() else None


def _topic_offsets(text: str, topic: str) -> Offsets | None:
    offsets = json.loads(text).get(topic)
    if offsets is None:
        return None
    # Spark writes -2 (earliest) and -1 (latest) for offsets it resolves later.
    return {int(p): int(o) for p, o in offsets.items() if int(o) >= 0}


def end_offsets(spark: Any, location: str, topic: str, batch_id: int) -> Offsets | None:
    """Where batch ``batch_id`` ends, from the offset log."""
    text = _read(spark, f"{location.rstrip('/')}/offsets/{batch_id}")
    return None if text is None else parse_offset_log(text, topic)


def start_offsets(spark: Any, location: str, topic: str, batch_id: int) -> Offsets | None:
    """Where batch ``batch_id`` starts: the end of the batch before it, or the source's initial
    offsets for batch 0.  None when the checkpoint no longer has them."""
    if batch_id > 0:
        return end_offsets(spark, location, topic, batch_id - 1)
    text = _read(spark, f"{location.rstrip('/')}/sources/0/0")
    return None if text is None else parse_initial_offsets(text, topic)


def resume_offsets(spark: Any, location: str, topic: str) -> Offsets | None:
    """Where the query goes on from when it starts on this checkpoint: the end of its last
    completed batch; the start of a batch that was planned but not completed, which Spark runs
    again (for batch 0, the initial offsets the source recorded).  None when there is no
    checkpoint to go on from: the query then starts at its ``startingOffsets``."""
    root = location.rstrip("/")
    planned = _batch_ids(spark, f"{root}/offsets")
    if not planned:
        return start_offsets(spark, location, topic, 0)
    completed = set(_batch_ids(spark, f"{root}/commits"))
    last = planned[-1]
    if last in completed:
        return end_offsets(spark, location, topic, last)
    return start_offsets(spark, location, topic, last)


def ahead_of(start: Offsets, table: Offsets, floor: Offsets | None = None) -> list[str]:
    """The partitions where ``start`` is above the table's offsets, described.  A partition the
    table has no offsets for is compared with ``floor`` (Kafka's earliest offsets, when the
    job starts from the earliest), if given."""
    ahead = []
    for partition, offset in sorted(start.items()):
        expected = table.get(partition)
        source = "the table's committed offset"
        if expected is None and floor is not None:
            expected, source = floor.get(partition), "Kafka's earliest offset"
        if expected is not None and offset > expected:
            ahead.append(
                f"partition {partition}: the checkpoint is at {offset}, {source} is {expected}"
            )
    return ahead


def clear_unfinished_writes(spark: Any, location: str) -> list[str]:
    """Removes what a killed process left of its first batch's log writes: a log file is
    written under a hidden temporary name and renamed into place, and a process killed between
    the two leaves the temporary file behind.  Spark then refuses a checkpoint with no batch in
    its offset log but a file in it (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``), so every
    start would fail the same way.  Only while the offset log holds no batch: a temporary file
    never renamed is no batch of it.  Returns the files removed."""
    root = location.rstrip("/")
    if _batch_ids(spark, f"{root}/offsets"):
        return []
    removed = []
    for log_name in ("offsets", "commits"):
        fs, path = _fs(spark, f"{root}/{log_name}")
        if not fs.exists(path):
            continue
        for status in fs.listStatus(path):
            name = status.getPath().getName()
            if name.startswith(".") and name.endswith((".tmp", ".tmp.crc")):
                fs.delete(status.getPath(), False)
                removed.append(f"{log_name}/{name}")
    return removed


def drop_planned(spark: Any, location: str) -> int | None:
    """Removes the offset log's last batch when it was planned but not completed, so that Spark
    plans it anew (with the source's limits of the query's new start) instead of running the
    planned one again; only for a batch that wrote nothing.  Returns its id, if removed."""
    root = location.rstrip("/")
    planned = _batch_ids(spark, f"{root}/offsets")
    if not planned or planned[-1] in set(_batch_ids(spark, f"{root}/commits")):
        return None
    for name in (str(planned[-1]), f".{planned[-1]}.crc"):
        fs, path = _fs(spark, f"{root}/offsets/{name}")
        fs.delete(path, False)
    return planned[-1]


def remove(spark: Any, location: str) -> None:
    fs, path = _fs(spark, location)
    if fs.exists(path) and not fs.delete(path, True):
        raise RuntimeError(f"could not remove the checkpoint at {location}")
