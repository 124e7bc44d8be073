"""A pool: several topics landed by one driver, each its own streaming query.

``python -m floe_sparkapp pool --members DIR`` runs the members whose job configs are in DIR,
one file each (``<member>.json``, what ``run --config`` takes: a ConfigMap mounted as a
directory has one per key). Each member runs as a lone job runs its topic (:func:`.job.run`:
its own checkpoint, ledger, tables, dead-letter topic, commit interval and restarts), so what
exactly once holds for one topic holds for each; they share the driver's session and its
executors, each in a scheduler pool of its own (the session schedules FAIR), so that one
member's backlog does not hold the others' batches behind it.

DIR is read again every ``--refresh`` seconds (a ConfigMap volume's files change in place):

- a member not running yet starts; one whose file is gone stops; one whose file changed stops
  and starts again with its new config: the others' queries run on untouched;
- a file that is no valid config is reported (``invalid``), and the member does not run until
  its file changes;
- a member that fails starts again after a backoff (5 s, doubling, at most 5 minutes), and is
  marked ``failed`` after :data:`FAILURES` failures in a row, or at once on DataLoss or a table
  another writer holds (what only the user resolves), until its file changes; the others go on.

Each change of a member's state is a ``floe.pool.member`` log line; SIGTERM stops every member
and returns.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import ConfigError, JobConfig, load_config
from .job import Stop, StopOnSigterm, run
from .kafka_offsets import DataLossError
from .ledger import TableInUse

log = logging.getLogger("floe.pool")

FAILURES = 5  # in a row, before a member is marked failed
BACKOFF_SECONDS = 5.0
BACKOFF_MAX_SECONDS = 300.0
HEALTHY_SECONDS = 300.0  # a member that ran this long before failing starts its count anew
STOP_WAIT_SECONDS = 120.0
STATES = ("running", "backoff", "failed", "invalid", "stopped")


@dataclass
class Member:
    """One topic of the pool, as its file last had it."""

    name: str
    text: str
    config: JobConfig | None = None
    state: str = "stopped"
    failures: int = 0
    error: str | None = None
    stop: Stop = field(default_factory=Stop)
    thread: threading.Thread | None = None

    def set(self, state: str, error: BaseException | str | None = None, **more: Any) -> None:
        """Notes the member's state, logged when it changes (or brings a new error)."""
        assert state in STATES, state
        text = None if error is None else str(error).strip().splitlines()[0][:500]
        if (state, text) == (self.state, self.error) and not more:
            return
        self.state, self.error = state, text
        line: dict[str, Any] = {
            "event": "floe.pool.member",
            "member": self.name,
            "writer": self.config.writer if self.config is not None else None,
            "state": state,
            "failures": self.failures,
            **more,
        }
        if text is not None:
            line["error"] = text
        (log.warning if state in ("failed", "invalid", "backoff") else log.info)(json.dumps(line))


def backoff(failures: int) -> float:
    """The seconds before a member that failed ``failures`` times in a row starts again."""
    return float(min(BACKOFF_MAX_SECONDS, BACKOFF_SECONDS * 2 ** max(0, failures - 1)))


class Pool:
    """The members of DIR, each run in a thread of its own on ``spark``'s session."""

    def __init__(self, directory: Path, spark: Any = None) -> None:
        self.directory = directory
        self.spark = spark
        self.members: dict[str, Member] = {}

    def files(self) -> dict[str, str]:
        """Each member's config file as it is now (its name without ``.json``)."""
        found = {}
        for path in sorted(self.directory.glob("*.json")):  # (not a ConfigMap's ..data)
            try:
                found[path.stem] = path.read_text()
            except FileNotFoundError:  # removed while listed
                continue
        return found

    def refresh(self) -> None:
        """Starts, stops and starts again the members as their files now say."""
        files = self.files()
        for name in sorted(set(self.members) - set(files)):
            self._stop(self.members.pop(name))
        for name, text in files.items():
            member = self.members.get(name)
            if member is not None and member.text == text:
                continue
            if member is not None:
                log.info("member %s changed: its query starts again", name)
                self._stop(member)
            self.members[name] = self._start(name, text)

    def stop(self) -> None:
        """Stops every member's query (each batch it interrupts is simply not committed)."""
        for member in self.members.values():
            member.stop.request()
        for member in self.members.values():
            self._stop(member)

    def _start(self, name: str, text: str) -> Member:
        member = Member(name, text)
        try:
            member.config = load_config(self.directory / f"{name}.json")
        except ConfigError as error:
            member.set("invalid", error)
            return member
        if self.spark is None:
            from .session import build_session

            self.spark = build_session(
                member.config, f"floe pool {self.directory.name}", {"spark.scheduler.mode": "FAIR"}
            )
        member.thread = threading.Thread(
            target=self._run, args=(member,), name=f"floe-member-{name}", daemon=True
        )
        member.thread.start()
        return member

    def _stop(self, member: Member) -> None:
        member.stop.request()
        if member.thread is not None:
            member.thread.join(STOP_WAIT_SECONDS)
            if member.thread.is_alive():
                log.warning("member %s did not stop within %.0f s", member.name, STOP_WAIT_SECONDS)
        if member.state not in ("failed", "invalid"):
            member.set("stopped")

    def _run(self, member: Member) -> None:
        """A member's thread: its query run, and started again after a failure."""
        assert member.config is not None
        # The query's thread takes the local properties of the thread that starts it.
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", member.name)
        while not member.stop.signalled:
            began = time.monotonic()
            member.set("running")
            try:
                run(member.config, self.spark, stop=member.stop)
                if not member.stop.wait(0):  # a query that ended by itself
                    member.set("stopped")
                return
            except (DataLossError, TableInUse) as error:
                member.failures += 1
                member.set("failed", error)
                return
            except Exception as error:  # noqa: BLE001 - the member's, not the pool's
                if member.stop.wait(0):  # (stopped while failing)
                    return
                if time.monotonic() - began >= HEALTHY_SECONDS:
                    member.failures = 0
                member.failures += 1
                if member.failures >= FAILURES:
                    member.set("failed", error)
                    return
                delay = backoff(member.failures)
                member.set("backoff", error, retry_seconds=delay)
                if member.stop.wait(delay):
                    return


def serve(directory: Path, refresh: float = 10.0, spark: Any = None) -> Pool:
    """Runs the pool of ``directory`` until SIGTERM; returns it stopped."""
    terminated = StopOnSigterm()
    pool = Pool(directory, spark)
    pool.refresh()
    while not terminated.wait(refresh):
        pool.refresh()
    log.info("stopped by %s: stopping %d member(s)", terminated.by, len(pool.members))
    pool.stop()
    return pool
