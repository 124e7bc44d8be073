"""A batch's decoded rows written to one table, with what is counted as they are written.

The rows, stamped with their landing time (:func:`ingest_micros`), go to the table in the
commit :class:`~.commit.BranchCommitter` makes, with the summary the commit path gives
(:func:`write`); they are counted in the same pass (the rows, those kept raw by reason), and an
append's pass counts what its summary needs too (:class:`Pass`).  The undecodable records go
to the dead-letter topic first, once a batch however often its commit is tried
(:class:`DeadLetters`).  A small batch spread over many Kafka partitions is written by one task
a core (:func:`write_tasks`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from . import dead_letters, metrics
from .commit import BranchCommitter, Staged
from .config import JobConfig
from .contract import RAW_REASONS
from .decode import frame, framed_ids, raw_reason
from .jvm_udf import newest_by_partition, parse_newest
from .ledger import DEAD_LETTER_ERROR, Committed
from .steps import step
from .upsert import Upsert

# Below this many records a Kafka partition on average, a batch spread over more partitions
# than the executors have cores is written by one task a core (:func:`write_tasks`).
SMALL_BATCH_RECORDS = 20_000


def record_bytes() -> Any:
    """The aggregate of a batch's bytes: its records' keys and values, as Kafka holds them."""
    return F.sum(F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0)))


def write_tasks(
    partitions: list[int], batch_next: dict[int, int], above: dict[int, int], cores: int
) -> int | None:
    """How many tasks write an append of the records below ``batch_next`` and at or above
    ``above`` in ``partitions``: None (one a Kafka partition, as Spark's Kafka source reads
    them) unless more partitions than the executors' ``cores`` have records and they have
    fewer than :data:`SMALL_BATCH_RECORDS` each on average; then ``cores``.  A task has a fixed
    cost before its first record (its Kafka fetch, its Parquet writer opened and closed), paid
    then once a core instead of once a partition, and the commit adds fewer, larger files."""
    if len(partitions) <= cores:
        return None
    records = sum(batch_next[p] - above.get(p, 0) for p in partitions)
    return cores if records < SMALL_BATCH_RECORDS * len(partitions) else None


def _newest_by_partition(batch: DataFrame, partitions: list[int]) -> dict[int, int]:
    """Per Kafka partition among ``partitions``, the newest record timestamp (ms) in the
    batch (a pass over it)."""
    return {
        int(r[0]): int(r[1])
        for r in batch.filter(F.col("partition").isin(*partitions))
        .groupBy("partition")
        .agg(F.max(F.unix_millis(F.col("timestamp"))))
        .collect()
    }


def _raw_by_reason(bad: DataFrame) -> dict[str, int]:
    """Rows kept raw, counted by reason (:func:`.decode.raw_reason`)."""
    return {
        r["reason"]: int(r["count"])
        for r in bad.groupBy(raw_reason(F.col("value_error")).alias("reason")).count().collect()
    }


clock = time.time_ns  # the driver's clock (nanoseconds since the epoch)


def ingest_micros(committed: Committed) -> int:
    """The landing time of a batch going on top of ``committed`` (the lineage's
    ingest_timestamp, in microseconds): now, but never at or before that commit's own time,
    so each partition's landing times only grow, even when the job moves to a node whose
    clock is behind."""
    now = clock() // 1000
    if committed.timestamp_ms is None:
        return now
    return max(now, (committed.timestamp_ms + 1) * 1000)


def undecodable(rows: DataFrame) -> Any:
    """Rows whose value could not be decoded (not those decoded but for recursive fields)."""
    failed = F.col("value_error").isNotNull()
    return failed & F.col("value").isNull() if "value" in rows.columns else failed


@dataclass
class DeadLetters:
    """A batch's undecodable records are sent to the dead-letter topic once, however often
    its commit is tried: what the first try did."""

    sent: bool = False
    count: int = 0
    error: str | None = None  # why the topic refused them (recorded on the commit)
    failed: int = 0  # how many it refused


@dataclass
class Pass:
    """What an append counts over its batch as it writes it, read from the JVM once: rows,
    bytes, and of each framed column (``value_ids``, ``key_ids``: its framing column and the
    ids it was decoded for) the writer schema ids found.  Each id decoded for is a flag; any
    other is caught by the least and greatest of the others, and when more may lie between
    those two (``between``) the batch is read again for them.  Each is an aggregate Spark
    updates per row without objects (a set of ids or a maximum per Kafka partition costs about
    a third of the batch's work); the newest timestamp per partition is read off the written
    files' bounds instead (:meth:`.commit.Staged.newest_by_partition`), except with ``newest``:
    a batch whose files may each hold several partitions or keep no bounds
    (:func:`write_tasks`, :func:`.layout.files_bound_one_partition`) counts it as it is read:
    reading the batch again would count its records twice in the query's progress."""

    observation: Any
    expected: dict[str, tuple[str, list[int]]]
    newest: bool = False
    found: dict[str, Any] | None = None
    between: list[str] = field(default_factory=list)

    def metrics(self) -> list[Any]:
        found = [F.count(F.lit(1)).alias("rows"), record_bytes().alias("bytes")]
        for name, (column, planned) in self.expected.items():
            ids = F.col(column)
            found += [F.bool_or(ids == F.lit(i)).alias(f"{name}_{i}") for i in planned]
            other = F.when(~ids.isin(*planned), ids) if planned else ids
            found += [F.min(other).alias(f"{name}_low"), F.max(other).alias(f"{name}_high")]
        if self.newest:
            found.append(
                newest_by_partition(F.col("partition"), F.unix_millis(F.col("timestamp"))).alias(
                    "newest"
                )
            )
        return found

    def read(self) -> dict[str, Any]:
        if self.found is None:
            seen = self.observation.get
            self.found = {
                "input_rows": int(seen["rows"]),
                "bytes": int(seen["bytes"] or 0),
                "value_ids": (),
                "key_ids": (),
            }
            for name, (_, planned) in self.expected.items():
                low, high = seen.get(f"{name}_low"), seen.get(f"{name}_high")
                others = {int(i) for i in (low, high) if i is not None}
                self.found[name] = tuple(
                    sorted({i for i in planned if seen.get(f"{name}_{i}")} | others)
                )
                if len(others) == 2 and int(high) - int(low) > 1:
                    self.between.append(name)
            if self.newest:
                self.found["newest"] = parse_newest(seen["newest"])
        return self.found

    def ids(self, batch: DataFrame) -> dict[str, Any]:
        """What the pass counted (:meth:`read`), with the writer schema ids of a column where
        more may lie between the least and greatest found read off ``batch``."""
        seen = self.read()
        for name in self.between:  # (a pass over the batch)
            seen[name] = tuple(framed_ids(batch, "value" if name == "value_ids" else "key"))
        return seen

    def vtts(self, batch: DataFrame, partitions: list[int], staged: Staged | None) -> int | None:
        """The batch's valid-through timestamp, kept with the counts: the least of its
        ``partitions``' newest timestamps, counted (``newest``) or read off the files written
        (``staged``), else off ``batch``."""
        seen = self.read()
        latest: dict[int, int] | None
        if "newest" in seen:
            latest = {p: t for p, t in seen["newest"].items() if p in partitions}
        else:
            latest = staged.newest_by_partition() if staged is not None else None
        if latest is None:  # (a file without bounds, which the table said it keeps)
            latest = _newest_by_partition(batch, partitions)
        seen["vtts"] = found_vtts = min(latest.values()) if latest else None
        return found_vtts


def single_pass_counts(
    rows: DataFrame,
    value_ids: list[int],
    key_ids: list[int],
    value_framed: bool,
    key_framed: bool,
    newest: bool,
) -> tuple[DataFrame, Pass]:
    """An append's ``rows`` observed as they are written (:class:`Pass`): framed, when their
    values or keys are, for the writer schema ids found (``value_ids`` and ``key_ids``: those
    they are decoded for), and with ``newest`` for each partition's newest timestamp."""
    if value_framed and "_schema_id" not in rows.columns:
        rows = frame(rows)
    if key_framed and "_key_schema_id" not in rows.columns:
        rows = frame(rows, "key")
    expected = {
        name: (column, ids)
        for name, column, ids, framed in (
            ("value_ids", "_schema_id", value_ids, value_framed),
            ("key_ids", "_key_schema_id", key_ids, key_framed),
        )
        if framed
    }
    counted = Pass(Observation(f"floe_batch_{uuid.uuid4().hex}"), expected, newest=newest)
    return rows.observe(counted.observation, *counted.metrics()), counted


def write(
    rows: DataFrame,
    base: int,
    summary: Callable[[Staged | None], dict[str, str]],
    dead: DeadLetters,
    since_ms: int,
    tasks: int | None = None,
    *,
    config: JobConfig,
    committer: BranchCommitter,
    upsert: Upsert | None,
    java_table: Any,
) -> tuple[int, dict[str, int], dict[str, Any]]:
    """Commits ``rows`` with the snapshot summary ``summary`` makes (for an append, once
    the files are written, by ``tasks``: it may then raise
    :class:`.batch_decoder.UnplannedSchemas`);
    returns the rows written, the undecodable ones among them by reason and the committer's
    timings. The rows are counted in the same pass as the write (an observation), except
    when a dead-letter topic needs the undecodable ones first (once per batch, even when
    the commit is retried: ``dead``; but not those an earlier run of the batch sent since
    ``since_ms``, the writer's last commit: :mod:`.dead_letters`)."""

    def properties(staged: Staged | None = None) -> dict[str, str]:
        found = summary(staged)
        return {**found, DEAD_LETTER_ERROR: dead.error} if dead.error else found

    send = config.dead_letter is not None and not dead.sent
    if send:
        rows = rows.persist()
    try:
        if send:
            bad = rows.filter(undecodable(rows))
            errors = bad.count()  # (by reason: the write's own count below)
            if errors:
                metrics.doing("sending_dead_letters")
                with step("dead_letters"):
                    failure = dead_letters.send(bad, errors, config, since_ms)
                if failure is None:
                    dead.count = errors
                else:
                    dead.error, dead.failed = failure, errors
            dead.sent = True
        metrics.doing("writing")
        if upsert is not None:
            rows = rows.persist()
            try:
                raw = _raw_by_reason(rows.filter(undecodable(rows)))
                timing = committer.commit(rows, base, properties(), upsert)
                return int(timing.pop("applied")), raw, timing
            finally:
                rows.unpersist()
        with step("count_plan"):
            observation = Observation(f"floe_{uuid.uuid4().hex}")
            reason = raw_reason(F.col("value_error"))
            observed = rows.observe(
                observation,
                F.count(F.lit(1)).alias("rows"),
                *[
                    F.coalesce(
                        F.sum(F.when(undecodable(rows) & (reason == F.lit(name)), 1).otherwise(0)),
                        F.lit(0),
                    ).alias(f"raw_{name}")
                    for name in RAW_REASONS
                ],
            )
        timing = committer.append(
            observed, base, properties, tasks=tasks, rebase=True, table=java_table
        )
        with step("count_read"):
            counted = observation.get
        return (
            int(counted["rows"]),
            {
                name: int(counted[f"raw_{name}"])
                for name in RAW_REASONS
                if int(counted[f"raw_{name}"])
            },
            timing,
        )
    finally:
        if send:
            rows.unpersist()
