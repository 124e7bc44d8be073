"""``kubectl floe`` (and ``floe``): the daily operations on KafkaIcebergTopics.

    kubectl floe status [NAME] [-n NS | -A] [-l SELECTOR] [-o table|json|yaml] [-w]
    kubectl floe describe NAME      status, conditions, recent Events and the job's metrics
    kubectl floe approve NAME       a breaking schema change, shown first (--yes: no question)
    kubectl floe suspend NAME / resume NAME / restart NAME
    kubectl floe logs NAME [-f] [--tail N]   the job's driver
    kubectl floe rollback NAME (--to SNAPSHOT | --before TIME) [-w]   the table, to a snapshot
    kubectl floe repair NAME [--reason R]... [--dry-run] [-w]   decode the raw rows again
    kubectl floe backfill NAME [--from-time T] [--to-time T] [--partition P]... [-w]
    kubectl floe replay NAME --topic TOPIC [--snapshot ID] [-w]   the table, back to Kafka

It needs the Kubernetes client alone (``pip install floe``); kubectl finds it as
``kubectl-floe`` on PATH.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from importlib.metadata import version
from typing import Any

PROG = "kubectl floe"
# Why a row is kept raw (floe_sparkapp.contract.RAW_REASONS: the plugin installs without the
# job's package; a unit test keeps them the same).
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "floe keeps Kafka topics landing in Apache Iceberg tables: the daily operations on "
            "its KafkaIcebergTopics."
        ),
    )
    parser.add_argument("--version", action="version", version=f"floe {version('floe')}")
    commands = parser.add_subparsers(dest="command")

    def command(name: str, help: str, named: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        if named:
            sub.add_argument("name", help="the KafkaIcebergTopic")
        sub.add_argument(
            "-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)"
        )
        sub.add_argument(
            "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)"
        )
        sub.add_argument("--context", help="kubeconfig context (default: the current one)")
        return sub

    def operation(name: str, help: str) -> argparse.ArgumentParser:
        """A command that makes a KafkaIcebergOperation: ``--table``, ``-w``."""
        sub = command(name, f"{help} (a KafkaIcebergOperation)")
        sub.add_argument("--table", help="a routed topic's other table")
        sub.add_argument(
            "-w", "--wait", action="store_true", help="wait until it ends, saying how it goes"
        )
        return sub

    status = command(
        "status",
        "the KafkaIcebergTopics and how their tables are doing: one "
        "line each, or one topic's details",
        named=False,
    )
    status.add_argument("name", nargs="?", help="one topic's details")
    status.add_argument(
        "-A", "--all-namespaces", action="store_true", help="the topics of every namespace"
    )
    status.add_argument("-l", "--selector", help="only topics with these labels (k=v,...)")
    status.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    status.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="after the list, a line for every change (until interrupted)",
    )
    command("describe", "one topic's status, conditions, recent Events and its job's metrics")
    approve = command(
        "approve",
        "approve the breaking schema change a topic waits for: its "
        "registry version's records then decode into the table",
    )
    approve.add_argument("-y", "--yes", action="store_true", help="do not ask")
    command(
        "suspend",
        "stop the topic's job (and its maintenance) until resumed; nothing is "
        "lost: the job goes on from the table's offsets",
    )
    command("resume", "start a suspended topic's job again")
    command("restart", "restart the topic's job (it goes on from the table's offsets)")
    publish = command(
        "publish",
        "publish a topic's table.branch: main moves to the branch's "
        "head as the status shows it (or to --snapshot), so main's "
        "readers see what was audited there",
    )
    publish.add_argument("--snapshot", help="a snapshot id of the branch (default: its head)")
    publish.add_argument("-w", "--wait", action="store_true", help="wait for the operator's answer")
    rollback = operation(
        "rollback",
        "roll the topic's table back to a snapshot: the records after it land again, once",
    )
    target = rollback.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--to", dest="snapshot", metavar="SNAPSHOT", help="a snapshot id of main's history"
    )
    target.add_argument(
        "--before",
        metavar="TIME",
        help="the newest snapshot committed at or before this time (RFC 3339)",
    )
    repair = operation(
        "repair",
        "decode the rows the topic's table kept raw again, once "
        "their cause is fixed; each record stays one row",
    )
    repair.add_argument(
        "--reason",
        dest="reasons",
        action="append",
        choices=RAW_REASONS,
        help="only rows kept raw for this reason (repeatable; default: any)",
    )
    repair.add_argument(
        "--dry-run",
        action="store_true",
        help="count what would be decoded, and why the rest would not; change nothing",
    )
    backfill = operation(
        "backfill",
        "land a range of the topic in its table beside the job "
        "(default: everything Kafka has below the table's "
        "offsets); each record once",
    )
    backfill.add_argument(
        "--from-time", metavar="TIME", help="from the first record at or after this time (RFC 3339)"
    )
    backfill.add_argument(
        "--to-time", metavar="TIME", help="below the first record at or after this time (RFC 3339)"
    )
    backfill.add_argument(
        "--partition",
        dest="partitions",
        action="append",
        type=int,
        help="only this Kafka partition (repeatable; default: all)",
    )
    replay = operation(
        "replay",
        "produce the topic's table to another topic, each row once, "
        "each partition's in offset order",
    )
    replay.add_argument(
        "--topic",
        required=True,
        help="the topic to produce to (it must exist, with enough partitions)",
    )
    replay.add_argument("--snapshot", help="the table as of this snapshot (default: now)")
    logs = command("logs", "the log of the topic's job (its Spark driver)")
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("--tail", type=int, help="the last lines only")
    return parser


class Failure(Exception):
    """What the user is told, and the exit code."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    from .client import Cluster

    try:
        try:
            cluster = Cluster(args.kubeconfig, args.context)
        except (ConfigException, OSError) as error:
            raise Failure(f"cannot read the kubeconfig: {error}", 2) from error
        namespace = args.namespace or cluster.namespace or "default"
        return COMMANDS[args.command](cluster, namespace, args)
    except Failure as failure:
        print(f"floe: {failure}", file=sys.stderr)
        return failure.code
    except ApiException as error:
        print(f"floe: the API server refused: {error.status} {error.reason}", file=sys.stderr)
        return 1
    except (HTTPError, OSError) as error:  # connection refused, DNS, TLS
        print(f"floe: cannot reach the API server: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _topic(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    item: dict[str, Any] | None = cluster.topic(namespace, name)
    if item is None:
        raise Failure(f'KafkaIcebergTopic "{name}" not found in namespace "{namespace}"')
    return item


def _dump(data: Any, output: str) -> str:
    if output == "yaml":
        import yaml

        return yaml.safe_dump(data, sort_keys=False)
    return json.dumps(data, indent=2) + "\n"


# --- status, describe ------------------------------------------------------------------------


def status(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    from . import report

    where = None if args.all_namespaces else namespace
    if args.name:
        item = _topic(cluster, namespace, args.name)
        since = item["metadata"]["resourceVersion"]
        sys.stdout.write(
            _dump(item, args.output) if args.output != "table" else report.details(item, _now())
        )
    else:
        items, since = cluster.topics(where, args.selector)
        if args.output != "table":
            sys.stdout.write(_dump([report.summary_row(i, _now()) for i in items], args.output))
        elif items:
            sys.stdout.write(report.summary(items, _now(), args.all_namespaces))
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
    from . import report

    columns = (["NAMESPACE"] if args.all_namespaces else []) + report.SUMMARY_COLUMNS
    for kind, item in cluster.watch_topics(where, args.selector, since):
        if args.name and item["metadata"]["name"] != args.name:
            continue
        row = report.summary_row(item, _now())
        if kind == "DELETED":
            row["PHASE"] = "Deleted"
        if args.output == "table":
            line = report.table([row], columns).splitlines()[1]
        else:
            line = json.dumps(row) if args.output == "json" else _dump(row, "yaml").rstrip()
        print(line, flush=True)


def describe(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    from . import report

    item = _topic(cluster, namespace, args.name)
    now = _now()
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


# --- the operations ---------------------------------------------------------------------------


def approve(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    from .names import APPROVAL

    item = _topic(cluster, namespace, args.name)
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
    item = _topic(cluster, namespace, name)
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
    from .names import RESTART

    item = _topic(cluster, namespace, args.name)
    if (item.get("spec") or {}).get("suspend"):
        raise Failure(
            f"{namespace}/{args.name} is suspended: `{PROG} resume {args.name}` starts its job"
        )
    stamp = _now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster.annotate(namespace, args.name, RESTART, stamp)
    print(f"kafkaicebergtopic {namespace}/{args.name}: restart asked for ({RESTART}={stamp})")
    return 0


def publish(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    from .names import PUBLISH

    item = _topic(cluster, namespace, args.name)
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
            (_topic(cluster, namespace, args.name).get("status") or {}).get("branch") or {}
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


def logs(cluster: Any, namespace: str, args: argparse.Namespace) -> int:
    item = _topic(cluster, namespace, args.name)
    pod = cluster.driver(item)
    if pod is None:
        raise Failure(
            f"{namespace}/{args.name} has no driver pod: its job is not running "
            f"(`{PROG} describe {args.name}` says why)"
        )
    for line in cluster.logs(namespace, pod, follow=args.follow, tail=args.tail):
        print(line, flush=args.follow)
    return 0


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
    from .names import GROUP, OPERATION_KIND, VERSION

    _topic(cluster, namespace, args.name)
    if args.table:
        section = {**section, "table": args.table}
    name = f"{args.name[:200]}-{kind.lower()}-{_now().strftime('%Y%m%d%H%M%S')}"
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


COMMANDS = {
    "status": status,
    "describe": describe,
    "approve": approve,
    "suspend": suspend,
    "resume": resume,
    "restart": restart,
    "logs": logs,
    "rollback": rollback,
    "repair": repair,
    "backfill": backfill,
    "replay": replay,
    "publish": publish,
}


if __name__ == "__main__":
    sys.exit(main())
