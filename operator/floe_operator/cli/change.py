"""The commands that change a topic: ``approve`` a breaking schema change, ``suspend``,
``resume`` and ``restart`` its job, ``publish`` its table's branch.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .base import PROG, Failure, read_topic, utc_now


def approve(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    from ..names import APPROVAL

    item = read_topic(cluster, namespace, args.name)
    status = item.get("status") or {}
    waiting = status.get("schemaChange") or {}
    if waiting.get("registryVersion") is None:
        schema = {c.get("type"): c for c in status.get("conditions") or []}.get(
            "SchemaInSync"
        ) or {}
        raise Failure(
            f"{namespace}/{args.name} waits for no schema approval (SchemaInSync: "
            f"{schema.get('status', 'unknown')}, {schema.get('reason', 'no reason')})"
        )
    wanted, changes = str(waiting["registryVersion"]), waiting.get("changes") or []
    print(
        f"KafkaIcebergTopic {namespace}/{args.name}: registry version {wanted} changes the "
        "table's columns:"
    )
    for change in changes:
        print(f"  ~ {change}")
    print(
        f"Approving renames each changed column to <name>_before_v{wanted} (its data stays "
        f"there); the new type takes the name, and version {wanted}'s records, kept in "
        "value_raw until now, decode from then on."
    )
    if not args.yes:
        if not sys.stdin.isatty():
            raise Failure("not approved: no terminal to ask on (--yes approves)", 1)
        if input(f"Approve version {wanted}? [y/N] ").strip().lower() not in ("y", "yes"):
            print("not approved")
            return 1
    cluster.annotate(namespace, args.name, APPROVAL, wanted)
    print(f"kafkaicebergtopic {namespace}/{args.name}: schema version {wanted} approved")
    return 0


def suspend(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    return _suspend(cluster, namespace, args.name, True)


def resume(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    return _suspend(cluster, namespace, args.name, False)


def _suspend(cluster: Any, namespace: str, name: str, suspended: bool) -> int:
    item = read_topic(cluster, namespace, name)
    if bool((item.get("spec") or {}).get("suspend")) == suspended:
        print(
            f"kafkaicebergtopic {namespace}/{name} is already "
            f"{'suspended' if suspended else 'running'}"
        )
        return 0
    cluster.patch(namespace, name, {"spec": {"suspend": suspended}})
    print(f"kafkaicebergtopic {namespace}/{name} {'suspended' if suspended else 'resumed'}")
    return 0


def restart(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    from ..names import RESTART

    item = read_topic(cluster, namespace, args.name)
    if (item.get("spec") or {}).get("suspend"):
        raise Failure(
            f"{namespace}/{args.name} is suspended: `{PROG} resume {args.name}` starts its job"
        )
    stamp = utc_now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster.annotate(namespace, args.name, RESTART, stamp)
    print(f"kafkaicebergtopic {namespace}/{args.name}: restart asked for ({RESTART}={stamp})")
    return 0


def publish(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    from ..names import PUBLISH

    item = read_topic(cluster, namespace, args.name)
    branch = ((item.get("spec") or {}).get("table") or {}).get("branch")
    if not branch:
        raise Failure(
            f"{namespace}/{args.name} lands in main (no spec.table.branch): there is "
            "nothing to publish"
        )
    shown = (item.get("status") or {}).get("branch") or {}
    snapshot = args.snapshot or shown.get("snapshotId")
    if not snapshot:
        raise Failure(
            f"branch {branch} of {namespace}/{args.name} has no commit yet (its "
            "status shows no snapshotId): nothing to publish"
        )
    if not str(snapshot).isdigit():
        raise Failure(f"--snapshot takes a snapshot id (digits), not {snapshot}", 2)
    before = shown.get("lastPublish") or {}
    cluster.annotate(namespace, args.name, PUBLISH, str(snapshot))
    print(
        f"kafkaicebergtopic {namespace}/{args.name}: publish of snapshot {snapshot} of branch "
        f"{branch} asked for ({PUBLISH}={snapshot})"
    )
    if not args.wait:
        return 0
    if before.get("request") == str(snapshot):
        print("that snapshot was asked for before: " + _published(before))
        return 1 if before.get("error") else 0
    for _ in range(120):
        time.sleep(1)
        last = (
            (read_topic(cluster, namespace, args.name).get("status") or {}).get("branch") or {}
        ).get("lastPublish") or {}
        if last.get("request") == str(snapshot):
            print(_published(last))
            return 1 if last.get("error") else 0
    raise Failure(
        "the operator has not answered in 2 minutes: is it running? "
        f"(`{PROG} describe {args.name}`)"
    )


def _published(last: dict[str, Any]) -> str:
    if last.get("error"):
        return f"not published: {last['error']}"
    return f"published: main is at snapshot {last.get('snapshotId')}"
