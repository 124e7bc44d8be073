"""``python -m floe_sparkapp run --config FILE``: the entry point spark-submit runs."""

from __future__ import annotations

import argparse
import logging
import sys

from .config import ConfigError, load_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m floe_sparkapp",
                                     description="floe's Spark job: a Kafka topic into Iceberg.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the streaming job")
    run.add_argument("--config", required=True, help="job config (JSON)")
    run.add_argument("--available-now", action="store_true",
                     help="stop once caught up with the topic instead of running forever")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"floe: {error}", file=sys.stderr)
        return 2

    from .job import DataLossError, run

    try:
        run(config, available_now=args.available_now)
    except DataLossError as error:
        print(f"floe: {error}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
