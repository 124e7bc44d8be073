"""``python -m floe_operator``: runs the operator for all namespaces (or FLOE_NAMESPACES)."""

from __future__ import annotations

import os
import sys

import kopf


def main() -> int:
    import logging

    from . import handlers  # noqa: F401 - registers the handlers

    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")

    namespaces = [n for n in os.environ.get("FLOE_NAMESPACES", "").split(",") if n]
    kopf.run(clusterwide=not namespaces, namespaces=namespaces,
             liveness_endpoint=os.environ.get("FLOE_LIVENESS", "http://0.0.0.0:8080/healthz"),
             standalone=os.environ.get("FLOE_PEERING", "") == "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
