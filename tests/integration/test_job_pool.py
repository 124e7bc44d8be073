"""A pool: the topics of several jobs landed by one driver process, each its own query
(``python -m floe_sparkapp pool --members DIR``): each member exactly once, a member's change,
removal or failure touching it alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .jobkit import (
    AvroProducer,
    assert_exactly_once,
    create_topic,
    job_config,
    local_job_env,
    table_rows,
    wait_for_rows,
)
from .test_job_roundtrip import V1, order, produce_orders

pytestmark = pytest.mark.integration


def log_lines(log: Path, event: str) -> list[dict]:
    return [
        json.loads(line[line.index("{") :])
        for line in log.read_text(errors="replace").splitlines()
        if f'"event": "{event}"' in line
    ]


def wait_for(what, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if what():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out; the pool's log ends with:\n{log.read_text()[-4000:]}")


def starts(log: Path, writer: str) -> int:
    """How many times the pool started the query of ``writer``."""
    name = f"floe_{writer.replace('/', '_')}"
    runs = [line["run_id"] for line in log_lines(log, "floe.query.started") if line["name"] == name]
    assert len(runs) == len(set(runs)), f"a query's start logged more than once: {runs}"
    return len(runs)


def start_pool(stack, members: Path, out) -> subprocess.Popen:
    """The pool of ``members`` as its own process (its output to ``out``), reading the directory
    every second."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "floe_sparkapp",
            "pool",
            "--members",
            str(members),
            "--refresh",
            "1",
        ],
        env=local_job_env(stack),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def query_id(log: Path, writer: str) -> str:
    """The id of ``writer``'s query (the same across its starts: it comes from the checkpoint)."""
    name = f"floe_{writer.replace('/', '_')}"
    return next(line["id"] for line in log_lines(log, "floe.query.started") if line["name"] == name)


def member_states(log: Path, member: str) -> list[str]:
    lines = log_lines(log, "floe.pool.member")
    return [line["state"] for line in lines if line["member"] == member]


def test_a_pool_lands_each_member_once_and_a_members_change_or_failure_touches_it_alone(
    stack, tmp_path, unique_name
):
    topics = {m: f"pool-{m}-{unique_name}".replace("_", "-") for m in ("a", "b")}
    producers, configs = {}, {}
    for member, topic in topics.items():
        create_topic(stack.bootstrap, topic, partitions=2)
        producers[member] = AvroProducer(stack, topic)
        produce_orders(producers[member], 0, 40)
        (tmp_path / member).mkdir()
        configs[member] = job_config(stack, tmp_path / member, topic, writer=f"data/{member}")
    members = tmp_path / "members"
    members.mkdir()
    for member, config in configs.items():
        (members / f"{member}.json").write_text(config.to_json())
    # A member whose catalog cannot be opened fails, and is started again after a backoff,
    # while the others land.
    broken = job_config(stack, tmp_path / "missing" / "dir", topics["a"], writer="data/broken")
    (members / "broken.json").write_text(broken.to_json())

    log = tmp_path / "pool.log"
    with log.open("w") as out:
        pool = start_pool(stack, members, out)
    try:
        for member, config in configs.items():
            assert len(wait_for_rows(config, 40)) >= 40, log.read_text()[-4000:]
            assert_exactly_once(table_rows(config), producers[member].sent)
        wait_for(lambda: member_states(log, "broken").count("backoff") >= 2, log)
        assert "failed" not in member_states(log, "broken")
        assert pool.poll() is None

        # b's config changes: its query starts again with it; a's goes on untouched.
        changed = job_config(stack, tmp_path / "b", topics["b"], writer="data/b", interval=2)
        (members / "b.json").write_text(changed.to_json())
        wait_for(lambda: starts(log, "data/b") == 2, log)
        for member in ("a", "b"):
            produce_orders(producers[member], 40, 20)
        for member, config in configs.items():
            assert len(wait_for_rows(config, 60)) >= 60, log.read_text()[-4000:]
            assert_exactly_once(table_rows(config), producers[member].sent)
        assert starts(log, "data/a") == 1

        # A file that is no job config is reported; a removed member stops, the others land.
        (members / "c.json").write_text('{"writer": 3}')
        wait_for(lambda: "invalid" in member_states(log, "c"), log)
        (members / "a.json").unlink()
        wait_for(lambda: member_states(log, "a")[-1:] == ["stopped"], log)
        a_query = query_id(log, "data/a")
        wait_for(
            lambda: any(line["id"] == a_query for line in log_lines(log, "floe.query.terminated")),
            log,
        )
        for member in ("a", "b"):
            produce_orders(producers[member], 60, 10)
        assert len(wait_for_rows(configs["b"], 70)) >= 70, log.read_text()[-4000:]
        assert_exactly_once(table_rows(configs["b"]), producers["b"].sent)
        assert len(table_rows(configs["a"])) == 60  # (its query ended before they came)
        assert pool.poll() is None

        os.killpg(pool.pid, signal.SIGTERM)
        assert pool.wait(timeout=120) == 0, log.read_text()[-4000:]
    finally:
        if pool.poll() is None:
            os.killpg(pool.pid, signal.SIGKILL)
            pool.wait()
    assert "stopped by SIGTERM" in log.read_text()
    assert member_states(log, "b")[-1] == "stopped"


def test_a_pool_killed_again_and_again_lands_an_append_and_an_upsert_member_exactly_once(
    stack, tmp_path, unique_name
):
    """The driver's death restarts every member from its checkpoint and ledger: SIGKILLed six
    times while records keep coming, then run until caught up, the append member holds every
    record once and the upsert member the last record of each key."""
    import random
    import threading

    topics = {m: f"pool-kill-{m}-{unique_name}".replace("_", "-") for m in ("a", "u")}
    producers = {}
    for member, topic in topics.items():
        create_topic(stack.bootstrap, topic, partitions=3)
        producers[member] = AvroProducer(stack, topic)
        (tmp_path / member).mkdir()
    configs = {
        "a": job_config(stack, tmp_path / "a", topics["a"], writer="data/a", max_records=300),
        "u": job_config(
            stack, tmp_path / "u", topics["u"], writer="data/u", mode="upsert", max_records=300
        ),
    }
    members = tmp_path / "members"
    members.mkdir()
    for member, config in configs.items():
        (members / f"{member}.json").write_text(config.to_json())
    latest: dict[str, str] = {}
    stop = threading.Event()

    def keep_producing() -> None:
        i = 0
        while not stop.is_set():
            produce_orders(producers["a"], i, 20)
            for n in range(i, i + 20):
                key = f"k{n % 37}"
                producers["u"].send(
                    key=key.encode(), value={**order(n % 37, 1), "item": f"u{n}"}, schema=V1
                )
                latest[key] = f"u{n}"
            producers["u"].flush()
            i += 20
            time.sleep(0.3)

    log = tmp_path / "pool.log"
    rng = random.Random(11)
    producing = threading.Thread(target=keep_producing)
    producing.start()
    try:
        with log.open("w") as out:
            for n in range(6):
                commits = len(log_lines(log, "floe.batch"))
                pool = start_pool(stack, members, out)
                if n % 2:  # once it has committed: mid-batch or between batches
                    wait_for(lambda c=commits: len(log_lines(log, "floe.batch")) > c, log)
                    time.sleep(rng.uniform(0, 3))
                else:  # during its start
                    time.sleep(rng.uniform(2, 8))
                assert pool.poll() is None, log.read_text()[-4000:]
                os.killpg(pool.pid, signal.SIGKILL)
                pool.wait()
    finally:
        stop.set()
        producing.join()

    with log.open("a") as out:
        pool = start_pool(stack, members, out)
    try:
        sent = len(producers["a"].sent)
        assert len(wait_for_rows(configs["a"], sent, timeout=240)) >= sent, log.read_text()[-4000:]

        def upserted() -> bool:
            try:
                rows = table_rows(configs["u"])
            except Exception:  # noqa: BLE001 - no table yet, or its catalog busy: asked again
                return False
            return {r["key"].decode(): r["value"]["item"] for r in rows} == latest

        wait_for(upserted, log, timeout=240)
        os.killpg(pool.pid, signal.SIGTERM)
        assert pool.wait(timeout=120) == 0, log.read_text()[-4000:]
    finally:
        if pool.poll() is None:
            os.killpg(pool.pid, signal.SIGKILL)
            pool.wait()
    assert_exactly_once(table_rows(configs["a"]), producers["a"].sent)
    rows = table_rows(configs["u"])
    assert len(rows) == len(latest) == 37
