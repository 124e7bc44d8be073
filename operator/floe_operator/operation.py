"""KafkaIcebergOperation: an operation on a KafkaIcebergTopic's table, declared as an object of
its own (GitOps-friendly: applied once, its status says how far it got and what it did).

The models here are the operation CRD's source (``python -m floe_operator.crd``); the planner
(:func:`plan`) is pure, as the topics' is: :mod:`observe` builds the :class:`OperationWorld`,
:mod:`act` runs the actions, and the status is written from the plan.

**Rollback** moves the table's ``main`` back to a snapshot (an ancestor of it: by id, or the
newest committed at or before a time) and restarts the topic's job, which goes on from that
snapshot's offsets: the records after it land again, once. The move and a record of it
(:func:`floe_sparkapp.ledger.roll_back`) are one commit that holds only if ``main`` did not
move since it was read, so a commit of the running job in between is never lost under it, and
an operation tried again after a crash of the operator finds its record and does not move
``main`` a second time. It succeeds once the table holds again every offset it held before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field
from pydantic.config import JsonDict

from floe_sparkapp.contract import BackfillSpec, RepairSpec, ReplaySpec, Rule, _Model

from .clock import epoch, iso
from .names import OPERATION_KIND, OPERATION_PLURAL
from .view import by_partition

KIND, PLURAL = OPERATION_KIND, OPERATION_PLURAL
SINGULAR = "kafkaicebergoperation"
SHORT_NAMES = ["kio"]

_TIME: JsonDict = {"format": "date-time"}
_DIGITS = r"^[0-9]{1,19}$"


# --- the spec ----------------------------------------------------------------------------------


class RollbackSpec(_Model):
    """Where to move main back to: one of snapshotId and before."""

    snapshot_id: str | None = Field(
        None,
        pattern=_DIGITS,
        description="A snapshot in main's history (as the topic's "
        "status.table.snapshotId shows them).",
    )
    before: str | None = Field(
        None,
        description="The newest snapshot of main committed at or before this time "
        "(RFC 3339, e.g. 2026-11-27T08:00:00Z).",
        json_schema_extra=_TIME,
    )
    table: str | None = Field(
        None,
        description="Which of the topic's tables (a routed topic has several); default: "
        "its table.identifier.",
    )

    RULES = (
        Rule(
            "has(self.snapshotId) != has(self.before)",
            "rollback needs exactly one of snapshotId and before",
            "",
            None,
            lambda r: (r.snapshot_id is None) != (r.before is None),
        ),
    )


class OperationSpec(_Model):
    topic: str = Field(
        min_length=1,
        max_length=253,
        description="The KafkaIcebergTopic, in this namespace, whose table the operation works on.",
    )
    type: Literal["Rollback", "Repair", "Backfill", "Replay"] = Field(
        description="What to do: Rollback (move the table's main back to a snapshot; the "
        "records after it land again), Repair (decode the table's raw rows again, "
        "once their cause is fixed), Backfill (land a range of the topic in the "
        "table, each record once), Replay (produce the table's rows to a topic, "
        "each once)."
    )
    rollback: RollbackSpec | None = None
    repair: RepairSpec | None = None
    backfill: BackfillSpec | None = None
    replay: ReplaySpec | None = None

    RULES = (
        Rule(
            "self.type != 'Rollback' || has(self.rollback)",
            "type Rollback needs the rollback section",
            "",
            None,
            lambda s: s.type != "Rollback" or s.rollback is not None,
        ),
        Rule(
            "self.type != 'Repair' || has(self.repair)",
            "type Repair needs the repair section (repair: {} selects every raw row)",
            "",
            None,
            lambda s: s.type != "Repair" or s.repair is not None,
        ),
        Rule(
            "self.type != 'Backfill' || has(self.backfill)",
            "type Backfill needs the backfill section (backfill: {} lands everything Kafka "
            "has below the table's offsets)",
            "",
            None,
            lambda s: s.type != "Backfill" or s.backfill is not None,
        ),
        Rule(
            "self.type != 'Replay' || has(self.replay)",
            "type Replay needs the replay section (its topic at least)",
            "",
            None,
            lambda s: s.type != "Replay" or s.replay is not None,
        ),
    )

    @property
    def section(self) -> RollbackSpec | RepairSpec | BackfillSpec | ReplaySpec | None:
        """The spec of its type."""
        return {
            "Rollback": self.rollback,
            "Repair": self.repair,
            "Backfill": self.backfill,
            "Replay": self.replay,
        }[self.type]

    @property
    def table(self) -> str | None:
        """The table the spec names, if it names one."""
        return self.section.table if self.section is not None else None


# --- the status --------------------------------------------------------------------------------


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
    rolled_back_at: str | None = Field(None, json_schema_extra=_TIME)
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
    started_at: str | None = Field(None, json_schema_extra=_TIME)
    finished_at: str | None = Field(None, json_schema_extra=_TIME)
    rollback: RollbackStatus | None = None
    repair: RepairStatus | None = None
    backfill: BackfillStatus | None = None
    replay: ReplayStatus | None = None
    attempts: int | None = Field(
        None, description="Spark jobs started for it (a failed one is started again, up to 3)."
    )
    application: str | None = Field(None, description="Its SparkApplication (the newest).")
    last_error: str | None = Field(None, description="Why its last Spark job failed.")


# --- what the planner reads --------------------------------------------------------------------


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


# --- actions -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RollBack:
    """Move ``main`` of ``table`` from ``from_snapshot_id`` to ``to_snapshot_id``, recording
    ``record`` (one commit)."""

    table: str
    from_snapshot_id: int
    to_snapshot_id: int
    record: dict[str, Any] = field(compare=False)


@dataclass(frozen=True)
class RestartJob:
    """Set the topic's restart annotation to ``value``: its job starts again once."""

    topic: str
    value: str


@dataclass(frozen=True)
class StartRun:
    """Create attempt ``attempt``'s SparkApplication."""

    attempt: int


@dataclass(frozen=True)
class DeleteRun:
    """Delete an ended attempt's SparkApplication (and its pods)."""

    name: str


OperationAction = RollBack | RestartJob | StartRun | DeleteRun


@dataclass(frozen=True)
class OperationPlan:
    actions: tuple[OperationAction, ...]
    status: dict[str, Any]


# --- the planner -------------------------------------------------------------------------------

TERMINAL = ("Succeeded", "Failed")
MAX_ATTEMPTS = 3  # Spark jobs started for an operation before it fails
FAILED_STATES = ("FAILED", "SUBMISSION_FAILED")


def restart_value(world: OperationWorld) -> str:
    """The topic's restart annotation that this operation sets: its own, so setting it again
    after a crash restarts nothing."""
    return f"rollback {world.name} {world.uid[:8]}"


def target(spec: RollbackSpec, ancestry: tuple[Snapshot, ...]) -> Snapshot | str:
    """The snapshot to move back to, or why there is none."""
    if spec.snapshot_id is not None:
        wanted = int(spec.snapshot_id)
        at = next((i for i, s in enumerate(ancestry) if s.snapshot_id == wanted), None)
        if at is None:
            return (
                f"snapshot {wanted} is not in main's history (a snapshot of another branch, "
                "expired, or mistyped): nothing was changed"
            )
        if ancestry[at].torn:
            before = next((s.snapshot_id for s in ancestry[at + 1 :] if not s.torn), None)
            after = next((s.snapshot_id for s in reversed(ancestry[:at]) if not s.torn), None)
            return (
                f"snapshot {wanted} is the first half of an upsert batch (its keys' rows "
                "deleted, its records not yet added): the table was never in that state "
                f"between batches. Roll back to {before} (before the batch) or {after} "
                "(after it); nothing was changed"
            )
        return ancestry[at]
    limit = epoch(spec.before) * 1000 if spec.before else 0
    found = next((s for s in ancestry if s.timestamp_ms <= limit and not s.torn), None)
    if found is None:
        return f"main has no snapshot committed at or before {spec.before}: nothing was changed"
    return found


def plan(world: OperationWorld) -> OperationPlan:
    """What to do next for an operation, and its status."""
    previous = dict(world.status or {})
    status: dict[str, Any] = {
        "observedGeneration": world.generation,
        "startedAt": previous.get("startedAt") or iso(world.now_ms / 1000),
    }

    def ends(phase: str, message: str, **more: Any) -> OperationPlan:
        return OperationPlan(
            (),
            {
                **status,
                "phase": phase,
                "message": message,
                "finishedAt": iso(world.now_ms / 1000),
                **more,
            },
        )

    def waits(
        message: str, *actions: OperationAction, phase: str = "Pending", **more: Any
    ) -> OperationPlan:
        return OperationPlan(actions, {**status, "phase": phase, "message": message, **more})

    if previous.get("phase") in TERMINAL:
        return OperationPlan((), {})  # done: its status stays as it ended
    if world.invalid is not None or world.spec is None:
        return ends("Failed", f"invalid spec: {world.invalid}")
    spec = world.spec
    if not world.topic_found:
        return waits(f"waiting for KafkaIcebergTopic {spec.topic} in this namespace")
    if spec.table is not None and spec.table not in world.tables:
        return ends(
            "Failed",
            f"table {spec.table} is not one of KafkaIcebergTopic "
            f"{spec.topic}'s tables ({', '.join(world.tables)})",
        )
    if spec.type in BATCHES:
        return _batch(world, spec, ends, waits)
    rollback = spec.rollback
    assert rollback is not None
    table = rollback.table or (world.tables[0] if world.tables else "")
    if world.refused is not None:
        return ends("Failed", f"cannot roll back: {world.refused}")
    if world.table_error is not None:
        return waits(f"table {table} could not be read: {world.table_error}")
    record = world.record
    if record is None:
        if not world.ancestry:
            return ends("Failed", f"table {table} has no snapshot: nothing to roll back")
        found = target(rollback, world.ancestry)
        if isinstance(found, str):
            return ends("Failed", found)
        head = world.ancestry[0]
        if found.snapshot_id == head.snapshot_id:
            return ends(
                "Succeeded",
                f"main of {table} is at snapshot {head.snapshot_id} already: nothing to roll back",
            )
        unsafe = _unsafe_rollback(world, table, found.snapshot_id)
        if unsafe is not None:
            phase, message = unsafe
            return ends(phase, message) if phase == "Failed" else waits(message)
        moved = {
            "table": table,
            "fromSnapshotId": str(head.snapshot_id),
            "toSnapshotId": str(found.snapshot_id),
            "fromOffsets": by_partition(world.offsets),
            "toOffsets": by_partition(world.offsets_at.get(found.snapshot_id, {})),
            "rolledBackAt": iso(world.now_ms / 1000),
        }
        return waits(
            f"moving main of {table} back from snapshot {head.snapshot_id} to {found.snapshot_id}",
            RollBack(table, head.snapshot_id, found.snapshot_id, moved),
            phase="Running",
        )
    shown = {**record, "jobRestarted": world.topic_restart == restart_value(world)}
    if not shown["jobRestarted"]:
        return waits(
            f"main of {table} is at snapshot {record['toSnapshotId']}: restarting "
            f"the job of KafkaIcebergTopic {spec.topic}",
            RestartJob(spec.topic, restart_value(world)),
            phase="Running",
            rollback={**shown, "jobRestarted": True},
        )
    wanted = {int(p): o for p, o in (record.get("fromOffsets") or {}).items()}
    behind = sum(max(0, o - world.offsets.get(p, 0)) for p, o in wanted.items())
    if behind == 0:
        return ends(
            "Succeeded",
            f"main of {table} was moved back to snapshot "
            f"{record['toSnapshotId']}, and the job has landed again "
            "every record it held before",
            rollback=shown,
        )
    lost = world.topic_data_loss
    if lost is not None and epoch(lost[1]) >= epoch(record["rolledBackAt"]):
        return ends(
            "Failed",
            f"main of {table} was moved back to snapshot "
            f"{record['toSnapshotId']}, but the job stopped before landing "
            f"the records after it again ({behind} to go): Kafka no longer "
            f"holds them ({lost[0]}). Their rows are still in "
            f"snapshot {record['fromSnapshotId']} until it expires: restore "
            f"them with CALL <catalog>.system.set_current_snapshot('{table}', "
            f"{record['fromSnapshotId']}), then delete the job's "
            "SparkApplication so that it starts again",
            rollback=shown,
        )
    suspended = (
        (f" (KafkaIcebergTopic {spec.topic} is suspended: they land once it is resumed)")
        if world.topic_suspended
        else ""
    )
    return waits(
        f"main of {table} is at snapshot {record['toSnapshotId']}; the job lands "
        f"the records after it again: {behind} to go{suspended}",
        phase="Running",
        rollback=shown,
    )


def _unsafe_rollback(world: OperationWorld, table: str, to: int) -> tuple[str, str] | None:
    """Why moving ``main`` of ``table`` back to snapshot ``to`` would lose rows for good, as
    the operation's phase and message (``Pending`` while Kafka has not answered), or None: a
    route's table before its first commit (it would go on from where the topic's other tables
    are), or records after the snapshot that Kafka no longer holds (the job could not land
    them again)."""
    at = world.offsets_at.get(to, {})
    if world.tables and table != world.tables[0] and not at:
        return "Failed", (
            f"cannot roll back: snapshot {to} of {table} is before the table's first commit of "
            "the topic's records, and a route's table without offsets goes on from where the "
            "topic's other tables are: the rows after it would not land again. Roll back to a "
            "snapshot at or after its first commit (the oldest whose summary has floe.offsets)"
            "; nothing was changed"
        )
    if world.kafka_holds is None:
        return "Pending", (
            f"asking Kafka whether it still holds the records after snapshot {to} of {table} "
            f"(the job lands them again): {world.kafka_error or 'no answer yet'}"
        )
    gone = {
        p: (at.get(p, 0), low)
        for p, low in sorted(world.kafka_holds.items())
        if world.offsets.get(p, 0) > at.get(p, 0) and low > at.get(p, 0)
    }
    if not gone:
        return None
    where = ", ".join(
        f"partition {p} offsets {since} to {low - 1}" for p, (since, low) in gone.items()
    )
    return "Failed", (
        f"cannot roll back: Kafka no longer holds records after snapshot {to} of {table} that "
        f"main holds and the job would have to land again ({where}: past the topic's "
        "retention), so their rows would be lost. Roll back to a later snapshot, or keep the "
        "rows and fix them with a Repair; nothing was changed"
    )


def _batch(
    world: OperationWorld,
    spec: OperationSpec,
    ends: Callable[..., OperationPlan],
    waits: Callable[..., OperationPlan],
) -> OperationPlan:
    """An operation run as a Spark job (Repair, Backfill): the job started (again, after a
    failed attempt, up to :data:`MAX_ATTEMPTS`), until its outcome is recorded on the table."""
    section = spec.section
    assert section is not None
    kind = spec.type.lower()
    table = section.table or (world.tables[0] if world.tables else "")
    if world.refused is not None:
        return ends("Failed", f"cannot {kind}: {world.refused}")
    if world.table_error is not None:
        return waits(f"table {table} could not be read: {world.table_error}")
    previous = world.status
    run = world.run
    attempts = max(run.attempt if run else 0, int(previous.get("attempts") or 0))
    more: dict[str, Any] = {
        "attempts": attempts or None,
        "application": run.name if run else previous.get("application"),
        "lastError": previous.get("lastError"),
    }
    more = {k: v for k, v in more.items() if v is not None}
    fields, done, so_far, verb = BATCHES[spec.type]
    record = world.record
    if record is not None:
        shown = {"table": table, **{k: v for k, v in record.items() if k in fields}}
        return ends("Succeeded", done(record, table), **{kind: shown}, **more)
    dry = " (dry run)" if getattr(section, "dry_run", False) else ""
    commits, rows = world.progress
    progress = {"table": table, **so_far(section, commits, rows)}
    if world.replayed:
        progress["replayedThrough"] = by_partition(world.replayed)
    if run is None or run.state in FAILED_STATES or run.state == "COMPLETED":
        error = (
            (
                run.error
                or f"its SparkApplication ended {run.state} without recording an "
                "outcome on the table"
            )
            if run is not None
            else None
        )
        if error:
            more["lastError"] = error[:1000]
        if attempts >= MAX_ATTEMPTS:
            return ends(
                "Failed",
                f"the {kind}'s Spark job failed {attempts} times, the last "
                f"with: {more.get('lastError', 'no error given')}",
                **{kind: progress},
                **more,
            )
        actions = ((DeleteRun(run.name),) if run is not None else ()) + (StartRun(attempts + 1),)
        said = f"attempt {attempts} failed ({more['lastError'][:300]}); " if run is not None else ""
        return waits(
            f"{said}starting attempt {attempts + 1} of the {kind} of {table}{dry}",
            *actions,
            phase="Running",
            **{kind: progress},
            **{**more, "attempts": attempts + 1},
        )
    counted = f": {rows} rows {verb} so far, in {commits} commits" if verb and not dry else ""
    return waits(
        f"attempt {attempts} of the {kind} of {table}{dry} is "
        f"{(run.state or 'submitted').lower()}{counted}",
        phase="Running",
        **{kind: progress},
        **more,
    )


def _repaired(record: dict[str, Any], table: str) -> str:
    letters = record.get("deadLetters")
    if record.get("dryRun"):
        redriven = (
            f"; {letters.get('wouldLand', 0)} records of the dead-letter topic the "
            "table has no row for would land"
            if letters
            else ""
        )
        return (
            f"dry run: {record.get('wouldRepair', 0)} of the {record.get('selected', 0)} "
            f"selected raw rows of {table} would be decoded, {record.get('stayRaw', 0)} "
            f"would stay raw{_why(record)}{redriven}{_left_out(letters)}"
        )
    redriven = (
        f"; {letters.get('landed', 0)} records of the dead-letter topic the table had "
        "no row for landed"
        if letters
        else ""
    )
    return (
        f"decoded {record.get('repaired', 0)} raw rows of {table} again, in "
        f"{record.get('commits', 0)} commits; {record.get('stayRaw', 0)} stay "
        f"raw{_why(record)}{redriven}{_left_out(letters)}"
    )


def _left_out(letters: dict[str, Any] | None) -> str:
    """The records of the dead-letter topic a repair left out, by reason, each with why and
    what to do instead."""
    left = (letters or {}).get("leftOut") or {}
    return "".join(
        f"; {found.get('count', 0)} records of the dead-letter topic left out "
        f"({reason}): {found.get('why', '')}"
        for reason, found in sorted(left.items())
    )


def _backfilled(record: dict[str, Any], table: str) -> str:
    ranges = record.get("ranges") or {}
    where = ", ".join(
        f"partition {p} offsets {r['from']} to {r['to']}"
        for p, r in sorted(ranges.items(), key=lambda i: int(i[0]))
    )
    left = record.get("leftOut") or {}
    if record.get("into"):
        table = f"{record['into']} (a new table, from {table}'s records)"
    return (
        f"landed {record.get('landed', 0)} records in {table}, in "
        f"{record.get('commits', 0)} commits ({where or 'no range'}; the rest were there "
        "already)"
        + (f"; left out: {len(left)} partition(s)" if left else "")
        + (
            f"; {record['heldElsewhere']} records left in the topic's other tables, which "
            "took them before this table's route existed"
            if record.get("heldElsewhere")
            else ""
        )
        + (
            f"; {record['undecodable']} records could not be decoded and landed raw"
            if record.get("undecodable")
            else ""
        )
        + (f"; {record['deadLetterError']}" if record.get("deadLetterError") else "")
    )


def _replayed(record: dict[str, Any], table: str) -> str:
    return (
        f"produced the {record.get('records', 0)} rows of {table} at snapshot "
        f"{record.get('snapshotId')} to topic {record.get('topic')}, each partition's in "
        "offset order, each once"
    )


def _repair_progress(section: Any, commits: int, rows: int) -> dict[str, Any]:
    if section.dry_run:
        return {"dryRun": True}
    return {"dryRun": False, "repaired": rows, "commits": commits}


def _aliases(model: type[_Model]) -> set[str]:
    return {f.alias or n for n, f in model.model_fields.items()}


# Per type of a Spark-job operation: its status fields, its outcome's message, and its
# progress while it runs.
BATCHES = {
    "Repair": (_aliases(RepairStatus), _repaired, _repair_progress, "decoded"),
    "Backfill": (
        _aliases(BackfillStatus),
        _backfilled,
        lambda section, commits, rows: {"landed": rows, "commits": commits},
        "landed",
    ),
    "Replay": (
        _aliases(ReplayStatus),
        _replayed,
        lambda section, commits, rows: {"topic": section.topic},
        None,
    ),
}


def _why(record: dict[str, Any]) -> str:
    reasons = record.get("stayRawByReason") or {}
    if not reasons:
        return ""
    return " (" + ", ".join(f"{r}: {v.get('count', 0)}" for r, v in sorted(reasons.items())) + ")"
