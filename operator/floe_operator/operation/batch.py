"""An operation run as a Spark job (Repair, Backfill, Replay): its attempts, started again
after a failure up to :data:`MAX_ATTEMPTS`, its progress while it runs, and its outcome's
message once the job has recorded it on the table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from floe_sparkapp.contract import _Model

from ..view import by_partition
from .actions import DeleteRun, OperationPlan, StartRun
from .spec import OperationSpec
from .status import BackfillStatus, RepairStatus, ReplayStatus
from .world import OperationWorld

MAX_ATTEMPTS = 3  # Spark jobs started for an operation before it fails
FAILED_STATES = ("FAILED", "SUBMISSION_FAILED")


def batch(
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
