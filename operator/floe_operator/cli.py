"""The `floe` command."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="floe", description=(
        "floe keeps Kafka topics landing in Apache Iceberg tables."))
    parser.add_argument("--version", action="version", version=f"floe {version('floe')}")
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
