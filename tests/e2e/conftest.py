"""Fixtures for tests against the local kube-apiserver."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import closing
import socket

import pytest
from kubernetes import client

from .kube import (FLOE_CRD, ROOT, SPARK_CRD, admin_client,
                   delete_namespace_without_operator, install_crd)


@pytest.fixture
def namespace(stack, unique_name):
    """A fresh namespace for one test, deleted afterwards (the test's operator has stopped by
    then: its topics' finalizers are dropped)."""
    api = admin_client(stack)
    name = unique_name.replace("_", "-")[:50]
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    delete_namespace_without_operator(api, name)


def _background(command: list[str], log_path, env: dict[str, str] | None = None):
    log = log_path.open("w")
    process = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    return process, log


def _stop(process: subprocess.Popen, log) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    log.close()


@pytest.fixture
def runner(stack, tmp_path, namespace):
    """The local spark-operator stand-in for the test's namespace."""
    install_crd(admin_client(stack), SPARK_CRD)
    process, log = _background([sys.executable, str(ROOT / "hack" / "spark-operator" / "runner.py")],
                               tmp_path / "runner.log", {"FLOE_RUNNER_DIR": str(tmp_path / "runner"),
                                                         "FLOE_RUNNER_NAMESPACE": namespace})
    yield process
    _stop(process, log)


def free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def operator(stack, tmp_path, namespace):
    """The floe operator as a real process (admin identity), watching the test's namespace."""
    install_crd(admin_client(stack), FLOE_CRD)
    port, metrics_port = free_port(), free_port()
    process, log = _background([sys.executable, "-m", "floe_operator"], tmp_path / "operator.log",
                               {"FLOE_LIVENESS": f"http://127.0.0.1:{port}/healthz",
                                "FLOE_METRICS_PORT": str(metrics_port),
                                "FLOE_NAMESPACES": namespace})
    process.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    yield process
    _stop(process, log)


@pytest.fixture
def operator_control(stack, tmp_path, namespace):
    """Starts and kills the operator process at will (for fault tests)."""
    install_crd(admin_client(stack), FLOE_CRD)
    running: list = []

    class Control:
        def start(self, **env: str) -> int:
            """Starts one more operator process (extra FLOE_* settings in env); its index."""
            port = free_port()
            running.append(_background([sys.executable, "-m", "floe_operator"],
                                       self.log(len(running)),
                                       {"FLOE_LIVENESS": f"http://127.0.0.1:{port}/healthz",
                                        "FLOE_METRICS_PORT": str(free_port()),
                                        "FLOE_NAMESPACES": namespace, **env}))
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
