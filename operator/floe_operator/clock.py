"""The time now, and the API server's timestamps (RFC 3339 in UTC, whole seconds)."""

from __future__ import annotations

import datetime as dt
import time

TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"


def now_ms() -> int:
    return int(time.time() * 1000)


def iso(epoch_seconds: float) -> str:
    return dt.datetime.fromtimestamp(epoch_seconds, dt.timezone.utc).strftime(TIMESTAMP)


def epoch(timestamp: str) -> float:
    """An API server timestamp as seconds since the epoch."""
    return dt.datetime.strptime(timestamp, TIMESTAMP).replace(tzinfo=dt.timezone.utc).timestamp()
