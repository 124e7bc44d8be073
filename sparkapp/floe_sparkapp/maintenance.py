"""Table maintenance with Iceberg's Spark procedures, safe while the streaming job commits.

``python -m floe_sparkapp maintain --config FILE --action ACTION`` runs one of:

- ``compaction``: ``rewrite_data_files`` to the target file size, only in partitions older than
  the one being written now (for an unpartitioned table: files older than an hour); in an
  upsert or cdc table also every file with deleted rows, its deletion vectors applied;
- ``expire-snapshots``: ``expire_snapshots`` past the retention, but never the newest snapshot
  written by floe (its summary holds the committed offsets the job restarts from when its
  checkpoint is lost) nor anything after it;
- ``remove-orphans``: ``remove_orphan_files`` older than the threshold;
- ``rewrite-manifests``: ``rewrite_manifests``.

A table whose resource lands in a branch (``table.branch``) is maintained on that branch: the
compaction rewrites the branch's files, expiry keeps what the branch gained since ``main``'s
head, and the manifests are not rewritten (Iceberg rewrites ``main``'s only).

A commit that conflicts with the streaming job's is retried a bounded number of times; each
run's outcome is recorded on the table as the property ``floe.maintenance.<action>`` (JSON),
which the operator puts on the resource's status.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from .catalog import hadoop_lists, load_catalog
from .config import JobConfig
from .contract import ROW_LEVEL
from .fileio import files_under
from .ledger import HOLD_MAX_AGE_MS, HOLD_PREFIX, MAIN, head, held_since, last_commit

log = logging.getLogger("floe.maintenance")

ACTIONS = ("compaction", "expire-snapshots", "remove-orphans", "rewrite-manifests")
PROPERTY_PREFIX = "floe.maintenance."
MAX_ATTEMPTS = 5  # a maintenance commit that conflicts with the job's is tried this often
CONFLICTS = (
    "CommitFailedException",
    "ValidationException",
    "CommitStateUnknownException",
    "Cannot commit",
    "concurrent",
)


class MaintenanceError(RuntimeError):
    pass


def _utc(ms: int | float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def _sql_timestamp(moment: dt.datetime) -> str:
    """A Spark timestamp literal (the session's time zone is UTC)."""
    return f"TIMESTAMP '{moment.astimezone(dt.timezone.utc):%Y-%m-%d %H:%M:%S.%f}'"


def writing_since(partitioning: str, now: dt.datetime) -> dt.datetime:
    """Start of the partition records arrive in now; compaction stays before it."""
    now = now.astimezone(dt.timezone.utc)
    if partitioning == "hour":
        return now.replace(minute=0, second=0, microsecond=0)
    if partitioning == "day":
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    if partitioning == "month":
        return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return now - dt.timedelta(hours=1)


def _first_row(rows: list[Any]) -> dict[str, Any]:
    return (
        {k: (int(v) if isinstance(v, int) else v) for k, v in rows[0].asDict().items()}
        if rows
        else {}
    )


def compaction(spark: Any, config: JobConfig, table: Any, now: dt.datetime) -> dict[str, Any]:
    settings = config.maintenance.compaction
    cutoff = writing_since(config.table.partitioning, now)
    options = {
        "target-file-size-bytes": settings.target_file_size_bytes,
        "min-input-files": settings.min_input_files,
        # Compacting a few small files is still worth it when nothing else is to do.
        "rewrite-all": "false",
        "partial-progress.enabled": "true",
    }
    if config.table.mode in ROW_LEVEL:
        # A file with rows replaced or deleted is rewritten without them, however few: the
        # deletion vectors are applied, then dropped.
        options.update({"delete-file-threshold": 1, "remove-dangling-deletes": "true"})
    option_map = ", ".join(f"'{k}', '{v}'" for k, v in options.items())
    where = f"kafka.timestamp < {_sql_timestamp(cutoff)}".replace("'", "\\'")
    ref = config.table.ref  # the branch the job lands in: main moves only when published
    rows = spark.sql(
        f"CALL {_name(config)}.system.rewrite_data_files(table => "
        f"'{_qualified(config)}', options => map({option_map}), "
        f"where => '{where}'" + (f", branch => '{ref}'" if ref != MAIN else "") + ")"
    ).collect()
    return {**_first_row(rows), "before": _sql_timestamp(cutoff)}


def expire_snapshots(spark: Any, config: JobConfig, table: Any, now: dt.datetime) -> dict[str, Any]:
    settings = config.maintenance.expire_snapshots
    older_than = now - dt.timedelta(seconds=config.snapshot_max_age_seconds)
    ref = config.table.ref
    newest = last_commit(table, config.writer, config.kafka.topic, ref=ref).snapshot_id
    if newest is not None:  # keep the newest floe snapshot and everything after it
        older_than = min(older_than, _utc(table.snapshot_by_id(newest).timestamp_ms))
    if ref != MAIN and table.current_snapshot() is not None:
        # and what the branch gained since main's head: publishing walks it back to main
        older_than = min(older_than, _utc(table.current_snapshot().timestamp_ms))
    held = _held(table, now)  # and what a running action holds (``holding``)
    if held is not None:
        older_than = min(older_than, held)
    rows = spark.sql(
        f"CALL {_name(config)}.system.expire_snapshots(table => "
        f"'{_qualified(config)}', older_than => {_sql_timestamp(older_than)}, "
        f"retain_last => {settings.retain_last})"
    ).collect()
    return {**_first_row(rows), "olderThan": _sql_timestamp(older_than)}


def _held(table: Any, now: dt.datetime) -> dt.datetime | None:
    """When the oldest snapshot a running action holds (``holding``) was committed."""
    held = held_since(
        [
            (name, getattr(table.snapshot_by_id(ref.snapshot_id), "timestamp_ms", None))
            for name, ref in table.refs().items()
        ],
        int(now.timestamp() * 1000),
    )
    return None if held is None else _utc(held)


def remove_orphans(spark: Any, config: JobConfig, table: Any, now: dt.datetime) -> dict[str, Any]:
    """Iceberg's action, not its procedure: the procedure refuses a threshold under 24 hours,
    and floe allows 1 hour (its own writer's files are committed within a batch). While an
    action runs (a compaction may take hours), only files older than the snapshot it holds
    are removed: the files it has written are not referenced until it commits. A warehouse
    on an object store (S3, GCS, ADLS) is listed through PyIceberg's FileIO, with the catalog's
    own endpoint and keys, by the store's object API (ADLS's blob listing works on any account,
    the Data Lake one only on hierarchical ones)."""
    older_than = now - dt.timedelta(seconds=config.maintenance.remove_orphans.older_than_seconds)
    held = _held(table, now)
    if held is not None:
        older_than = min(older_than, held)
    jvm, session = spark._jvm, spark._jsparkSession
    iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        session, _qualified(config)
    )
    action = (
        jvm.org.apache.iceberg.spark.actions.SparkActions.get(session)
        .deleteOrphanFiles(iceberg_table)
        .olderThan(int(older_than.timestamp() * 1000))
    )
    if not hadoop_lists(table.location()):
        action = action.compareToFileList(_listing(spark, table, older_than)._jdf)
    result = action.execute()
    removed = result.orphanFileLocations().iterator()
    count = 0
    while removed.hasNext():
        removed.next()
        count += 1
    return {"removedFiles": count, "olderThan": _sql_timestamp(older_than)}


def _listing(spark: Any, table: Any, older_than: dt.datetime) -> Any:
    """The files under the table's location older than ``older_than``, listed through the
    table's FileIO, as Iceberg's orphan action compares them (``file_path``, ``last_modified``)."""
    before_ns = int(older_than.timestamp() * 1_000_000_000)
    rows = [
        (path, info.mtime)
        for path, info in files_under(table.io, table.location())
        if info.mtime_ns < before_ns
    ]
    return spark.createDataFrame(rows, "file_path string, last_modified timestamp")


def rewrite_manifests(
    spark: Any, config: JobConfig, table: Any, now: dt.datetime
) -> dict[str, Any]:
    if config.table.ref != MAIN:
        return {
            "skipped": (
                f"the table lands in branch {config.table.ref}, and Iceberg "
                "rewrites the manifests of main only, which would then no longer "
                "be an ancestor of the branch: publishing moves main to the "
                "branch's manifests, which compaction keeps few"
            )
        }
    rows = spark.sql(
        f"CALL {_name(config)}.system.rewrite_manifests('{_qualified(config)}')"
    ).collect()
    return _first_row(rows)


RUNNERS: dict[str, Callable[[Any, JobConfig, Any, dt.datetime], dict[str, Any]]] = {
    "compaction": compaction,
    "expire-snapshots": expire_snapshots,
    "remove-orphans": remove_orphans,
    "rewrite-manifests": rewrite_manifests,
}


def _name(config: JobConfig) -> str:
    return config.table.catalog.name


def _qualified(config: JobConfig) -> str:
    """catalog.namespace.table: a bare namespace.table whose namespace is also a catalog's name
    would be read as that catalog's table."""
    return f"{config.table.catalog.name}.{config.table.identifier}"


def _reason(error: Exception) -> str:
    """The line that says what went wrong: for a Java error, its exception line, not Py4J's
    'An error occurred while calling o47.sql'."""
    java = getattr(error, "java_exception", None)
    if java is not None:
        return str(java.toString())[:500]
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return next(
        (line for line in lines if "Exception" in line), lines[0] if lines else repr(error)
    )[:500]


# The actions whose commits check the table's history from the snapshot they started from.
HOLDING = ("compaction", "rewrite-manifests")


@contextlib.contextmanager
def holding(config: JobConfig, action: str) -> Iterator[None]:
    """While the action runs, a tag on ``main``'s snapshot (``floe_hold_<action>_<id>``): the
    streaming job's expiry keeps it and everything after it, so the action's commit finds the
    history it checks, however long it runs beside a short commit interval."""
    from pyiceberg.exceptions import CommitFailedException

    catalog = load_catalog(config.catalog())
    name = f"{HOLD_PREFIX}{action.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    held = False
    for _ in range(5):
        table = catalog.load_table(config.table.identifier)
        start = head(table, config.table.ref)  # main, or the branch the job lands in
        if start is None:
            break
        try:
            table.manage_snapshots().create_tag(
                start.snapshot_id, name, max_ref_age_ms=HOLD_MAX_AGE_MS
            ).commit()
            held = True
            break
        except CommitFailedException:  # the job committed meanwhile: tag its new snapshot
            continue
    try:
        yield
    finally:
        for _ in range(5 if held else 0):
            try:
                catalog.load_table(config.table.identifier).manage_snapshots().remove_tag(
                    name
                ).commit()
                break
            except CommitFailedException:
                continue
            except Exception as error:  # noqa: BLE001 - the hold lapses by itself
                log.warning("could not remove the hold %s: %s", name, error)
                break


def _conflict(error: Exception) -> bool:
    text = str(error)
    return any(marker in text for marker in CONFLICTS)


def record(config: JobConfig, action: str, outcome: str, details: dict[str, Any]) -> None:
    """The run's outcome as a table property (a metadata-only commit that cannot conflict)."""
    table = load_catalog(config.catalog()).load_table(config.table.identifier)
    value = json.dumps(
        {
            "time": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "outcome": outcome,
            **details,
        },
        default=str,
        separators=(",", ":"),
    )
    with table.transaction() as transaction:
        transaction.set_properties({PROPERTY_PREFIX + action: value[:4000]})


def maintain(
    config: JobConfig,
    action: str,
    spark: Any | None = None,
    now: dt.datetime | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Runs one action; returns its figures, or raises MaintenanceError after the attempts."""
    if action not in RUNNERS:
        raise MaintenanceError(f"unknown action {action!r}: one of {', '.join(ACTIONS)}")
    from .session import build_session, spark_catalog_conf

    spark = spark or build_session(config)
    for key, value in {**spark_catalog_conf(config), "spark.sql.session.timeZone": "UTC"}.items():
        spark.conf.set(key, value)
    attempts = MAX_ATTEMPTS
    for attempt in range(1, attempts + 1):
        table = load_catalog(config.catalog()).load_table(config.table.identifier)
        try:
            with holding(config, action) if action in HOLDING else contextlib.nullcontext():
                result = RUNNERS[action](
                    spark, config, table, now or dt.datetime.now(dt.timezone.utc)
                )
        except Exception as error:  # noqa: BLE001 - Spark surfaces Iceberg's as Py4J errors
            first = _reason(error)
            if _conflict(error) and attempt < attempts:
                log.warning(
                    "%s: commit conflict on attempt %d/%d, retrying: %s",
                    action,
                    attempt,
                    attempts,
                    first,
                )
                sleep(min(30.0, 2.0 * attempt))
                continue
            message = (
                f"{action} on {config.table.identifier} failed after {attempt} attempt(s): {first}"
            )
            record(config, action, "Failed", {"attempts": attempt, "message": message})
            raise MaintenanceError(message) from None
        record(config, action, "Succeeded", {"attempts": attempt, **result})
        log.info("%s on %s: %s", action, config.table.identifier, json.dumps(result, default=str))
        return {"attempts": attempt, **result}
    raise AssertionError("unreachable")
