"""What earlier runs left on the stack's broker, cleared before a run's first test.

The stack keeps its data from start to start (a restarted stack still holds its records), and
every test makes topics of its own: after a day of runs the broker held 2,600 topics and 5,800
partitions, which its controller, log manager and metadata loader walk over and over (about
2.6 CPU seconds a minute while idle).  The run that brings the stack up for the tests deletes
the topics of earlier tests and benchmarks first; the broker's own topics (``__...``), the
registry's and the demo's topic stay.
"""

from __future__ import annotations

import time

KEPT = ("orders",)  # hack/demo.py's topic: `make demo` produces it once and reads it again
BATCH = 500


def topics_to_clear(names: list[str]) -> list[str]:
    return sorted(n for n in names if not n.startswith("_") and n not in KEPT)


def clear_topics(bootstrap: str, timeout: float = 120) -> int:
    """Deletes the leftover topics, waiting until the broker has let go of them; returns how
    many it deleted."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    doomed = topics_to_clear(list(admin.list_topics(timeout=30).topics))
    for start in range(0, len(doomed), BATCH):
        futures = admin.delete_topics(doomed[start : start + BATCH], operation_timeout=60)
        for future in futures.values():
            try:
                future.result(timeout=90)
            except Exception as exc:  # gone already is as good as deleted
                if "UNKNOWN_TOPIC_OR_PART" not in str(exc):
                    raise
    deadline = time.monotonic() + timeout
    while set(doomed) & set(admin.list_topics(timeout=30).topics):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the broker still lists topics deleted {timeout:.0f} s ago")
        time.sleep(0.5)
    return len(doomed)
