"""What the operation's planner reads: one visit's view of the operation, its topic and its
table (main's snapshots, the offsets, the newest attempt's SparkApplication)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .spec import OperationSpec


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    timestamp_ms: int
    torn: bool = False  # one of an upsert batch's deletes, before its last snapshot


@dataclass(frozen=True)
class Run:
    """An attempt's SparkApplication, as observed."""

    name: str
    attempt: int
    state: str = ""  # spark-operator's applicationState ("" before it has seen it)
    error: str = ""  # what spark-operator says went wrong


@dataclass(frozen=True)
class OperationWorld:
    """One visit's view of an operation: the object, its topic and its table."""

    now_ms: int
    name: str
    uid: str
    generation: int
    spec: OperationSpec | None = None
    invalid: str | None = None  # the spec the API server took but the models refuse
    status: dict[str, Any] = field(default_factory=dict)
    topic_found: bool = False
    topic_restart: str | None = None  # the topic's restart annotation
    topic_suspended: bool = False
    # the topic's job stopped with DataLoss: the condition's message and lastTransitionTime
    topic_data_loss: tuple[str, str] | None = None
    tables: tuple[str, ...] = ()  # the topic's tables, its own first
    table_error: str | None = None  # the table could not be read
    ancestry: tuple[Snapshot, ...] = ()  # main's snapshots, newest first
    record: dict[str, Any] | None = None  # what this operation recorded on the table
    offsets: dict[int, int] = field(default_factory=dict)  # the writer's, in main now
    offsets_at: dict[int, dict[int, int]] = field(default_factory=dict)  # at a snapshot
    refused: str | None = None  # why the table cannot take the operation (what to change)
    run: Run | None = None  # the newest attempt's SparkApplication
    progress: tuple[int, int] = (0, 0)  # the operation's commits in main, and rows they repaired
    replayed: dict[int, int] = field(default_factory=dict)  # a replay: next source offsets
    # a roll back's: Kafka's earliest offset per partition (None: not asked, or no answer)
    kafka_holds: dict[int, int] | None = None
    kafka_error: str | None = None  # why Kafka did not answer
