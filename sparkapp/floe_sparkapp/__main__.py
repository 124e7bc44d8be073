"""The entry point spark-submit runs:

- ``python -m floe_sparkapp run --config FILE``: the streaming job;
- ``python -m floe_sparkapp maintain --config FILE --action ACTION``: one maintenance action;
- ``python -m floe_sparkapp operate --config FILE --operation JSON``: one operation of a
  KafkaIcebergOperation (:mod:`.operations`);
- ``python -m floe_sparkapp pool --members DIR``: the streaming jobs of the topics whose configs
  are in DIR, each its own query in one driver (:mod:`.pool`).

Exit codes: 2 bad config, 3 data loss, 4 maintenance failed, 5 the table has another writer,
6 an operation refused.
The operator does not restart a job that exited 3 or 5: only the user can resolve those.
"""

from __future__ import annotations

import argparse
import sys
import time

from . import logs
from .config import ConfigError, load_config
from .exit_codes import (
    DATA_LOSS,
    INVALID_CONFIG,
    MAINTENANCE_FAILED,
    OPERATION_REFUSED,
    TABLE_IN_USE,
)
from .maintenance import ACTIONS


def main(argv: list[str] | None = None) -> int:
    entered = time.time()
    parser = argparse.ArgumentParser(
        prog="python -m floe_sparkapp", description="floe's Spark job: a Kafka topic into Iceberg."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the streaming job")
    run.add_argument("--config", required=True, help="job config (JSON)")
    run.add_argument(
        "--available-now",
        action="store_true",
        help="stop once caught up with the topic instead of running forever",
    )
    maintain = sub.add_parser("maintain", help="run one table maintenance action")
    maintain.add_argument("--config", required=True, help="job config (JSON)")
    maintain.add_argument("--action", required=True, choices=ACTIONS)
    operate = sub.add_parser("operate", help="run one operation (a KafkaIcebergOperation's)")
    operate.add_argument("--config", required=True, help="job config (JSON)")
    operate.add_argument("--operation", required=True, help="the operation (JSON)")
    pool = sub.add_parser("pool", help="run the streaming jobs of a pool's members")
    pool.add_argument("--members", required=True, help="directory of the members' job configs")
    pool.add_argument(
        "--refresh", type=float, default=10.0, help="seconds between two looks at the directory"
    )
    args = parser.parse_args(argv)
    logs.configure()  # FLOE_LOG_LEVEL, FLOE_LOG_FORMAT (the operator sets them from the spec)

    if args.command == "pool":
        from pathlib import Path

        from . import metrics
        from .pool import serve

        members = Path(args.members)
        if not members.is_dir():
            print(f"floe: {members} is not a directory of job configs", file=sys.stderr)
            return INVALID_CONFIG
        metrics.starting(f"pool {members.name}", entered)
        metrics.serve(f"pool {members.name}", [], entered)
        serve(members, args.refresh)
        return 0

    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"floe: {error}", file=sys.stderr)
        return INVALID_CONFIG

    if args.command == "maintain":
        from .maintenance import MaintenanceError
        from .maintenance import maintain as run_action

        failed = False
        for destination in config.destinations():  # the topic's table, then each route's
            try:
                run_action(destination, args.action)
            except MaintenanceError as error:
                print(f"floe: {error}", file=sys.stderr)
                failed = True
        return MAINTENANCE_FAILED if failed else 0

    if args.command == "operate":
        return _operate(config, args.operation)

    from . import metrics
    from .job import run as run_job
    from .kafka_offsets import DataLossError
    from .ledger import TableInUse

    metrics.starting(config.writer, entered)
    metrics.serve(config.writer, [d.table.identifier for d in config.destinations()], entered)

    try:
        run_job(config, available_now=args.available_now)
    except DataLossError as error:
        print(f"floe: {error}", file=sys.stderr)
        return DATA_LOSS
    except TableInUse as error:
        print(f"floe: {error}", file=sys.stderr)
        return TABLE_IN_USE
    return 0


def _operate(config: object, text: str) -> int:
    from pydantic import ValidationError

    from .contract import OperationRequest
    from .operations import OperationRefused, operate

    try:
        request = OperationRequest.model_validate_json(text)
    except ValidationError as error:
        print(f"floe: invalid operation: {error}", file=sys.stderr)
        return INVALID_CONFIG
    try:
        operate(config, request)  # type: ignore[arg-type]
    except OperationRefused as error:
        print(f"floe: {error}", file=sys.stderr)
        return OPERATION_REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(main())
