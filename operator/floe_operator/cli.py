"""The `floe` command: ``floe status [NAME] [-n NAMESPACE | -A] [-o table|json]``."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from importlib.metadata import version


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="floe", description=(
        "floe keeps Kafka topics landing in Apache Iceberg tables."))
    parser.add_argument("--version", action="version", version=f"floe {version('floe')}")
    commands = parser.add_subparsers(dest="command")
    status = commands.add_parser(
        "status", help="show the KafkaIcebergTopics and how their tables are doing",
        description="Without NAME: one line per topic (Ready, phase, lag, freshness, snapshot, "
                    "schema version). With NAME: that topic's details, conditions included.")
    status.add_argument("name", nargs="?", help="one topic's details")
    status.add_argument("-n", "--namespace",
                        help="namespace (default: the kubeconfig context's, else default)")
    status.add_argument("-A", "--all-namespaces", action="store_true",
                        help="list the topics of every namespace")
    status.add_argument("-o", "--output", choices=("table", "json"), default="table")
    status.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, "
                                             "then ~/.kube/config)")
    status.add_argument("--context", help="kubeconfig context (default: the current one)")
    return parser


def status(args: argparse.Namespace) -> int:
    from kubernetes.client.rest import ApiException
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    from . import kube, report

    try:
        context_namespace = kube.connect(args.kubeconfig, args.context)
    except (ConfigException, OSError) as error:
        print(f"floe: cannot read the kubeconfig: {error}", file=sys.stderr)
        return 2
    namespace = args.namespace or context_namespace or "default"
    now = dt.datetime.now(dt.timezone.utc)
    try:
        if args.name:
            item = kube.get_topic(namespace, args.name)
            if item is None:
                print(f'floe: KafkaIcebergTopic "{args.name}" not found in namespace '
                      f'"{namespace}"', file=sys.stderr)
                return 1
            sys.stdout.write(json.dumps(item, indent=2) + "\n" if args.output == "json"
                             else report.details(item, now))
            return 0
        items = kube.list_topics(None if args.all_namespaces else namespace)
    except ApiException as error:
        print(f"floe: the API server refused: {error.status} {error.reason}", file=sys.stderr)
        return 1
    except (HTTPError, OSError) as error:  # connection refused, DNS, TLS
        print(f"floe: cannot reach the API server: {error}", file=sys.stderr)
        return 1
    if args.output == "json":
        rows = [report.summary_row(item, now) for item in items]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    elif not items:
        where = "any namespace" if args.all_namespaces else f'namespace "{namespace}"'
        print(f"No KafkaIcebergTopics in {where}.", file=sys.stderr)
    else:
        sys.stdout.write(report.summary(items, now, args.all_namespaces))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "status":
        return status(args)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
