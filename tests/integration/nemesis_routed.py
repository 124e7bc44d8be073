"""The nemesis's routed topic (``--mode routed``): three tables of one topic, the routing changed
under the job, and operations beside it.

The records' ``quantity`` routes them: 0-32 to the ``_a`` table, 33-65 to ``_b``, the rest (and
every record that cannot be decoded) to the topic's own table.  The job starts at ``latest``
on a topic that already has history, and records are produced once it has (its first start
commits where it starts); beside it, Backfills of each table bring the history in (up to the
job's first start, ``toTime``), a Repair goes over the own table's raw rows and maintenance
(compaction, a manifest rewrite, every table's) runs between them, each started again until
it succeeds (as the operator's attempts and the CronJobs'); once they have, maintenance goes
on in turn until the run ends.  Among the faults, a routing change: the job's config
rewritten (route ``_b`` removed, or the two routes' order swapped, or back to both) and its
driver killed, as the operator replaces a job whose spec changed.  The checker then asks that
each record be one row in all three tables together, in a table its quantity routes it to
under some routing the run had (``_a``'s records always in ``_a``; ``_b``'s in ``_b`` or,
while the route was gone, the own table), and that each table's offsets be Kafka's end
offsets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from floe_sparkapp.config import JobConfig, parse_config
from floe_sparkapp.ledger import last_commit

from .jobkit import load_table

# Routings the run moves between; the first is where it starts and ends.
ROUTINGS = ("ab", "a", "ba")
A_VALUES = [str(q) for q in range(33)]
B_VALUES = [str(q) for q in range(33, 66)]


def routed(data: dict[str, Any], routing: str) -> dict[str, Any]:
    """A job config (as JSON) with the routes of ``routing`` (``ab``, ``a``, ``ba``)."""
    stem = data["table"]["identifier"]
    routes = {
        "a": {"field": "quantity", "values": A_VALUES, "table": {"identifier": f"{stem}_a"}},
        "b": {"field": "quantity", "values": B_VALUES, "table": {"identifier": f"{stem}_b"}},
    }
    return {**data, "routes": [routes[name] for name in routing]}


def write_routing(config_file: Path, routing: str) -> None:
    """Rewrites the job's config with ``routing``, atomically (the supervisor may start the
    job at any moment)."""
    data = routed(json.loads(config_file.read_text()), routing)
    parse_config(data)  # a routing the job refuses is the nemesis's own bug
    part = config_file.with_suffix(".next")
    part.write_text(json.dumps(data))
    os.replace(part, config_file)


def tables(config: JobConfig) -> list[str]:
    stem = config.table.identifier
    return [stem, f"{stem}_a", f"{stem}_b"]


def expected_tables(config: JobConfig, quantity: int | None, routings: set[str]) -> set[str]:
    """The tables a record of ``quantity`` may be in under the routings the run had (None: a
    record that cannot be decoded, the own table's)."""
    own, a, b = tables(config)
    if quantity is None or quantity >= 66:
        return {own}
    if quantity < 33:
        return {a}
    return {b} | ({own} if routings - {"ab", "ba"} else set())


MAINTENANCE = ("compaction", "rewrite-manifests", "expire-snapshots", "remove-orphans")


class Operations:
    """Backfills of each table, a Repair of the own table and maintenance actions, run beside
    the job as their own processes (``python -m floe_sparkapp operate`` and ``maintain``) with
    the job's config as it is when each starts: each started again until it succeeds, then
    maintenance in turn.  A Backfill of ``_b`` while its route is gone is refused (not one of
    the topic's tables) and waits for it to come back."""

    def __init__(
        self,
        config_file: Path,
        env: dict[str, str],
        log_file: Path,
        config: JobConfig,
        history_end: int,
    ):
        """``history_end``: when the job first started (epoch seconds), the end of what the
        backfills land."""
        self.config_file, self.env, self.history_end = config_file, env, history_end
        self.log = log_file.open("a")
        own, a, b = tables(config)
        self.pending = [
            ("Backfill", own),
            ("compaction", own),
            ("Backfill", a),
            ("Repair", own),
            ("Backfill", b),
            ("rewrite-manifests", own),
        ]
        self.done: Counter = Counter()
        self.attempts: Counter = Counter()
        self.stopping = threading.Event()
        self.process: subprocess.Popen | None = None
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _request(self, kind: str, table: str, attempt: int) -> str:
        uid = f"{kind.lower()}-{table.rsplit('.', 1)[-1]}"
        section: dict[str, Any] = {"table": table}
        if kind == "Backfill":
            section["recordsPerCommit"] = 50
            section["toTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.history_end))
        return json.dumps(
            {"uid": uid, "name": f"{uid}-{attempt}", "type": kind, kind.lower(): section}
        )

    def _command(self, kind: str, table: str) -> list[str]:
        base = [sys.executable, "-m", "floe_sparkapp"]
        if kind in MAINTENANCE:  # every table of the topic, as the CronJob's
            return [*base, "maintain", "--config", str(self.config_file), "--action", kind]
        return [
            *base,
            "operate",
            "--config",
            str(self.config_file),
            "--operation",
            self._request(kind, table, self.attempts[f"{kind}:{table}"]),
        ]

    def _run(self, kind: str, table: str) -> bool:
        self.attempts[f"{kind}:{table}"] += 1
        self.process = subprocess.Popen(
            self._command(kind, table),
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self.process.wait() == 0

    def _loop(self) -> None:
        while self.pending and not self.stopping.is_set():
            kind, table = self.pending[0]
            if self._run(kind, table):
                self.done[f"{kind}:{table}"] += 1
                self.pending.pop(0)
            else:  # tried again later; the others meanwhile
                self.pending.append(self.pending.pop(0))
                self.stopping.wait(3)
        turn = 0
        while not self.stopping.wait(10):  # then maintenance in turn until the run ends
            kind = MAINTENANCE[turn % len(MAINTENANCE)]
            if self._run(kind, "*"):
                self.done[f"{kind}:*"] += 1
            turn += 1

    def start(self) -> None:
        self.thread.start()

    def finish(self, seconds: float) -> list[str]:
        """Waits up to ``seconds`` for the pending operations, stops maintenance (a killed
        action leaves files no snapshot refers to, as a killed CronJob's would); returns the
        operations left."""
        deadline = time.monotonic() + seconds
        while self.pending and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(1)
        self.stopping.set()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        self.thread.join(60)
        self.log.close()
        return [f"{kind} of {table}" for kind, table in self.pending]


def check(
    config: JobConfig,
    records: dict[tuple[int, int], Any],
    ends: dict[int, int],
    routings: set[str],
    quantity_of: Callable[[bytes, bytes], int | None],
    violations: list[str],
) -> list[dict[str, Any]]:
    """The routed invariant (module doc); returns every table's rows together."""
    everything: list[dict[str, Any]] = []
    where: dict[tuple[int, int], list[str]] = {}
    topic = config.kafka.topic
    for destination in config.destinations():
        name = destination.table.identifier
        table = load_table(destination)
        offsets = last_commit(table, destination.writer, topic).offsets
        if offsets != {p: o for p, o in ends.items() if o}:
            violations.append(
                f"table {name}'s offsets {offsets} are not Kafka's end offsets {ends}"
            )
        rows = table.scan().to_arrow().to_pylist() if table.current_snapshot() else []
        for row in rows:
            where.setdefault((row["kafka"]["partition"], row["kafka"]["offset"]), []).append(name)
        everything += rows
    twice = sorted(p for p, found in where.items() if len(found) > 1)
    if twice:
        violations.append(
            f"{len(twice)} record(s) in more than one row, e.g. "
            f"{[(p, where[p]) for p in twice[:5]]}"
        )
    astray = []
    for position, found in where.items():
        if position not in records:
            continue
        key, value, _ = records[position]
        allowed = expected_tables(config, quantity_of(key, value), routings)
        if not set(found) <= allowed:
            astray.append((position, found, sorted(allowed)))
    if astray:
        violations.append(
            f"{len(astray)} row(s) in a table no routing of the run sent them to, e.g. {astray[:5]}"
        )
    return everything
