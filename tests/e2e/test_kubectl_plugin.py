"""``kubectl floe``, as a user runs it: installed into a fresh virtualenv without Spark, then each
command against the real API server and a running job on the node. (``approve`` is run by the
schema test in test_operator.py, on a breaking change it makes.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml
from kubernetes import client

from ..integration.test_job_roundtrip import produce_orders
from .kube import ROOT, admin_client, wait_until
from .test_operator import declared_orders, orders_status, plugin_env
from .test_operator import logs as job_logs

pytestmark = pytest.mark.e2e


def floe(
    *args: str, env: dict[str, str] | None = None, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["kubectl", "floe", *args],
        capture_output=True,
        text=True,
        env=env or plugin_env(),
        timeout=timeout,
    )
    assert not check or done.returncode == 0, done.stderr
    return done


def test_the_plugin_installs_into_a_fresh_virtualenv_without_spark_or_the_operator(stack, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    installed = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr
    for absent in ("pyspark", "kopf", "pyiceberg", "confluent_kafka"):
        found = subprocess.run(
            [str(venv / "bin" / "python"), "-c", f"import {absent}"], capture_output=True, text=True
        )
        assert found.returncode != 0, absent
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    listed = subprocess.run(["kubectl", "plugin", "list"], capture_output=True, text=True, env=env)
    assert str(venv / "bin" / "kubectl-floe") in listed.stdout, listed.stdout + listed.stderr
    assert floe("--version", env=env).stdout.startswith("floe ")
    shown = floe("status", "-A", env=env, check=False)  # the API server answers it
    assert shown.returncode == 0, shown.stderr


@pytest.mark.node
def test_each_command_on_a_running_job(stack, operator, namespace, shared, tmp_path, unique_name):
    custom = client.CustomObjectsApi(admin_client(stack))
    core = client.CoreV1Api(admin_client(stack))
    producer = declared_orders(
        stack,
        shared,
        namespace,
        f"plugin-{unique_name}".replace("_", "-"),
        30,
        labels={"team": "shop"},
    )

    def status() -> dict:
        return orders_status(stack, namespace)

    def landed() -> bool:
        expected = {str(p): o for p, o in producer.next_offsets().items()}
        return (
            status().get("offsets", {}).get("committed") == expected
            and status().get("phase") == "Running"
        )

    assert wait_until(landed, timeout=300, interval=1), (
        f"{status()}\n{job_logs(tmp_path, namespace)}"
    )
    first_snapshot = status()["table"]["snapshotId"]  # the 30 records, for the rollback below

    # status: the table, YAML of the resource, a label selector.
    header, row = floe("status", "-n", namespace).stdout.splitlines()[:2]
    assert header.split() == [
        "NAME",
        "READY",
        "PHASE",
        "LAG",
        "FRESHNESS",
        "SNAPSHOT",
        "SCHEMA",
        "AGE",
    ]
    assert row.split()[:4] == ["orders", "True", "Running", "0"]
    shown = yaml.safe_load(floe("status", "orders", "-n", namespace, "-o", "yaml").stdout)
    assert shown["status"]["offsets"]["committed"] == status()["offsets"]["committed"]
    assert [
        r["NAME"]
        for r in json.loads(floe("status", "-n", namespace, "-l", "team=shop", "-o", "json").stdout)
    ] == ["orders"]
    assert (
        json.loads(floe("status", "-n", namespace, "-l", "team=other", "-o", "json").stdout) == []
    )

    # describe: the conditions, the Events and the job's own metrics.
    described = floe("describe", "orders", "-n", namespace).stdout
    assert "Conditions:" in described and "JobCreated" in described, described
    metrics = described.split("Job metrics:", 1)[1].splitlines()
    assert ["analytics.orders", "30", "0"] in [line.split()[:3] for line in metrics], described

    # logs: the driver's JSON lines, its batches among them.
    printed = floe("logs", "orders", "-n", namespace, "--tail", "400").stdout
    batches = [
        json.loads(line)
        for line in printed.splitlines()
        if line.startswith("{") and '"event": "floe.batch"' in line
    ]
    assert batches and sum(b["rows"] for b in batches) >= 1, printed[-3000:]

    # suspend (seen by a watch), then resume: the job goes, comes back and lands what waited.
    watching = subprocess.Popen(
        ["kubectl", "floe", "status", "-n", namespace, "-w"],
        stdout=subprocess.PIPE,
        text=True,
        env=plugin_env(),
    )
    try:
        # The list first (a header and the row), then the watch from what it showed.
        assert watching.stdout.readline().split()[:1] == ["NAME"]
        assert watching.stdout.readline().split()[:3] == ["orders", "True", "Running"]
        assert (
            floe("suspend", "orders", "-n", namespace).stdout.strip()
            == f"kafkaicebergtopic {namespace}/orders suspended"
        )
        assert wait_until(lambda: status().get("phase") == "Suspended", timeout=120, interval=1)
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("Suspended" in s for s in seen):
            seen.append(watching.stdout.readline())
        assert any(line.split()[:1] == ["orders"] and "Suspended" in line for line in seen), seen
    finally:
        watching.terminate()
        watching.wait(timeout=30)
    assert not custom.list_namespaced_custom_object(
        "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications"
    )["items"]
    # While suspended: nothing lands, and the status counts what waits.
    committed_while_suspended = status()["offsets"]["committed"]
    produce_orders(producer, 30, 10)
    assert wait_until(lambda: status()["offsets"]["lag"] == 10, timeout=60, interval=1), status()
    assert status()["offsets"]["committed"] == committed_while_suspended
    floe("resume", "orders", "-n", namespace)
    assert wait_until(landed, timeout=300, interval=1), (
        f"{status()}\n{job_logs(tmp_path, namespace)}"
    )

    # restart: a new application, with an Event that says why, and nothing lost.
    before = custom.get_namespaced_custom_object(
        "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications", "floe-orders"
    )
    assert floe("restart", "orders", "-n", namespace).stdout.startswith(
        f"kafkaicebergtopic {namespace}/orders: restart asked for (floe.dev/restart="
    )

    def restarted() -> bool:
        apps = custom.list_namespaced_custom_object(
            "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications"
        )["items"]
        return any(a["metadata"]["uid"] != before["metadata"]["uid"] for a in apps)

    assert wait_until(restarted, timeout=120, interval=1)
    events = core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=orders"
    ).items
    assert any(e.reason == "JobRestarted" and "restart asked for" in e.message for e in events)
    produce_orders(producer, 40, 5)
    assert wait_until(landed, timeout=300, interval=1), (
        f"{status()}\n{job_logs(tmp_path, namespace)}"
    )
    # rollback: the table back to the snapshot of the first 30 records, waited for; the 15
    # records after it land again, each once.
    rolled = floe("rollback", "orders", "-n", namespace, "--to", first_snapshot, "-w", timeout=400)
    lines = rolled.stdout.splitlines()
    assert lines[0].startswith(f"kafkaicebergoperation {namespace}/orders-rollback-"), lines
    assert lines[-1].startswith(
        f"Succeeded: main of analytics.orders was moved back to snapshot {first_snapshot}"
    ), lines
    assert wait_until(landed, timeout=300, interval=1), (
        f"{status()}\n{job_logs(tmp_path, namespace)}"
    )
    from ..integration.jobkit import assert_exactly_once
    from .test_operator import orders_rows, topic_catalog

    assert_exactly_once(orders_rows(topic_catalog(shared)), producer.sent)
    # repair --dry-run: a record no decoder reads lands raw; the dry run (a Spark job on the
    # node) says it would stay raw, and why.
    producer.send(key=b"junk", raw=b"junk", partition=0)
    producer.flush()
    assert wait_until(
        lambda: len(orders_rows(topic_catalog(shared))) == len(producer.sent),
        timeout=300,
        interval=2,
    ), job_logs(tmp_path, namespace)
    looked = floe(
        "repair",
        "orders",
        "-n",
        namespace,
        "--dry-run",
        "--reason",
        "not_framed",
        "-w",
        timeout=400,
    )
    lines = looked.stdout.splitlines()
    assert lines[0].startswith(f"kafkaicebergoperation {namespace}/orders-repair-"), lines
    assert lines[-1] == (
        "Succeeded: dry run: 0 of the 1 selected raw rows of analytics.orders "
        "would be decoded, 1 would stay raw (not_framed: 1)"
    ), lines
    missing = floe("logs", "gone", "-n", namespace, check=False)
    assert missing.returncode == 1 and 'KafkaIcebergTopic "gone" not found' in missing.stderr
