"""The operations the job runs (a KafkaIcebergOperation's spec, the operator's): which rows a
Repair decodes again, which records a Backfill lands, which rows a Replay produces, each with
why a table cannot take it; and the request the operator hands the job."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from pydantic.config import JsonDict

from .base import IDENTIFIER, KAFKA_TOPIC, Rule, _Model
from .table import ROW_LEVEL, TableLayout
from .topic import TopicSpec

# Why a record is kept raw, in a few words: the job's metrics count records kept raw by these
# (a metric's label, never the message itself), and a repair selects raw rows by them.
RAW_REASONS = (
    "key",
    "not_framed",
    "unknown_schema",
    "schema_refused",
    "malformed",
    "undecodable",
    "not_a_change",
    "other",
)

_TIME: JsonDict = {"format": "date-time"}


def rfc3339_seconds(text: str) -> float:
    """An RFC 3339 time (``Z`` or an offset) as seconds since the epoch."""
    import datetime as dt

    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _offset_rule(section: str) -> Rule:
    """An operation's ``fromOffset`` is below its ``toOffset``."""
    return Rule(
        "!has(self.fromOffset) || !has(self.toOffset) || self.fromOffset < self.toOffset",
        f"{section}.fromOffset must be below {section}.toOffset",
        ".toOffset",
        None,
        lambda r: r.from_offset is None or r.to_offset is None or r.from_offset < r.to_offset,
    )


def _time_rule(section: str) -> Rule:
    """An operation's ``fromTime`` is before its ``toTime``."""
    return Rule(
        "!has(self.fromTime) || !has(self.toTime) || "
        "timestamp(self.fromTime) < timestamp(self.toTime)",
        f"{section}.fromTime must be before {section}.toTime",
        ".toTime",
        None,
        lambda r: (
            r.from_time is None
            or r.to_time is None
            or rfc3339_seconds(r.from_time) < rfc3339_seconds(r.to_time)
        ),
    )


class RepairSpec(_Model):
    """Which of the table's raw rows to decode again, and how."""

    RULES = (_offset_rule("repair"), _time_rule("repair"))

    table: str | None = Field(
        None,
        pattern=IDENTIFIER,
        description="Which of the topic's tables (a routed topic has "
        "several); default: its table.identifier.",
    )
    reasons: tuple[Literal[RAW_REASONS], ...] = Field(  # type: ignore[valid-type]
        default_factory=tuple,
        max_length=len(RAW_REASONS),
        description="Only rows kept raw for these reasons (the reason label of the job's "
        "floe_job_records_raw_total metric); default: any reason.",
    )
    schema_ids: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        default_factory=tuple,
        max_length=100,
        description="Only rows whose value is framed with one of these writer schema ids "
        "(kafka.schema_id).",
    )
    partitions: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        default_factory=tuple, max_length=10_000, description="Only these Kafka partitions."
    )
    from_offset: int | None = Field(None, ge=0, description="Only offsets at or above this.")
    to_offset: int | None = Field(None, ge=1, description="Only offsets below this.")
    from_time: str | None = Field(
        None,
        description="Only records whose Kafka timestamp is at or after this (RFC 3339).",
        json_schema_extra=_TIME,
    )
    to_time: str | None = Field(
        None,
        description="Only records whose Kafka timestamp is before this (RFC 3339).",
        json_schema_extra=_TIME,
    )
    dry_run: bool = Field(
        False,
        description="Change nothing: count the rows that would be "
        "decoded, and why the others would stay raw.",
    )
    dead_letters: bool = Field(
        True,
        description="With a deadLetter topic: also land its records of this table that "
        "the table has no row for (their raw rows deleted, or lost while "
        "Kafka no longer has them) and that now decode.",
    )
    rows_per_commit: int = Field(
        100_000,
        ge=1,
        le=100_000_000,
        description="At most this many rows of one Kafka partition are replaced per commit "
        "(a run stopped midway goes on from the rows still raw).",
    )

    def refused(self, topic: TopicSpec, table: TableLayout) -> str | None:
        """Why ``table``, one of ``topic``'s, cannot be repaired (what to change), or None."""
        if topic.value.format == "raw" and not topic.key.decoded:
            return (
                "the topic's value.format is raw and its key is not decoded: no row is "
                "kept raw for a reason a repair could fix"
            )
        if table.mode in ROW_LEVEL:
            return (
                f"table {table.identifier} is an {table.mode} table: repairing its raw "
                "rows would replay them against later changes of the same keys, which "
                "floe does not do yet; only append tables are repaired"
            )
        return None


class BackfillSpec(_Model):
    """Which records of the topic to land (again) in the table."""

    RULES = (_offset_rule("backfill"), _time_rule("backfill"))

    table: str | None = Field(
        None,
        pattern=IDENTIFIER,
        description="Which of the topic's tables (a routed topic has "
        "several: each takes its routed records); "
        "default: its table.identifier.",
    )
    into: str | None = Field(
        None,
        pattern=IDENTIFIER,
        max_length=253,
        description="Land in this new table instead (namespace.table, in the topic's catalog), "
        "made with the layout of the table above: its offsets are the "
        "backfill's, so a KafkaIcebergTopic made for it afterwards goes on from "
        "where the backfill ended. Default: the table above, beside its job.",
    )
    partitions: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        default_factory=tuple,
        max_length=10_000,
        description="Only these Kafka partitions; default: all.",
    )
    from_offset: int | None = Field(
        None, ge=0, description="From this offset of each partition; default: Kafka's earliest."
    )
    to_offset: int | None = Field(
        None,
        ge=1,
        description="Below this offset of each partition; "
        "default and at most: where the "
        "table's offsets are (the job lands "
        "the rest; into a new table: "
        "Kafka's end when it starts).",
    )
    from_time: str | None = Field(
        None,
        description="From the first record with a Kafka timestamp at or after this (RFC 3339).",
        json_schema_extra=_TIME,
    )
    to_time: str | None = Field(
        None,
        description="Below the first record with a Kafka timestamp at or after this (RFC 3339).",
        json_schema_extra=_TIME,
    )
    records_per_commit: int = Field(
        1_000_000,
        ge=1,
        le=100_000_000,
        description="At most this many offsets of one partition are landed per commit (a run "
        "stopped midway goes on from what is not in the table).",
    )

    def refused(self, topic: TopicSpec, table: TableLayout) -> str | None:
        """Why ``table``, one of ``topic``'s, cannot be backfilled (what to change), or None."""
        if self.into is not None and self.into in {t.identifier for t in topic.tables()}:
            return (
                f"backfill.into names {self.into}, one of the topic's tables: leave into "
                "out (and name it in backfill.table) to backfill it beside its job"
            )
        if table.mode in ROW_LEVEL:
            return (
                f"table {table.identifier} is an {table.mode} table: older records landed "
                "after newer ones would undo their changes; only append tables are "
                "backfilled"
            )
        return None


class ReplaySpec(_Model):
    """Which of the table's rows to produce to which topic."""

    RULES = (_offset_rule("replay"),)

    topic: str = Field(
        pattern=KAFKA_TOPIC,
        description=(
            "The topic to produce to, on the KafkaIcebergTopic's Kafka cluster (with its client "
            "settings); it must exist, with at least as many partitions as the rows came from "
            "(each row goes to the partition it came from), and must not be the topic itself."
        ),
    )
    table: str | None = Field(
        None,
        pattern=IDENTIFIER,
        description="Which of the topic's tables; default: its table.identifier.",
    )
    snapshot_id: str | None = Field(
        None,
        pattern=r"^[0-9]{1,19}$",
        description="Produce the table as of this snapshot; "
        "default: as it is when the replay starts.",
    )
    partitions: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        default_factory=tuple, max_length=10_000, description="Only rows of these Kafka partitions."
    )
    from_offset: int | None = Field(None, ge=0, description="Only rows at or above this offset.")
    to_offset: int | None = Field(None, ge=1, description="Only rows below this offset.")
    records_per_transaction: int = Field(
        10_000,
        ge=1,
        le=10_000_000,
        description="Records per Kafka transaction: each commits the partition's progress with "
        "it, so a run stopped midway goes on after the last committed one.",
    )
    timestamps: Literal["original", "now"] = Field(
        "original",
        description="original: each record keeps its row's Kafka timestamp (the replay is "
        "refused where the topic's time-based retention would delete some); now: "
        "each record is stamped when produced, the original kept in header "
        "floe.original-timestamp (epoch milliseconds, as text).",
    )

    def refused(self, topic: TopicSpec, table: TableLayout) -> str | None:
        """Why ``table``, one of ``topic``'s, cannot be replayed (what to change), or None."""
        if self.topic == topic.kafka.topic:
            return "replay.topic is the topic the table lands: produce to another topic"
        if table.mode == "cdc":
            return (
                f"table {table.identifier} is a cdc table: its rows are the changes "
                "applied, not the change events; only append and upsert tables are "
                "replayed"
            )
        if topic.value.format == "protobuf":
            return (
                "the topic's values are protobuf: replay re-encodes Avro and JSON values "
                "(and raw ones as their bytes) only"
            )
        return None


class OperationRequest(_Model):
    """What the operator asks the job to do (``python -m floe_sparkapp operate``): one
    operation of a KafkaIcebergOperation, recorded on the table under its ``uid``."""

    uid: str = Field(min_length=1)
    name: str = Field(min_length=1)
    type: Literal["Repair", "Backfill", "Replay"]
    repair: RepairSpec | None = None
    backfill: BackfillSpec | None = None
    replay: ReplaySpec | None = None

    @property
    def section(self) -> RepairSpec | BackfillSpec | ReplaySpec:
        """The spec of its type."""
        found = {"Repair": self.repair, "Backfill": self.backfill, "Replay": self.replay}[self.type]
        assert found is not None, f"type {self.type} needs its section"
        return found
