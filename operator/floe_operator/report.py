"""What ``floe status`` prints: pure functions from KafkaIcebergTopic objects to text.

The figures are the ones the operator wrote on each resource's status; nothing here asks
Kafka or the catalog, so the command needs no more than read access to the resources.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from floe_sparkapp.units import short_duration

from .clock import epoch

NONE = "-"


def duration(seconds: float | int | None) -> str:
    """kubectl's short form (42s, 5m3s, 2h1m, 3d4h), or - when unknown."""
    return NONE if seconds is None else short_duration(seconds)


def _since(timestamp: str | None, now: dt.datetime) -> str:
    if not timestamp:
        return NONE
    return duration(now.timestamp() - epoch(timestamp))


def _conditions(item: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in (item.get("status") or {}).get("conditions") or []}


def _schema(status: dict[str, Any]) -> str:
    version = (status.get("table") or {}).get("registryVersion")
    if version is None:
        return NONE
    waiting = (status.get("schemaChange") or {}).get("registryVersion")
    return f"v{version}" if waiting is None else f"v{waiting} (awaiting approval)"


def summary_row(item: dict[str, Any], now: dt.datetime) -> dict[str, str]:
    """One topic's line: Ready, phase, lag, freshness, snapshot, schema version, age."""
    status = item.get("status") or {}
    conditions = _conditions(item)
    meta = item["metadata"]
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    phase = status.get("phase") or NONE
    if status and observed is not None and generation is not None and observed < generation:
        phase += " (updating)"
    lag = (status.get("offsets") or {}).get("lag")
    return {
        "NAMESPACE": meta.get("namespace", ""),
        "NAME": meta["name"],
        "READY": conditions.get("Ready", {}).get("status", NONE),
        "PHASE": phase,
        "LAG": NONE if lag is None else str(lag),
        "FRESHNESS": _since(status.get("landedThrough"), now),
        "SNAPSHOT": (status.get("table") or {}).get("snapshotId") or NONE,
        "SCHEMA": _schema(status),
        "AGE": _since(meta.get("creationTimestamp"), now),
    }


def table(rows: list[dict[str, str]], columns: list[str]) -> str:
    """Left-aligned columns separated by three spaces, as kubectl prints them."""
    widths = {c: max([len(c)] + [len(r[c]) for r in rows]) for c in columns}
    lines = ["   ".join(c.ljust(widths[c]) for c in columns).rstrip()]
    lines += ["   ".join(r[c].ljust(widths[c]) for c in columns).rstrip() for r in rows]
    return "\n".join(lines) + "\n"


SUMMARY_COLUMNS = ["NAME", "READY", "PHASE", "LAG", "FRESHNESS", "SNAPSHOT", "SCHEMA", "AGE"]


def summary(items: list[dict[str, Any]], now: dt.datetime, all_namespaces: bool) -> str:
    columns = (["NAMESPACE"] if all_namespaces else []) + SUMMARY_COLUMNS
    return table([summary_row(item, now) for item in items], columns)


def details(item: dict[str, Any], now: dt.datetime) -> str:
    """Everything the status says about one topic, conditions included."""
    meta, spec = item["metadata"], item.get("spec") or {}
    status = item.get("status") or {}
    row = summary_row(item, now)
    kafka, table_spec = spec.get("kafka") or {}, spec.get("table") or {}
    catalog = table_spec.get("catalog") or {}
    lines = [
        f"Name:        {meta['name']}",
        f"Namespace:   {meta.get('namespace', '')}",
        f"Topic:       {kafka.get('topic', NONE)} ({kafka.get('bootstrapServers', NONE)})",
        f"Table:       {table_spec.get('identifier', NONE)} "
        f"(catalog {catalog.get('name', 'floe')}, {catalog.get('type', 'sql')})",
        f"Ready:       {row['READY']}",
        f"Phase:       {row['PHASE']} (generation {meta.get('generation', NONE)}, "
        f"observed {status.get('observedGeneration', NONE)})",
    ]
    app = status.get("sparkApplication") or {}
    if app:
        lines.append(
            f"Job:         SparkApplication {app.get('name')} {app.get('state') or NONE}, "
            f"attempts {app.get('attempts', 0)}, failovers {app.get('failovers', 0)}"
        )
        if app.get("lastFailure"):
            lines.append(f"Last failure: {app['lastFailure'].splitlines()[0][:200]}")
    table_status = status.get("table") or {}
    if table_status:
        lines.append(
            f"Snapshot:    {table_status.get('snapshotId', NONE)}, committed "
            f"{table_status.get('committedAt', NONE)}"
        )
        lines.append(
            f"Schema:      table schema {table_status.get('schemaId', NONE)}, "
            f"registry {row['SCHEMA']}"
        )
    branch = status.get("branch") or {}
    if branch:
        last = branch.get("lastPublish") or {}
        lines.append(
            f"Branch:      {branch.get('name')} at "
            f"{branch.get('snapshotId', 'not made yet')}, "
            f"{branch.get('unpublishedCommits', 0)} commit(s) not published; main at "
            f"{branch.get('mainSnapshotId', NONE)}"
        )
        if last:
            lines.append(
                f"Published:   {last.get('request')} at {last.get('at', NONE)}: "
                + (
                    f"refused: {last['error'][:200]}"
                    if last.get("error")
                    else f"main at {last.get('snapshotId', NONE)}"
                )
            )
    lines.append(f"Freshness:   {row['FRESHNESS']}")
    lines.append(f"Lag:         {row['LAG']}")
    offsets = status.get("offsets") or {}
    if offsets.get("latest") or offsets.get("committed"):
        committed, latest = offsets.get("committed") or {}, offsets.get("latest") or {}
        partitions = sorted(set(committed) | set(latest), key=int)
        rows = [
            {
                "PARTITION": p,
                "COMMITTED": str(committed.get(p, 0)),
                "LATEST": str(latest[p]) if p in latest else NONE,
                "LAG": str(max(0, latest[p] - committed.get(p, 0))) if p in latest else NONE,
            }
            for p in partitions
        ]
        lines.append("Offsets:")
        lines += [
            "  " + line
            for line in table(rows, ["PARTITION", "COMMITTED", "LATEST", "LAG"]).splitlines()
        ]
    routed = status.get("tables") or []
    if routed:
        rows = [
            {
                "TABLE": t.get("identifier", NONE),
                "SNAPSHOT": t.get("snapshotId", NONE if t.get("exists") else "not made yet"),
                "LAG": str(t["lag"]) if "lag" in t else NONE,
                "FRESHNESS": _since(t.get("landedThrough"), now),
            }
            for t in routed
        ]
        lines.append("Tables:")
        lines += [
            "  " + line
            for line in table(rows, ["TABLE", "SNAPSHOT", "LAG", "FRESHNESS"]).splitlines()
        ]
    conditions = status.get("conditions") or []
    lines.append("Conditions:")
    if conditions:
        rows = [
            {
                "TYPE": c.get("type", ""),
                "STATUS": c.get("status", ""),
                "REASON": c.get("reason", ""),
                "SINCE": _since(c.get("lastTransitionTime"), now),
                "MESSAGE": (c.get("message") or "").replace("\n", " "),
            }
            for c in conditions
        ]
        lines += [
            "  " + line
            for line in table(rows, ["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"]).splitlines()
        ]
    else:
        lines.append("  none yet: the operator has not visited this resource")
    maintenance = status.get("maintenance") or {}
    if maintenance:
        rows = []
        for action, entry in sorted(maintenance.items()):
            run = (entry or {}).get("lastRun") or {}
            rows.append(
                {
                    "ACTION": action,
                    "SCHEDULE": (entry or {}).get("schedule", NONE),
                    "LAST RUN": run.get("outcome", NONE),
                    "AT": run.get("time", NONE),
                }
            )
        lines.append("Maintenance:")
        lines += [
            "  " + line
            for line in table(rows, ["ACTION", "SCHEDULE", "LAST RUN", "AT"]).splitlines()
        ]
    return "\n".join(lines) + "\n"


def events(found: list[Any], now: dt.datetime) -> str:
    """A resource's Events (Kubernetes' objects), oldest first: when, type, reason, message."""
    rows = []
    for event in found:
        stamp = event.last_timestamp or event.event_time or event.first_timestamp
        rows.append(
            {
                "AGE": duration(now.timestamp() - stamp.timestamp()) if stamp else NONE,
                "TYPE": event.type or "",
                "REASON": event.reason or "",
                "COUNT": str(event.count or 1),
                "MESSAGE": (event.message or "").replace("\n", " ")[:300],
            }
        )
    return table(rows, ["AGE", "TYPE", "REASON", "COUNT", "MESSAGE"])


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus' text format, as (name, labels, value); comments and bad lines skipped."""
    found = []
    for line in text.splitlines():
        matched = _SAMPLE.match(line)
        if matched is None:
            continue
        name, labels, value = matched.groups()
        try:
            found.append((name, dict(_LABEL.findall(labels or "")), float(value)))
        except ValueError:
            continue
    return found


def job_metrics(text: str, now: dt.datetime) -> str:
    """What a job's driver reports (its Prometheus metrics), per table and partition."""
    found = samples(text)

    def total(name: str, **match: str) -> float:
        return sum(
            v
            for n, labels, v in found
            if n == name and all(labels.get(k) == w for k, w in match.items())
        )

    tables = sorted(
        {
            labels["table"]
            for n, labels, _ in found
            if n == "floe_job_rows_total" and "table" in labels
        }
    )
    started = total("floe_job_start_time_seconds")
    lines = [
        f"Up:          {duration(now.timestamp() - started) if started else NONE}, "
        f"{int(total('floe_job_batches_total'))} micro-batches, "
        f"{int(total('floe_job_input_records_total'))} records "
        f"({int(total('floe_job_input_bytes_total'))} bytes) read"
    ]
    rows = []
    for name in tables:
        raw = {
            labels["reason"]: v
            for n, labels, v in found
            if n == "floe_job_records_raw_total" and labels.get("table") == name and v
        }
        landed = total("floe_job_landed_timestamp_seconds", table=name)
        rows.append(
            {
                "TABLE": name,
                "ROWS": str(int(total("floe_job_rows_total", table=name))),
                "KEPT RAW": ", ".join(f"{int(v)} {r}" for r, v in sorted(raw.items())) or "0",
                "DEAD LETTERS": f"{int(total('floe_job_dead_letters_total', table=name))} sent, "
                f"{int(total('floe_job_dead_letter_failures_total', table=name))} "
                "refused",
                "COMMITS": str(int(total("floe_job_commits_total", table=name))),
                "LANDED THROUGH": dt.datetime.fromtimestamp(landed, dt.timezone.utc).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                )
                if landed
                else NONE,
            }
        )
    if rows:
        lines += table(
            rows, ["TABLE", "ROWS", "KEPT RAW", "DEAD LETTERS", "COMMITS", "LANDED THROUGH"]
        ).splitlines()
    lag = sorted(
        ((labels["partition"], v) for n, labels, v in found if n == "floe_job_kafka_lag_records"),
        key=lambda p: int(p[0]),
    )
    if lag:
        lines.append("Kafka lag:   " + ", ".join(f"partition {p}: {int(v)}" for p, v in lag))
    batches = total("floe_job_batch_duration_seconds_count")
    if batches:
        commit_seconds = total("floe_job_commit_duration_seconds_sum")
        commits = max(1, total("floe_job_commit_duration_seconds_count"))
        lines.append(
            f"Batches:     {total('floe_job_batch_duration_seconds_sum') / batches:.2f} s "
            f"on average, commits {commit_seconds / commits:.2f} s"
        )
    return "\n".join(lines) + "\n"
