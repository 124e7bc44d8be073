"""Command line of the local stack: up, down, status, env."""

from __future__ import annotations

import argparse
import shlex
import sys

from . import connection_env, down, health, load_state, paths, provision_all, up
from .procs import ComponentError
from .provision import ProvisionError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hack.stack", description="The local stack of real components for floe."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "provision",
        help="download and build what is missing, images included "
        "(starts only containerd and dockerd, which the image builds need)",
    )
    sub.add_parser("up", help="provision (first time) and start every component")
    sub.add_parser("down", help="stop every component (data is kept)")
    sub.add_parser("status", help="show each component's health")
    sub.add_parser("env", help="print the connection settings as shell exports")
    args = parser.parse_args(argv)

    try:
        if args.command == "provision":
            provision_all()
            return 0
        if args.command == "up":
            state = up()
            lists = {"FLOE_SPARK_JARS": ",", "FLOE_SPARK_CLASSPATH": ":"}  # shown as counts
            for key, value in connection_env(state).items():
                if key in lists:
                    print(f"{key}=<{len(value.split(lists[key]))} jars>")
                elif key != "PATH":
                    print(f"{key}={value}")
            return 0
        if args.command == "down":
            down()
            return 0
        state = load_state()
        if args.command == "status":
            if state is None:
                print("the stack has never been started here (python -m hack.stack up)")
                return 1
            result = health(state)
            for name, ok in result.items():
                print(
                    f"{name:<26} {'healthy' if ok else 'DOWN':<8} "
                    f"log: {paths.LOGS / (name + '.log')}"
                )
            return 0 if all(result.values()) else 1
        if state is None:
            print("the stack is not up: run `python -m hack.stack up` first", file=sys.stderr)
            return 1
        for key, value in connection_env(state).items():
            print(f"export {key}={shlex.quote(value)}")
        return 0
    except (ComponentError, ProvisionError) as error:
        print(f"[stack] {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
