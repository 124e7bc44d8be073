"""``python -m floe_operator``: runs the operator for all namespaces (or FLOE_NAMESPACES).

With FLOE_PEERING set, replicas share that KopfPeering object (ClusterKopfPeering when
cluster-wide): the replica with the highest priority acts, the others pause until it is gone.
"""

from __future__ import annotations

import logging
import os
import random
import sys

import kopf

from floe_sparkapp import logs


def main() -> int:
    from . import handlers, metrics, redact  # noqa: F401 - handlers registers itself
    from .settings import OperatorSettings

    logs.configure()  # FLOE_LOG_LEVEL, FLOE_LOG_FORMAT
    # The registry client logs every request at INFO, PyIceberg every table's FileIO: lines per
    # resource per refresh.
    for quiet in ("httpx", "httpx2", "pyiceberg.io"):
        logging.getLogger(quiet).setLevel(logging.WARNING)
    redact.install()
    settings = OperatorSettings()
    metrics.serve(settings.metrics_port)
    namespaces = [n for n in os.environ.get("FLOE_NAMESPACES", "").split(",") if n]
    priority = None
    if settings.peering:
        priority = settings.peering_priority or random.randint(1, 2**31 - 1)
        logging.getLogger("floe").info("peering %r with priority %d", settings.peering, priority)
    kopf.run(
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=os.environ.get("FLOE_LIVENESS", "http://0.0.0.0:8080/healthz"),
        standalone=not settings.peering,
        peering_name=settings.peering or None,
        priority=priority,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
