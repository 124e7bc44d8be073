"""The driver's time in a micro-batch by step: each step's own seconds (a step inside another
is not counted in the outer one), logged with the batch (``steps`` on its ``floe.batch``
line): what a batch's fixed cost is made of, for the benchmarks and for anyone reading a
job's log.  Per thread: each query's batches run in a thread of their own."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_local = threading.local()


def _state() -> tuple[dict[str, float], list[list[Any]]]:
    if not hasattr(_local, "taken"):
        _local.taken, _local.open = {}, []
    return _local.taken, _local.open


@contextmanager
def step(name: str) -> Iterator[None]:
    """Counts the time until the block ends as ``name``'s, but the time of steps inside it."""
    taken, opened = _state()
    now = time.monotonic()
    if opened:  # the outer step pauses
        outer = opened[-1]
        taken[outer[0]] = taken.get(outer[0], 0.0) + now - outer[1]
    opened.append([name, now])
    try:
        yield
    finally:
        now = time.monotonic()
        _, started = opened.pop()
        taken[name] = taken.get(name, 0.0) + now - started
        if opened:  # the outer step goes on
            opened[-1][1] = now


def taken() -> dict[str, float]:
    """The steps' seconds since the last call (to the millisecond, the longest first); starts
    counting anew."""
    found, _ = _state()
    result = {
        name: round(seconds, 3)
        for name, seconds in sorted(found.items(), key=lambda item: -item[1])
    }
    found.clear()
    return result
