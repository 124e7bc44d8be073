"""Fixtures for tests against the local kube-apiserver."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from contextlib import closing, suppress

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from hack.stack.cluster import JOB_NAMESPACES, serve_namespace
from hack.stack.procs import stop_group

from .kube import (
    FAILOVER_BACKOFF_SECONDS,
    FLOE_CRD,
    OPERATION_CRD,
    REFRESH_SECONDS,
    ROOT,
    SPARK_POD_DEFAULTS,
    UNSERVED_SUBMIT_WAIT_SECONDS,
    admin_client,
    delete_namespace_without_operator,
    drop_topic_finalizers,
    install_crd,
    wait_until,
)

# The namespaces where the node's spark-operator runs the jobs of tests marked `node`, taken in
# turn. Once a test is done with one, it is deleted and made again (spark-operator's Roles
# with it) while the next test runs in the other: spark-operator's watches there fail only as
# long as the deletion takes, and have long recovered when the test after next takes it (a
# watch failing for minutes backs off to 30 s, and its webhook would refuse the next driver
# pod meanwhile: "failed to get SparkApplication").
NODE_JOBS = JOB_NAMESPACES[1:]
_node_turn = [0]
_renewing: dict[str, threading.Thread] = {}
_renewed: set[str] = set()  # made anew by this run, nothing in them since
CHART = ROOT / "charts" / "floe-operator"


def _gone(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespace(name)
        return False
    except ApiException as error:
        return error.status == 404


def _renew(api: client.ApiClient, name: str) -> None:
    """Deletes a job namespace (its topics' finalizers dropped) and makes it again, served."""
    core = client.CoreV1Api(api)
    if not _gone(core, name):
        try:
            delete_namespace_without_operator(api, name)
        except ApiException as error:
            assert error.status in (404, 409), error
        # Its pods stop first: a driver's JVM has its grace period to stop.
        assert wait_until(
            lambda: _gone(core, name) or drop_topic_finalizers(api, name), timeout=300, interval=1
        ), f"namespace {name} still terminating"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    serve_namespace(name)
    _renewed.add(name)


def _renew_in_background(api: client.ApiClient, name: str) -> None:
    def renew() -> None:
        with suppress(Exception):  # the next test to take it renews it itself
            _renew(api, name)

    _renewing[name] = threading.Thread(target=renew, daemon=True, name=f"renew-{name}")
    _renewing[name].start()


@pytest.fixture(scope="session", autouse=True)
def _renewals_end_with_the_run():
    """A renewal still running when the run ends is waited for: a daemon thread stopped in
    the middle of a TLS request to the API server aborts the interpreter as it exits."""
    yield
    for renewing in list(_renewing.values()):
        renewing.join(timeout=330)


def _fresh_job_namespace(api: client.ApiClient) -> str:
    name = NODE_JOBS[_node_turn[0] % len(NODE_JOBS)]
    _node_turn[0] += 1
    if (renewing := _renewing.pop(name, None)) is not None:
        renewing.join(timeout=330)
    if name not in _renewed:  # the first use in this run, or the renewal failed
        _renew(api, name)
    _renewed.discard(name)
    return name


@pytest.fixture
def namespace(stack, unique_name, request):
    """A fresh namespace for one test, deleted afterwards (the test's operator has stopped by
    then: its topics' finalizers are dropped).  A test marked `node` gets one of the namespaces
    where the node's spark-operator runs jobs, in turn, made anew since a test last used it."""
    api = admin_client(stack)
    if request.node.get_closest_marker("node"):
        name = _fresh_job_namespace(api)
        yield name
        _renew_in_background(api, name)
        return
    name = unique_name.replace("_", "-")[:50]
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
    )
    yield name
    delete_namespace_without_operator(api, name)


@pytest.fixture
def drivers(stack, namespace):
    """The Spark drivers' ServiceAccount and Role in the test's namespace, as floe's chart makes
    them in every namespace it serves (the driver creates its executor pods)."""
    rendered = subprocess.run(
        [
            "helm",
            "template",
            "floe",
            str(CHART),
            "--show-only",
            "templates/spark-rbac.yaml",
            "--set",
            f"watch.namespaces={{{namespace}}}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    applied = subprocess.run(
        ["kubectl", "apply", "-f", "-"], input=rendered, capture_output=True, text=True
    )
    assert applied.returncode == 0, applied.stderr


@pytest.fixture
def shared(stack, tmp_path):
    """A directory of the node's shared one for the test's catalog, warehouse and checkpoints:
    the Spark pods mount it at the same path (spark.volumes)."""
    import shutil
    import uuid
    from pathlib import Path

    path = Path(stack.env["FLOE_NODE_SHARED"]) / f"test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _background(command: list[str], log_path, env: dict[str, str] | None = None):
    log = log_path.open("w")
    # umask 0: what an operator creates in the node's shared directory (the table's directories)
    # stays writable by the Spark pods, which run as the image's user.
    process = subprocess.Popen(
        command,
        env={**os.environ, **(env or {})},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        umask=0,
    )
    return process, log


def _stop(process: subprocess.Popen, log) -> None:
    stop_group(process, timeout=30)
    log.close()


def free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _served_env(namespace: str) -> dict[str, str]:
    """The settings that depend on whether the node's spark-operator serves ``namespace``."""
    if namespace in NODE_JOBS:
        return {}
    return {"FLOE_SUBMIT_WAIT_SECONDS": str(UNSERVED_SUBMIT_WAIT_SECONDS)}


@pytest.fixture
def operator(stack, tmp_path, namespace, drivers):
    """The floe operator as a real process (admin identity), watching the test's namespace, with
    the drivers' account there as the chart makes it for the namespaces it serves."""
    install_crd(admin_client(stack), FLOE_CRD)
    install_crd(admin_client(stack), OPERATION_CRD)
    port, metrics_port = free_port(), free_port()
    process, log = _background(
        [sys.executable, "-m", "floe_operator"],
        tmp_path / "operator.log",
        {
            "FLOE_LIVENESS": f"http://127.0.0.1:{port}/healthz",
            "FLOE_METRICS_PORT": str(metrics_port),
            "FLOE_NAMESPACES": namespace,
            "FLOE_REFRESH_SECONDS": str(REFRESH_SECONDS),
            "FLOE_FAILOVER_RESET_SECONDS": "45",
            "FLOE_FAILOVER_BACKOFF_SECONDS": str(FAILOVER_BACKOFF_SECONDS),
            "FLOE_SPARK_POD": json.dumps(SPARK_POD_DEFAULTS),
            **_served_env(namespace),
        },
    )
    process.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    yield process
    _stop(process, log)


@pytest.fixture
def operator_control(stack, tmp_path, namespace, drivers):
    """Starts and kills the operator process at will (for fault tests)."""
    install_crd(admin_client(stack), FLOE_CRD)
    install_crd(admin_client(stack), OPERATION_CRD)
    running: list = []

    class Control:
        def start(self, **env: str) -> int:
            """Starts one more operator process (extra FLOE_* settings in env); its index."""
            port = free_port()
            running.append(
                _background(
                    [sys.executable, "-m", "floe_operator"],
                    self.log(len(running)),
                    {
                        "FLOE_LIVENESS": f"http://127.0.0.1:{port}/healthz",
                        "FLOE_METRICS_PORT": str(free_port()),
                        "FLOE_NAMESPACES": namespace,
                        "FLOE_REFRESH_SECONDS": str(REFRESH_SECONDS),
                        **_served_env(namespace),
                        **env,
                    },
                )
            )
            return len(running) - 1

        def log(self, index: int):
            return tmp_path / f"operator-{index}.log"

        def kill(self, index: int = -1) -> None:
            process, log = running[index]
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            log.close()

    yield Control()
    for process, log in running:
        _stop(process, log)
