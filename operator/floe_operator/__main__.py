"""``python -m floe_operator``: runs the operator for all namespaces (or FLOE_NAMESPACES)."""

from __future__ import annotations

import os
import sys

import kopf


def main() -> int:
    from . import handlers  # noqa: F401 - registers the handlers

    namespaces = [n for n in os.environ.get("FLOE_NAMESPACES", "").split(",") if n]
    kopf.run(clusterwide=not namespaces, namespaces=namespaces,
             liveness_endpoint=os.environ.get("FLOE_LIVENESS", "http://0.0.0.0:8080/healthz"),
             standalone=os.environ.get("FLOE_PEERING", "") == "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
