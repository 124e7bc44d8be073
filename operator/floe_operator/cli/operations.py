"""The commands that make a KafkaIcebergOperation on a topic: ``rollback``, ``repair``,
``backfill`` and ``replay``, each waiting for it to end with ``-w``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from .base import read_topic, utc_now


def rollback(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    target = {"snapshotId": args.snapshot} if args.snapshot else {"before": args.before}
    return _operation(cluster, namespace, args, "Rollback", target)


def repair(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    section: dict[str, Any] = {"dryRun": True} if args.dry_run else {}
    if args.reasons:
        section["reasons"] = sorted(set(args.reasons))
    return _operation(cluster, namespace, args, "Repair", section)


def backfill(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    section: dict[str, Any] = {}
    if args.from_time:
        section["fromTime"] = args.from_time
    if args.to_time:
        section["toTime"] = args.to_time
    if args.partitions:
        section["partitions"] = sorted(set(args.partitions))
    return _operation(cluster, namespace, args, "Backfill", section)


def replay(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    section: dict[str, Any] = {"topic": args.topic}
    if args.snapshot:
        section["snapshotId"] = args.snapshot
    return _operation(cluster, namespace, args, "Replay", section)


def _operation(
    cluster: Any, namespace: str, args: argparse.Namespace, kind: str, section: dict[str, Any]
) -> int:
    """Makes a KafkaIcebergOperation of type ``kind`` on the topic, named after it, the type
    and the time; with ``--wait``, prints its phase and message at each change until it
    ends."""
    from ..names import GROUP, OPERATION_KIND, VERSION

    read_topic(cluster, namespace, args.name)
    if args.table:
        section = {**section, "table": args.table}
    name = f"{args.name[:200]}-{kind.lower()}-{utc_now().strftime('%Y%m%d%H%M%S')}"
    cluster.create_operation(
        namespace,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": OPERATION_KIND,
            "metadata": {"name": name},
            "spec": {"topic": args.name, "type": kind, kind.lower(): section},
        },
    )
    print(f"kafkaicebergoperation {namespace}/{name} created")
    if not args.wait:
        return 0
    said = None
    while True:
        shown = cluster.operation(namespace, name).get("status") or {}
        line = f"{shown.get('phase', 'Pending')}: {shown.get('message', 'waiting for floe')}"
        if line != said:
            print(line, flush=True)
            said = line
        if shown.get("phase") in ("Succeeded", "Failed"):
            return 0 if shown["phase"] == "Succeeded" else 1
        time.sleep(2)
