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

The command line is read in :mod:`.arguments`; each command's work is in :mod:`.show`
(``status``, ``describe``, ``logs``), :mod:`.change` (``approve``, ``suspend``, ``resume``,
``restart``, ``publish``) or :mod:`.operations` (those that make a KafkaIcebergOperation), with
what they share in :mod:`.base`; :func:`main` runs the one asked for.
"""

from __future__ import annotations

import sys

from .arguments import RAW_REASONS, argument_parser
from .base import PROG, Failure
from .change import approve, publish, restart, resume, suspend
from .operations import backfill, repair, replay, rollback
from .show import describe, logs, status

__all__ = [
    "COMMANDS",
    "PROG",
    "RAW_REASONS",
    "Failure",
    "approve",
    "argument_parser",
    "backfill",
    "describe",
    "logs",
    "main",
    "publish",
    "repair",
    "replay",
    "restart",
    "resume",
    "rollback",
    "status",
    "suspend",
]


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    from ..client import Cluster

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
