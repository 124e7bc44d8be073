"""The suite's groups, which pytest-xdist runs side by side (``--dist loadgroup``).

- ``node``: the tests marked ``node``, whose Spark drivers and executors run as pods on the
  stack's node; one at a time, in the namespaces spark-operator serves for tests.
- ``local``: the tests that start a Spark JVM on this machine (the integration tests' job
  processes and the session-wide ``spark`` fixture); one at a time.
- ``alone``: the tests marked ``alone``, which need the stack to themselves (an operator watching
  every namespace, a component restarted, cluster-wide objects installed). They run one at a
  time with no other test of the stack beside them: each takes the stack's lock exclusively,
  where every other test of the stack holds it shared (:class:`StackLock`).
- no group: the tests that start no JVM (the unit tests, the operator's tests against the API
  server); xdist hands them to whichever worker is free.

``--group NAME`` runs one group alone (``free`` for the tests of no group); ``-n 0`` runs the
whole suite serially, in one process.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

import pytest

GROUPS = ("node", "local", "alone", "free")
# Shared by the controller and its workers: the workers inherit it (pytest_configure).
RUN_DIRECTORY = "FLOE_TEST_RUN_DIRECTORY"


def group_of(item: pytest.Item) -> str:
    if item.get_closest_marker("alone"):
        return "alone"
    if item.get_closest_marker("node"):
        return "node"
    if item.get_closest_marker("integration") or "spark" in getattr(item, "fixturenames", ()):
        return "local"
    return "free"


def worker_id(config: pytest.Config) -> str:
    return getattr(config, "workerinput", {}).get("workerid", "main")


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def run_directory() -> Path:
    """A directory of this run, shared by the controller and its workers."""
    path = os.environ.get(RUN_DIRECTORY)
    if not path:
        path = os.environ[RUN_DIRECTORY] = tempfile.mkdtemp(prefix="floe-tests-")
    return Path(path)


class StackLock:
    """A readers-writer lock over the stack, across the workers' processes (``flock``).

    A test of the stack holds it shared; an ``alone`` test exclusively. A writer first takes the
    turnstile, which every reader passes through before it takes the lock, so no new test starts
    while an ``alone`` test waits for the running ones to end."""

    def __init__(self, directory: Path) -> None:
        self.turnstile = directory / "stack.turnstile"
        self.lock = directory / "stack.lock"

    def hold(self, exclusive: bool):
        turnstile = self.turnstile.open("a")
        lock = self.lock.open("a")
        try:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            if exclusive:
                fcntl.flock(lock, fcntl.LOCK_EX)
            else:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
                fcntl.flock(lock, fcntl.LOCK_SH)
        except BaseException:
            turnstile.close()
            lock.close()
            raise

        def release() -> None:
            lock.close()  # closing the file releases its flock
            turnstile.close()

        return release


def file_lock(path: Path):
    """An exclusive lock on ``path`` for a ``with`` block (the stack's start, once per run)."""
    from contextlib import contextmanager

    @contextmanager
    def held():
        with path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    return held()
