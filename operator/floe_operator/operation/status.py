"""A KafkaIcebergOperation's status, as the operator writes it: its phase and message, the
outcome of its type (what a roll back moved, what a repair decoded, what a backfill landed,
what a replay produced) and its Spark jobs' attempts."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from floe_sparkapp.contract import _Model

from .spec import TIME


class RollbackStatus(_Model):
    table: str = Field(description="The table rolled back.")
    from_snapshot_id: str = Field(description="Where main was.")
    to_snapshot_id: str = Field(description="Where main was moved to.")
    from_offsets: dict[str, int] = Field(
        default_factory=dict,
        description="Per Kafka partition, the next offset the table held "
        "before (the job lands up to them again).",
    )
    to_offsets: dict[str, int] = Field(
        default_factory=dict, description="Per Kafka partition, where it goes on from."
    )
    rolled_back_at: str | None = Field(None, json_schema_extra=TIME)
    job_restarted: bool | None = Field(None, description="The topic's job was restarted.")


class StayRaw(_Model):
    count: int
    errors: list[str] = Field(default_factory=list, description="A few of their errors.")


class LeftOut(_Model):
    count: int
    why: str = Field(description="Why they were left out, and what to do instead.")


class RedriveStatus(_Model):
    read: int | None = Field(None, description="The dead-letter topic's records of the topic.")
    missing: int | None = Field(
        None, description="Of those not left out, those the table has no row for."
    )
    landed: int | None = Field(None, description="Of those, landed (they now decode).")
    would_land: int | None = Field(None, description="A dry run: those that would land.")
    stay_undecodable: int | None = Field(
        None, description="Those that still do not decode (left in the dead-letter topic)."
    )
    left_out: dict[str, LeftOut] = Field(
        default_factory=dict, description="Records left out of the re-drive, by reason."
    )


class RepairStatus(_Model):
    table: str = Field(description="The table repaired.")
    dry_run: bool = False
    selected: int | None = Field(None, description="Raw rows the last attempt selected.")
    repaired: int | None = Field(None, description="Rows decoded and replaced, in all attempts.")
    would_repair: int | None = Field(None, description="A dry run: rows that would be decoded.")
    would_evolve: list[str] = Field(
        default_factory=list,
        description="A dry run: how the table would evolve first (a dry run changes no schema).",
    )
    commits: int | None = Field(None, description="The commits that replaced them.")
    stay_raw: int | None = Field(None, description="Selected rows that still do not decode.")
    stay_raw_by_reason: dict[str, StayRaw] = Field(
        default_factory=dict, description="Those, by the reason they do not."
    )
    dead_letters: RedriveStatus | None = Field(
        None, description="The dead-letter topic's records re-driven into the table."
    )


class OffsetRange(_Model):
    from_: int = Field(alias="from")
    to: int


class BackfillStatus(_Model):
    table: str = Field(description="The topic's table whose records were landed.")
    into: str | None = Field(None, description="The new table they were landed in.")
    ranges: dict[str, OffsetRange] = Field(
        default_factory=dict,
        description="Per Kafka partition, the offsets landed (from, to "
        "below): those the table had not got.",
    )
    left_out: dict[str, str] = Field(
        default_factory=dict, description="Partitions left out, and why."
    )
    landed: int | None = Field(None, description="Records landed, in all attempts.")
    commits: int | None = Field(None, description="The commits that landed them.")
    held_elsewhere: int | None = Field(
        None,
        description="A routed topic's: records of the ranges that another of the "
        "topic's tables holds (taken before this table's route existed), "
        "left there: a record lands in one table.",
    )
    undecodable: int | None = Field(
        None,
        description="Records landed raw (value_raw, value_error) as they could not be "
        "decoded, in all attempts; sent to the dead-letter topic where the "
        "topic has one. A Repair decodes them once their schema is fixed.",
    )
    dead_letter_error: str | None = Field(
        None,
        description="Why the dead-letter topic refused some of them (they are in the "
        "table, raw, either way).",
    )


class ReplayStatus(_Model):
    table: str = Field(description="The table replayed.")
    topic: str | None = Field(None, description="The topic it was produced to.")
    snapshot_id: str | None = Field(None, description="The snapshot whose rows were produced.")
    records: int | None = Field(None, description="The rows produced, in all attempts.")
    partitions: dict[str, OffsetRange] = Field(
        default_factory=dict,
        description="Per Kafka partition, the source offsets produced "
        "(from, to below), each to the same partition.",
    )
    produced_this_attempt: int | None = None
    transactions_this_attempt: int | None = None
    replayed_through: dict[str, int] = Field(
        default_factory=dict,
        description="While it runs: per Kafka partition, the next "
        "source offset to produce (committed with the "
        "replay's transactions).",
    )


class OperationStatus(_Model):
    """The operation's status, as the operator writes it."""

    observed_generation: int | None = None
    phase: Literal["Pending", "Running", "Succeeded", "Failed"] | None = Field(
        None,
        description="Pending (waiting for its topic or table), Running, Succeeded, or "
        "Failed (the message says why; nothing was changed).",
    )
    message: str | None = Field(None, description="What it is doing, or why it failed.")
    started_at: str | None = Field(None, json_schema_extra=TIME)
    finished_at: str | None = Field(None, json_schema_extra=TIME)
    rollback: RollbackStatus | None = None
    repair: RepairStatus | None = None
    backfill: BackfillStatus | None = None
    replay: ReplayStatus | None = None
    attempts: int | None = Field(
        None, description="Spark jobs started for it (a failed one is started again, up to 3)."
    )
    application: str | None = Field(None, description="Its SparkApplication (the newest).")
    last_error: str | None = Field(None, description="Why its last Spark job failed.")
