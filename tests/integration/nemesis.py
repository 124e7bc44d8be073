"""The nemesis: the job run against its neighbours through fault proxies, under a seeded
schedule of faults, then a checker of the invariant.

The job runs as its own process (``python -m floe_sparkapp run``), reaching Kafka, the
registry, the catalog and the object store only through the stack's Toxiproxy.  A supervisor
starts it again whenever it exits or is killed, as the operator's failover does.  While records
are produced (some of them bad), the schedule makes one fault at a time: latency, connection
resets, replies that never arrive (the request applied), refused connections, a neighbour down
for a window, a broker restart, the driver SIGKILLed.  Then the faults stop, the job catches up,
and the checker compares the table with the topic as Kafka holds it:

- append: every record is exactly one row with its produced key and value, no gap and no
  duplicate in ``(topic, partition, offset)``; upsert: one row per key, the key's last record;
- a bad record is a row with its raw bytes and a reason, and is in the dead-letter topic;
- every data file ``main`` refers to exists and the table scans;
- the offsets floe reads from the table (as the status shows them) are Kafka's end offsets.

``make nemesis SECONDS=... SEED=...`` runs it for as long as asked (``python -m
tests.integration.nemesis --help``); the test suite runs short seeded runs
(``test_nemesis.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from floe_sparkapp.config import JobConfig, parse_config
from floe_sparkapp.ledger import last_commit

from ..faultproxy import FaultProxy
from . import nemesis_routed
from .jobkit import AvroProducer, create_topic, job_config, load_table, local_job_env
from .nemesis_routed import ROUTINGS, Operations, routed, write_routing

BAD_VALUES = (b"\x00\xff\xff\xff\xff", b"\x00\x00\x00", b"\x01not-avro")
ORDER = {
    "type": "record",
    "name": "NemesisOrder",
    "namespace": "floe.nemesis",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "quantity", "type": "int"},
    ],
}


@dataclass
class Plan:
    seconds: float
    seed: int
    catalog: str = "sqlite"  # sqlite | postgresql | rest
    mode: str = "append"  # append | upsert | routed (nemesis_routed.py)
    keys: int = 200  # upsert: records share this many keys
    history: int = 300  # routed: records produced before the job starts (at latest)

    def neighbours(self) -> list[str]:
        """The proxies the job's traffic goes through for this catalog."""
        return ["kafka", "registry"] + {
            "sqlite": [],
            "postgresql": ["postgres"],
            "rest": ["rest_catalog", "s3"],
        }[self.catalog]


@dataclass
class Outcome:
    plan: Plan
    faults: Counter = field(default_factory=Counter)
    exits: Counter = field(default_factory=Counter)  # the job's exit codes (killed: -9)
    starts: int = 0
    produced: int = 0
    bad: int = 0
    violations: list[str] = field(default_factory=list)
    rows: int = 0
    dead_letters: int = 0
    dead_letter_copies: int = 0  # bad records sent more than once (batches replayed)
    catch_up_seconds: float = 0.0
    routings: set = field(default_factory=lambda: {"ab"})  # routed: the routings the run had
    operations: Counter = field(default_factory=Counter)  # routed: attempts per operation
    succeeded: Counter = field(default_factory=Counter)  # routed: successes per operation
    history: dict = field(default_factory=dict)  # routed: the history's end per partition

    def summary(self) -> dict[str, Any]:
        return {
            "seconds": self.plan.seconds,
            "seed": self.plan.seed,
            "catalog": self.plan.catalog,
            "mode": self.plan.mode,
            "faults": dict(sorted(self.faults.items())),
            "job_starts": self.starts,
            "job_exits": {str(k): v for k, v in sorted(self.exits.items())},
            "produced": self.produced,
            "bad_records": self.bad,
            "rows": self.rows,
            "dead_letters": self.dead_letters,
            "dead_letter_copies": self.dead_letter_copies,
            "catch_up_seconds": round(self.catch_up_seconds, 1),
            **(
                {
                    "routings": sorted(self.routings),
                    "operations": dict(sorted(self.operations.items())),
                    "operations_succeeded": dict(sorted(self.succeeded.items())),
                }
                if self.plan.mode == "routed"
                else {}
            ),
            "violations": self.violations[:20],
            "holds": not self.violations,
        }


def faulty_config(stack, config: JobConfig, catalog: str) -> JobConfig:
    """``config`` with every neighbour reached through its fault proxy."""
    env = stack.env
    data = json.loads(config.to_json())
    data["kafka"]["bootstrapServers"] = env["FLOE_FAULTY_KAFKA_BOOTSTRAP"]
    data["value"]["schemaRegistry"]["url"] = env["FLOE_FAULTY_SCHEMA_REGISTRY_URL"]
    table_catalog = data["table"]["catalog"]
    if catalog == "postgresql":
        table_catalog["uri"] = env["FLOE_FAULTY_POSTGRES_JDBC"]
    if catalog == "rest":
        table_catalog["uri"] = env["FLOE_FAULTY_REST_CATALOG_URI"]
        table_catalog["properties"]["s3.endpoint"] = env["FLOE_FAULTY_S3_ENDPOINT"]
    return parse_config(data)


class Supervisor:
    """Runs the job process, and starts it again after it exits or is killed (the operator's
    failover, with a short backoff)."""

    def __init__(self, command: list[str], env: dict[str, str], log_file: Path, outcome: Outcome):
        self.command, self.env, self.outcome = command, env, outcome
        self.log = log_file.open("a")
        self.process: subprocess.Popen | None = None
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            with self.lock:
                self.process = subprocess.Popen(
                    self.command,
                    env=self.env,
                    stdout=self.log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                self.outcome.starts += 1
            code = self.process.wait()
            if self.stopping.is_set():
                break
            self.outcome.exits[code] += 1
            if code in (3, 5):  # DataLoss, TableInUse: the operator would not restart it
                self.outcome.violations.append(f"the job exited {code} (see the job log)")
            self.stopping.wait(2)

    def start(self) -> None:
        self.thread.start()

    def kill(self) -> bool:
        with self.lock:
            if self.process is None or self.process.poll() is not None:
                return False
            os.killpg(self.process.pid, signal.SIGKILL)
            return True

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGTERM)
        if self.process is not None:
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        self.thread.join(70)
        self.log.close()


class Records:
    """Produces orders (and now and then a bad record) to the topic, directly (not through a
    proxy), until stopped; a broker restart only delays it."""

    def __init__(self, stack, topic: str, plan: Plan, rng: random.Random):
        self.avro = AvroProducer(stack, topic)
        self.producer = Producer(
            {
                "bootstrap.servers": stack.bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 300_000,
            }
        )
        self.topic, self.plan, self.rng = topic, plan, rng
        self.serialize = self.avro._serializer(ORDER)
        self.stopping = threading.Event()
        self.count = self.bad = 0
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _record(self, i: int) -> tuple[bytes, bytes]:
        from confluent_kafka.serialization import MessageField, SerializationContext

        if i % 53 == 17:
            self.bad += 1
            return f"bad-{i}".encode(), BAD_VALUES[i % len(BAD_VALUES)]
        key = f"k{i % self.plan.keys}" if self.plan.mode == "upsert" else f"k{i}"
        value = {"id": i, "item": f"item-{i}", "quantity": i % 100}
        return key.encode(), self.serialize(
            value, SerializationContext(self.topic, MessageField.VALUE)
        )

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.errors.append(str(error))

    def produce(self, count: int) -> None:
        """``count`` records now (the history a routed run's job starts after)."""
        for _ in range(count):
            key, value = self._record(self.count)
            self.producer.produce(self.topic, key=key, value=value, on_delivery=self._delivered)
            self.count += 1
            self.producer.poll(0)
        self.producer.flush(60)

    def _loop(self) -> None:
        delivered = self._delivered
        while not self.stopping.is_set():
            for _ in range(20):
                key, value = self._record(self.count)
                self.producer.produce(self.topic, key=key, value=value, on_delivery=delivered)
                self.count += 1
            self.producer.poll(0)
            self.stopping.wait(0.3)
        self.producer.flush(300)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(330)


class Schedule:
    """One fault at a time, drawn from the seeded generator, each undone after its window."""

    def __init__(
        self,
        plan: Plan,
        proxy: FaultProxy,
        supervisor: Supervisor,
        outcome: Outcome,
        rng: random.Random,
        config_file: Path | None = None,
    ):
        self.plan, self.proxy, self.supervisor = plan, proxy, supervisor
        self.outcome, self.rng, self.config_file = outcome, rng, config_file
        self.routing = "ab"
        self.kinds: list[tuple[str, float, Callable[[], None]]] = [
            ("latency", 3, self._latency),
            ("reset", 2, self._reset),
            ("lost-reply", 3, self._lost_reply),
            ("refused", 2, self._refused),
            ("down", 1, self._down),
            ("broker-restart", 0.5, self._broker_restart),
            ("kill", 1, self._kill),
        ]
        if plan.mode == "routed":
            self.kinds.append(("reroute", 1, self._reroute))

    def run(self, until: float) -> None:
        """Every kind once first, in a seeded order (a run lasts until each has happened),
        then kinds drawn by their weights until ``until``."""
        first = self.rng.sample(self.kinds, len(self.kinds))
        while first or time.monotonic() < until:
            self._pause(
                self.rng.uniform(0.5, 3) if first else self.rng.uniform(2, 8),
                None if first else until,
            )
            if not first and time.monotonic() >= until:
                break
            name, _, fault = (
                first.pop(0)
                if first
                else self.rng.choices(self.kinds, [w for _, w, _ in self.kinds])[0]
            )
            fault()
            self.outcome.faults[name] += 1

    def _pause(self, seconds: float, until: float | None = None) -> None:
        end = time.monotonic() + seconds
        time.sleep(max(0.0, min(end, until or end) - time.monotonic()))

    def _neighbour(self) -> str:
        return self.rng.choice(self.plan.neighbours())

    def _with_toxic(self, kind: str, stream: str, window: float, **attributes: Any) -> None:
        target = self._neighbour()
        name = self.proxy.add_toxic(target, kind, stream=stream, **attributes)
        self.outcome.faults[f"{kind}@{target}"] += 1
        try:
            self._pause(window)
        finally:
            self.proxy.remove_toxic(target, name)

    def _latency(self) -> None:
        self._with_toxic(
            "latency",
            "downstream",
            self.rng.uniform(3, 10),
            latency=self.rng.randint(200, 1500),
            jitter=200,
        )

    def _reset(self) -> None:
        self._with_toxic("reset_peer", "upstream", self.rng.uniform(1, 4), timeout=0)

    def _lost_reply(self) -> None:
        # Requests reach the neighbour (and are applied); replies never come back, and the
        # connection is closed after the timeout.
        self._with_toxic(
            "timeout", "downstream", self.rng.uniform(2, 6), timeout=self.rng.randint(500, 3000)
        )

    def _disabled(self, window: float) -> None:
        target = self._neighbour()
        self.proxy.enable(target, False)
        self.outcome.faults[f"disabled@{target}"] += 1
        try:
            self._pause(window)
        finally:
            self.proxy.enable(target, True)

    def _refused(self) -> None:
        self._disabled(self.rng.uniform(2, 8))

    def _down(self) -> None:
        self._disabled(self.rng.uniform(10, 25))

    def _broker_restart(self) -> None:
        from hack import stack as local_stack

        local_stack.stop_component("kafka")
        self._pause(self.rng.uniform(0, 3))
        local_stack.start_component("kafka")

    def _kill(self) -> None:
        self.supervisor.kill()

    def _reroute(self) -> None:
        """The routing changed and the job replaced (the operator deletes the application of a
        changed spec, whatever its batch is doing)."""
        self.reroute(self.rng.choice([r for r in ROUTINGS if r != self.routing]))

    def reroute(self, routing: str) -> None:
        assert self.config_file is not None
        write_routing(self.config_file, routing)
        self.routing = routing
        self.outcome.routings.add(routing)
        self.supervisor.kill()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "isolation.level": "read_committed",
        }
    )
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def read_topic(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[tuple[int, int], Any]:
    """Every record Kafka holds below ``ends``: (partition, offset) -> (key, value, headers)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    found: dict[tuple[int, int], Any] = {}
    done = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + 300
    try:
        while len(done) < len(ends) and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1):
                if message.error():
                    continue
                p, o = message.partition(), message.offset()
                if o < ends[p]:
                    found[(p, o)] = (message.key(), message.value(), message.headers() or [])
                if o >= ends[p] - 1:
                    done.add(p)
    finally:
        consumer.close()
    return found


def check(
    stack, config: JobConfig, dead_letter_topic: str, partitions: int, outcome: Outcome
) -> None:
    """The invariant (module doc); violations are added to ``outcome``."""
    violations = outcome.violations
    ends = end_offsets(stack.bootstrap, config.kafka.topic, partitions)
    records = read_topic(stack.bootstrap, config.kafka.topic, ends)
    outcome.produced = len(records)
    missing: list[str] = []
    for destination in config.destinations():
        table = load_table(destination)
        tasks = list(table.scan().plan_files())
        missing += [
            t.file.file_path for t in tasks if not table.io.new_input(t.file.file_path).exists()
        ]
        missing += [
            d.file_path
            for t in tasks
            for d in t.delete_files
            if not table.io.new_input(d.file_path).exists()
        ]
    if missing:
        violations.append(f"main refers to {len(missing)} missing file(s), e.g. {missing[:3]}")
        return
    if config.routes:
        rows = nemesis_routed.check(config, records, ends, outcome.routings, _quantity, violations)
    else:
        table = load_table(config)
        committed = last_commit(table, config.writer, config.kafka.topic)
        if committed.offsets != {p: o for p, o in ends.items() if o}:
            violations.append(
                f"the table's offsets {committed.offsets} are not Kafka's end offsets {ends}"
            )
        rows = table.scan().to_arrow().to_pylist()
    outcome.rows = len(rows)
    positions = Counter((r["kafka"]["partition"], r["kafka"]["offset"]) for r in rows)
    duplicated = sorted(p for p, n in positions.items() if n > 1)
    if duplicated:
        violations.append(
            f"{len(duplicated)} record(s) landed more than once, e.g. {duplicated[:5]}"
        )
    if config.table.mode == "append":
        expected = set(records)
    else:  # one row per key: the key's last record
        last: dict[bytes, tuple[int, int]] = {}
        for position, (key, _, _) in sorted(records.items()):
            last[key] = max(last.get(key, position), position)
        expected = set(last.values())
    missing_rows = sorted(expected - set(positions))
    if missing_rows:
        violations.append(
            f"{len(missing_rows)} record(s) missing from the table, e.g. {missing_rows[:5]}"
        )
    extra = sorted(set(positions) - expected)
    if extra:
        violations.append(
            f"{len(extra)} row(s) that are not "
            f"{'records' if config.table.mode == 'append' else 'a key’s last'}"
            f" in Kafka, e.g. {extra[:5]}"
        )
    wrong = []
    for row in rows:
        position = (row["kafka"]["partition"], row["kafka"]["offset"])
        if position not in records:
            continue
        key, value, _ = records[position]
        if row["key"] != key:
            wrong.append((position, "key"))
        elif key.startswith(b"bad-"):
            if row["value_raw"] != value or not row["value_error"] or row["value"] is not None:
                wrong.append((position, "bad record not kept raw with its reason"))
        elif row["value"] is None or row["value"]["id"] != _id(value):
            wrong.append((position, "value"))
    if wrong:
        violations.append(f"{len(wrong)} row(s) not as produced, e.g. {wrong[:5]}")

    bad = {position for position, (key, _, _) in records.items() if key.startswith(b"bad-")}
    outcome.bad = len(bad)
    sent = Counter()
    dead_ends = end_offsets(stack.bootstrap, dead_letter_topic, 1)
    for _, _, headers in read_topic(stack.bootstrap, dead_letter_topic, dead_ends).values():
        found = dict(headers)
        if "floe.partition" in found:
            sent[(int(found["floe.partition"]), int(found["floe.offset"]))] += 1
    outcome.dead_letters = sum(sent.values())
    outcome.dead_letter_copies = sum(1 for n in sent.values() if n > 1)
    # The history a routed run's backfills land was never the job's to send
    not_sent = sorted(p for p in bad - set(sent) if p[1] >= outcome.history.get(p[0], 0))
    if not_sent:
        violations.append(
            f"{len(not_sent)} bad record(s) not in the dead-letter topic, e.g. {not_sent[:5]}"
        )


def _varint(payload: bytes, i: int) -> tuple[int, int]:
    """An Avro zig-zag varint at ``i``, and where the next field starts."""
    value, shift = 0, 0
    while True:
        byte = payload[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            break
        shift += 7
    return (value >> 1) ^ -(value & 1), i


def _id(payload: bytes) -> int:
    """The id of an order as produced (Avro: a zig-zag varint right after the 5-byte header)."""
    return _varint(payload, 5)[0]


def _quantity(key: bytes, payload: bytes) -> int | None:
    """The quantity of an order as produced (after its id and its item); None for a bad
    record."""
    if key.startswith(b"bad-"):
        return None
    _, i = _varint(payload, 5)
    length, i = _varint(payload, i)
    return _varint(payload, i + length)[0]


def _offsets(config: JobConfig) -> dict[int, int]:
    """The table's offsets ({} before it has any, or while it cannot be read)."""
    try:
        return last_commit(load_table(config), config.writer, config.kafka.topic).offsets
    except Exception:  # noqa: BLE001 - not created yet
        return {}


def caught_up(config: JobConfig, ends: dict[int, int]) -> bool:
    """Whether each of the topic's tables has committed up to ``ends``."""
    return all(
        all(_offsets(destination).get(p, 0) >= o for p, o in ends.items() if o)
        for destination in config.destinations()
    )


def run(stack, workdir: Path, plan: Plan, log: Callable[[str], None] = print) -> Outcome:
    """One nemesis run (module doc); returns what happened and the checker's verdict."""
    from hack import stack as local_stack

    rng = random.Random(plan.seed)
    outcome = Outcome(plan)
    name = f"nemesis-{plan.catalog}-{plan.mode}-{plan.seed}-{uuid.uuid4().hex[:6]}"
    partitions = 3
    create_topic(stack.bootstrap, name, partitions)
    dead_letter = f"{name}.dlq"
    create_topic(stack.bootstrap, dead_letter, 1)
    workdir.mkdir(parents=True, exist_ok=True)
    is_routed = plan.mode == "routed"
    config = job_config(
        stack,
        workdir,
        name,
        interval=2,
        max_records=2000,
        catalog=plan.catalog,
        mode="append" if is_routed else plan.mode,
        dead_letter=dead_letter,
        writer=f"nemesis/{name}",
    )
    records = Records(stack, name, plan, rng)
    # The subject gets its schema before the job starts (the job reads it at its start).
    from confluent_kafka.serialization import MessageField, SerializationContext

    records.serialize(
        {"id": -1, "item": "", "quantity": 0}, SerializationContext(name, MessageField.VALUE)
    )
    if is_routed:  # history the job, starting at latest, leaves to the backfills
        records.produce(plan.history)
        outcome.history = end_offsets(stack.bootstrap, name, partitions)
        data = json.loads(config.to_json())
        data["kafka"]["startingOffsets"] = "latest"
        config = parse_config(routed(data, "ab"))
    config_file = workdir / "job.json"
    config_file.write_text(faulty_config(stack, config, plan.catalog).to_json())
    env = local_job_env(stack)
    command = [sys.executable, "-m", "floe_sparkapp", "run", "--config", str(config_file)]
    supervisor = Supervisor(command, env, workdir / "job.log", outcome)
    proxy = FaultProxy(stack.env["FLOE_TOXIPROXY_URL"])
    proxy.reset()
    schedule = Schedule(plan, proxy, supervisor, outcome, rng, config_file)
    log(f"nemesis {name}: {plan.seconds:.0f} s, seed {plan.seed}, job log {workdir / 'job.log'}")
    supervisor.start()
    operations = None
    if is_routed:  # the job's first start commits where it starts: the history ends there
        deadline = time.monotonic() + 300
        while not _offsets(config) and time.monotonic() < deadline:
            time.sleep(1)
        history_end = int(time.time()) + 1
        time.sleep(max(0.0, history_end - time.time()))
        operations = Operations(config_file, env, workdir / "operations.log", config, history_end)
        operations.start()
    records.start()
    try:
        schedule.run(time.monotonic() + plan.seconds)
    finally:
        proxy.reset()
        if not local_stack.health().get("kafka"):
            local_stack.start_component("kafka")
        records.stop()
        if is_routed:
            schedule.reroute("ab")  # the run ends with both routes
    if operations is not None:
        left = operations.finish(300)
        outcome.operations.update(operations.attempts)
        outcome.succeeded.update(operations.done)
        if left:
            outcome.violations.append(
                f"operations that did not succeed within 300 s of the last fault: {left}"
            )
    started = time.monotonic()
    ends = end_offsets(stack.bootstrap, name, partitions)
    deadline = started + 300
    while not caught_up(config, ends) and time.monotonic() < deadline:
        time.sleep(2)
    outcome.catch_up_seconds = time.monotonic() - started
    supervisor.stop()
    if records.errors:
        log(f"producer: {len(records.errors)} delivery error(s), e.g. {records.errors[:3]}")
    if outcome.catch_up_seconds >= 300:
        outcome.violations.append("the job did not catch up within 300 s of the last fault")
    check(stack, config, dead_letter, partitions, outcome)
    log(json.dumps(outcome.summary()))
    return outcome


def _memory_gib() -> int:
    return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.integration.nemesis", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--catalog", default="sqlite", help="comma-separated: sqlite, postgresql, rest"
    )
    parser.add_argument("--mode", default="append", help="comma-separated: append, upsert, routed")
    parser.add_argument("--record", help="append each run's result to this JSON-lines file")
    args = parser.parse_args(argv)

    from hack import stack as local_stack
    from tests.conftest import Stack

    state, _ = local_stack.ensure_up()
    env = local_stack.connection_env(state)
    os.environ.update(env)
    stack = Stack(state, env)
    holds = True
    for catalog in args.catalog.split(","):
        for mode in args.mode.split(","):
            plan = Plan(args.seconds, args.seed, catalog, mode)
            workdir = Path(local_stack.paths.RUN) / "nemesis" / f"{catalog}-{mode}-{args.seed}"
            # Nothing of an earlier run of the same catalog, mode and seed: a stopped run's
            # checkpoint names that run's topic, which the job rightly refuses to go on from.
            shutil.rmtree(workdir, ignore_errors=True)
            outcome = run(stack, workdir, plan)
            holds &= not outcome.violations
            if args.record:
                with open(args.record, "a") as out:
                    out.write(
                        json.dumps(
                            {
                                "date": time.strftime("%Y-%m-%d"),
                                "machine": f"{os.cpu_count()} cores, {_memory_gib()} GiB",
                                "command": " ".join(
                                    [
                                        "python -m tests.integration.nemesis",
                                        *(argv if argv is not None else sys.argv[1:]),
                                    ]
                                ),
                                **outcome.summary(),
                            }
                        )
                        + "\n"
                    )
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
