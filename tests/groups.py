"""The suite's groups, which pytest-xdist runs side by side (``--dist loadgroup``).

- ``node``: the tests marked ``node``, whose Spark drivers and executors run as pods on the
  stack's node (and the operators installed there with Helm); one at a time, in the namespaces
  spark-operator serves for tests, taken in turn by the one process that runs the group.
- ``local``: the tests that start a Spark JVM on this machine (the integration tests' job
  processes and the session-wide ``spark`` fixture); one at a time.
- ``free``: the tests that start no JVM (the unit tests, the operator's tests against the API
  server): xdist hands each to whichever worker is free.

Two markers order tests across the groups:

- ``alone(part, ...)``: the test needs parts of the stack to itself: ``kubernetes`` (an
  operator watching every namespace, the CRDs applied anew), ``kafka`` (the broker restarted),
  ``registry`` (the registry's next schema id); all three when it names none. It runs with no
  other test that uses those parts beside it: each part has a lock that every test using it
  holds shared and an ``alone`` test exclusively (:func:`part_held`). A test of the node or of
  the API server uses all three; a local Spark test Kafka and the registry only, so it goes on
  beside an operator installed cluster-wide.
- ``holds(name)``: the test holds a part of the stack that only one test may change at a time
  (``toxiproxy``: the fault proxies, whose toxics and switches are the stack's own).

``--group NAME`` runs one group alone; ``-n 0`` runs the whole suite serially, in one process.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

GROUPS = ("node", "local", "free")
PARTS = ("kafka", "kubernetes", "registry")
# Shared by the controller and its workers: the workers inherit it (pytest_configure).
RUN_DIRECTORY = "FLOE_TEST_RUN_DIRECTORY"


def group_of(item: pytest.Item) -> str:
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


def parts_used(item: pytest.Item) -> tuple[str, ...]:
    """The parts of the stack a test of the stack uses, for their locks."""
    return ("kafka", "registry") if group_of(item) == "local" else PARTS


def parts_alone(item: pytest.Item) -> tuple[str, ...]:
    """The parts a test needs to itself (its ``alone`` marker; none without one)."""
    mark = item.get_closest_marker("alone")
    if mark is None:
        return ()
    unknown = set(mark.args) - set(PARTS)
    assert not unknown, f"alone({', '.join(sorted(unknown))}): the parts are {PARTS}"
    return tuple(mark.args) or PARTS


@contextmanager
def part_held(directory: Path, part: str, exclusive: bool) -> Iterator[None]:
    """A readers-writer lock over one part of the stack, across the workers' processes
    (``flock``), held for a ``with`` block. A writer first takes the turnstile, which every
    reader passes through before it takes the lock, so no new test starts while an ``alone``
    test waits for the running ones to end. Taken in the order of :data:`PARTS`, the locks
    cannot deadlock."""
    with (
        (directory / f"{part}.turnstile").open("a") as turnstile,
        (directory / f"{part}.lock").open("a") as lock,
    ):  # closing a file releases its flock
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if exclusive:
            fcntl.flock(lock, fcntl.LOCK_EX)
        else:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(lock, fcntl.LOCK_SH)
        yield


def holds(item: pytest.Item) -> list[str]:
    """The parts of the stack a test holds (``holds`` markers), in a fixed order."""
    return sorted({name for mark in item.iter_markers("holds") for name in mark.args})


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` for a ``with`` block (the stack's start, once per run)."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
