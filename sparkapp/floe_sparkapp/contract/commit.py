"""How the job lands: how often and how much it commits, whether a new writer schema evolves
the table, and the dead-letter topic."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..units import QUANTITY, duration_seconds, size_bytes
from .base import KAFKA_TOPIC, Rule, _duration, _Model, duration_rule, size_rule


class CommitSpec(_Model):
    RULES = (
        duration_rule(
            "interval",
            "commit.interval",
            at_least=1,
            at_most=86_400,
            words="must be between 1s and 1d",
        ),
        Rule(
            "!has(self.minRecords) || self.minRecords <= self.maxRecordsPerCommit",
            "commit.minRecords must not be above commit.maxRecordsPerCommit: a commit "
            "never takes more than maxRecordsPerCommit",
            ".minRecords",
            None,
            lambda c: c.min_records is None or c.min_records <= c.max_records_per_commit,
        ),
        size_rule(
            "maxBytesPerCommit", "commit.maxBytesPerCommit", 1024 * 1024, "must be at least 1Mi"
        ),
    )

    interval: str = _duration(
        "60s",
        "How often a snapshot is committed, e.g. 10s, 1m "
        "(from 1s to 1d); with minRecords, the longest a record "
        "waits for its commit.",
    )
    max_records_per_commit: int = Field(
        2_000_000,
        ge=1,
        le=100_000_000,
        description=(
            "At most this many records in a commit: a backlog lands in commits of this size."
        ),
    )
    max_bytes_per_commit: str = Field(
        "512Mi",
        pattern=QUANTITY,
        max_length=32,
        description=(
            "At most about this many bytes of records (keys and values) in a commit, at least 1Mi: "
            "turned into a number of records from the records' size, sampled at start and "
            "measured on every batch (lower-case units are binary, as in Spark)."
        ),
    )
    min_records: int | None = Field(
        None,
        ge=1,
        le=100_000_000,
        description=(
            "Commit as soon as this many records have arrived (checked every second), or when "
            "interval has passed since the last commit, whichever comes first: a burst lands "
            "early, a trickle still lands every interval."
        ),
    )

    @property
    def interval_seconds(self) -> int:
        return duration_seconds(self.interval)

    @property
    def max_bytes_per_commit_bytes(self) -> int:
        return size_bytes(self.max_bytes_per_commit)


class SchemaEvolutionSpec(_Model):
    mode: Literal["additive", "none"] = Field(
        "additive",
        description="additive: new optional fields and wider types evolve the "
        "table; breaking changes wait for approval. none: never evolve.",
    )


class DeadLetterSpec(_Model):
    topic: str = Field(pattern=KAFKA_TOPIC)
