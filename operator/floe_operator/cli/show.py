"""The commands that show the topics: ``status`` (a line each, or one topic's details, and
``-w`` a line for every change), ``describe`` (its Events and its job's metrics too) and
``logs`` (its job's driver).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .base import PROG, Failure, read_topic, utc_now


def _dump(data: Any, output: str) -> str:
    if output == "yaml":
        import yaml

        return yaml.safe_dump(data, sort_keys=False)
    return json.dumps(data, indent=2) + "\n"


def status(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    from .. import report

    where = None if args.all_namespaces else namespace
    if args.name:
        item = read_topic(cluster, namespace, args.name)
        since = item["metadata"]["resourceVersion"]
        sys.stdout.write(
            _dump(item, args.output) if args.output != "table" else report.details(item, utc_now())
        )
    else:
        items, since = cluster.topics(where, args.selector)
        if args.output != "table":
            sys.stdout.write(_dump([report.summary_row(i, utc_now()) for i in items], args.output))
        elif items:
            sys.stdout.write(report.summary(items, utc_now(), args.all_namespaces))
        else:
            place = "any namespace" if args.all_namespaces else f'namespace "{namespace}"'
            print(f"No KafkaIcebergTopics in {place}.", file=sys.stderr)
    sys.stdout.flush()
    if args.watch:
        _watch(cluster, where, args, since)
    return 0


def _watch(cluster: Any, where: str | None, args: argparse.Namespace, since: str) -> None:
    """A line for every change of the listed topics (or the named one) after what was shown
    (``since``, its resourceVersion), as it happens."""
    from .. import report

    columns = (["NAMESPACE"] if args.all_namespaces else []) + report.SUMMARY_COLUMNS
    for kind, item in cluster.watch_topics(where, args.selector, since):
        if args.name and item["metadata"]["name"] != args.name:
            continue
        row = report.summary_row(item, utc_now())
        if kind == "DELETED":
            row["PHASE"] = "Deleted"
        if args.output == "table":
            line = report.table([row], columns).splitlines()[1]
        else:
            line = json.dumps(row) if args.output == "json" else _dump(row, "yaml").rstrip()
        print(line, flush=True)


def describe(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    from .. import report

    item = read_topic(cluster, namespace, args.name)
    now = utc_now()
    lines = [report.details(item, now).rstrip("\n"), "Events:"]
    events = cluster.events(namespace, args.name)[-15:]
    lines += (
        ["  " + line for line in report.events(events, now).splitlines()] if events else ["  none"]
    )
    lines.append("Job metrics:")
    pod = cluster.driver(item)
    if pod is None:
        lines.append("  no driver pod: the job is not running")
    else:
        try:
            text = cluster.job_metrics(namespace, pod)
        except Exception as error:  # noqa: BLE001 - the rest of the description stands
            lines.append(f"  could not read {pod}'s metrics: {str(error).splitlines()[0]}")
        else:
            lines += ["  " + line for line in report.job_metrics(text, now).splitlines()]
    print("\n".join(lines))
    return 0


def logs(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    item = read_topic(cluster, namespace, args.name)
    pod = cluster.driver(item)
    if pod is None:
        raise Failure(
            f"{namespace}/{args.name} has no driver pod: its job is not running "
            f"(`{PROG} describe {args.name}` says why)"
        )
    for line in cluster.logs(namespace, pod, follow=args.follow, tail=args.tail):
        print(line, flush=args.follow)
    return 0
