"""How many records a commit takes: at most ``commit.maxRecordsPerCommit``, and at most as many
as fit in ``commit.maxBytesPerCommit`` at the size the topic's records have.

Spark's Kafka source caps a batch by offsets only (``maxOffsetsPerTrigger``), so the job turns
the bytes into a count: at each start of its query from a sample of the topic's newest records,
then from every batch it lands (its keys' and values' bytes, as Kafka holds them; not
headers).  When a batch shows records so much larger or smaller that the count is off by
:data:`DRIFT` or more, the job re-plans: the next batch, planned with the old count, raises
:class:`Replan` before it writes anything, is removed from the offset log, and the query
starts again with the new count.  So only the batch that shows the change can overshoot the
bytes' cap.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from .config import JobConfig, kafka_consumer
from .contract import CommitSpec


class Replan(RuntimeError):
    """Raised by a batch planned with a count the last batch showed wrong, before it writes
    anything: the job removes it from the offset log and starts the query again
    (:meth:`CommitSize.replanned`), so that Spark plans it anew with the new count."""


log = logging.getLogger("floe.job")

SAMPLE = 32  # the newest records of each partition read at start
SAMPLE_PARTITIONS = 16  # of that many partitions at most, spread over the topic's
SAMPLE_SECONDS = 5.0  # the longest the sample may take (a topic with nothing: no sample)
DRIFT = 2.0  # re-plan when the count a batch asks for is this far from the one in use
MIN_ROWS = 100  # a batch of fewer records says too little of their size (unless over the cap)


def records_per_commit(commit: CommitSpec, record_bytes: float | None) -> int:
    """The most records a commit takes, for records of ``record_bytes`` (unknown: the records'
    cap alone)."""
    if not record_bytes:
        return commit.max_records_per_commit
    by_bytes = int(commit.max_bytes_per_commit_bytes // max(record_bytes, 1.0))
    return max(1, min(commit.max_records_per_commit, by_bytes))


def sample_record_bytes(config: JobConfig, partitions: list[int]) -> float | None:
    """The mean size (key and value) of up to :data:`SAMPLE` of the newest records of each of
    ``partitions``; None when the topic holds none or Kafka does not answer in time."""
    from confluent_kafka import KafkaError, TopicPartition

    consumer = kafka_consumer(
        config, f"{config.consumer_group}-sizing", **{"enable.partition.eof": True}
    )
    try:
        assigned, wanted = [], 0
        step = max(1, len(partitions) // SAMPLE_PARTITIONS)
        for p in partitions[::step][:SAMPLE_PARTITIONS]:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(config.kafka.topic, p), timeout=10
            )
            if high > low:
                assigned.append(TopicPartition(config.kafka.topic, p, max(low, high - SAMPLE)))
                wanted += min(SAMPLE, high - low)
        if not assigned:
            return None
        consumer.assign(assigned)
        sizes: list[int] = []
        ends, deadline = 0, time.monotonic() + SAMPLE_SECONDS
        while ends < len(assigned) and len(sizes) < wanted and time.monotonic() < deadline:
            for message in consumer.consume(
                num_messages=wanted, timeout=max(0.0, deadline - time.monotonic())
            ):
                if message.error() is None:
                    sizes.append(len(message.key() or b"") + len(message.value() or b""))
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    ends += 1
        return sum(sizes) / len(sizes) if sizes else None
    except Exception as error:  # noqa: BLE001 - the records' cap stands until a batch says
        log.warning(
            "could not sample topic %s's record sizes: %s",
            config.kafka.topic,
            str(error).splitlines()[0][:300],
        )
        return None
    finally:
        consumer.close()


@dataclass
class CommitSize:
    """The records a commit takes now (``limit``, the query's ``maxOffsetsPerTrigger``), the
    record sizes it was made from (``sampled`` at the query's start, ``observed`` on the batch
    that asked for a re-plan), and the count the query should be started again with
    (``replan``), when a batch showed one."""

    commit: CommitSpec
    sampled: float | None = None
    observed: float | None = None
    limit: int = 0
    replan: int | None = None

    def __post_init__(self) -> None:
        self.limit = records_per_commit(self.commit, self._size())

    def _size(self) -> float | None:
        """The size a count is made for: the larger of the two known, so that neither the
        newest records nor the last batch's would overshoot the bytes' cap."""
        known = [size for size in (self.sampled, self.observed) if size]
        return max(known) if known else None

    def observe(self, rows: int, size: int) -> None:
        """A committed batch of ``rows`` records of ``size`` bytes in all: sets ``replan`` when
        its records ask for a count :data:`DRIFT` times smaller than ``limit`` (the commits
        overshoot the bytes' cap), or larger while the batch was full (a backlog committing in
        smaller pieces than its cap allows) and the newest records sampled at the start agree
        (records growing towards the topic's end never make a commit overshoot)."""
        if size <= 0 or (rows < MIN_ROWS and size < self.commit.max_bytes_per_commit_bytes):
            return  # too few records to tell, and not over the cap
        mean = size / rows
        smaller = records_per_commit(self.commit, mean)
        larger = records_per_commit(self.commit, max(mean, self.sampled or 0.0))
        if smaller * DRIFT <= self.limit:
            wanted = smaller
        elif rows >= self.limit and larger >= self.limit * DRIFT:
            wanted = larger
        else:
            return
        if self.replan is None:
            log.info(
                "records of %.0f bytes on average: a commit takes at most %d records (was "
                "%d); the query starts again with it",
                mean,
                wanted,
                self.limit,
            )
        self.observed, self.replan = mean, wanted

    def replanned(self) -> None:
        """The query starts again: the count comes from what was observed (and sampled anew)."""
        self.replan = None

    def planned(self, config: JobConfig, partitions: list[int]) -> int:
        """The count for a query's start, from a sample of the topic's newest records and the
        batch that asked for a re-plan."""
        self.sampled = sample_record_bytes(config, partitions)
        self.limit = records_per_commit(self.commit, self._size())
        if self.limit < self.commit.max_records_per_commit:
            log.info(
                "records of %.0f bytes on average in topic %s: a commit takes at most %d "
                "records (maxBytesPerCommit %s)",
                self._size(),
                config.kafka.topic,
                self.limit,
                self.commit.max_bytes_per_commit,
            )
        return self.limit
