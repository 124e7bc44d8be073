"""The plugin's command line: its commands and their arguments."""

from __future__ import annotations

import argparse
from importlib.metadata import version

from .base import PROG

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


def argument_parser() -> argparse.ArgumentParser:
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
