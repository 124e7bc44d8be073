"""What the plugin's commands share: its name, the failure a user is told of, the time, and
the topic read.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

PROG = "kubectl floe"


class Failure(Exception):
    """What the user is told, and the exit code."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def read_topic(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    item: dict[str, Any] | None = cluster.topic(namespace, name)
    if item is None:
        raise Failure(f'KafkaIcebergTopic "{name}" not found in namespace "{namespace}"')
    return item
