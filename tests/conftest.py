"""Shared fixtures: one local stack and one SparkSession per test run.

Integration and e2e tests use the running stack (``python -m hack.stack up``) and start it
when it is not up; a stack started here is stopped at the end unless FLOE_KEEP_STACK=1.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@dataclass
class Stack:
    state: dict[str, Any]
    env: dict[str, str]

    @property
    def bootstrap(self) -> str:
        return self.env["FLOE_KAFKA_BOOTSTRAP"]

    @property
    def registry_url(self) -> str:
        return self.env["FLOE_SCHEMA_REGISTRY_URL"]


def _remove_the_demo() -> None:
    """A `make demo` left floe and its job running on the node: they would take the cores the
    tests need (tests/e2e/test_node.py installs floe again)."""
    import subprocess

    from hack.demo import uninstall

    uninstall(lambda *args: subprocess.run(["kubectl", *args], capture_output=True))


# --- job starts: how many each test made and how long each took (tests/jobstarts.py) ---------

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    from .jobstarts import recorder
    from .waits import waits

    recorder.test = waits.test = item.nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    yield
    from .jobstarts import recorder

    directory = getattr(item, "funcargs", {}).get("tmp_path")
    recorder.local(item.nodeid, directory)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    from .jobstarts import recorder
    from .waits import waits

    for line in recorder.finish(ROOT / "reports" / "job-starts.json"):
        terminalreporter.write_line(line)
    for line in waits.finish(ROOT / "reports" / "waits.json"):
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    from hack import stack as local_stack

    state, started = local_stack.ensure_up()
    env = local_stack.connection_env(state)
    os.environ.update(env)
    _remove_the_demo()
    from kubernetes import config as kube_config

    from .jobstarts import recorder

    recorder.watch(kube_config.new_client_from_config(config_file=env["KUBECONFIG"]))
    yield Stack(state, env)
    if started and os.environ.get("FLOE_KEEP_STACK") != "1":
        local_stack.down()


@pytest.fixture(scope="session")
def spark(stack: Stack, tmp_path_factory: pytest.TempPathFactory):
    """A local SparkSession with the connector jars; catalogs are added per test."""
    from pyspark.sql import SparkSession

    from floe_sparkapp.session import SESSION_CONF

    scratch = tmp_path_factory.mktemp("spark")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("floe-tests")
        # On the driver's class path (not spark.jars): the stack's class-data-sharing
        # archive holds the connectors' classes there.
        .config("spark.driver.extraClassPath", stack.env["FLOE_SPARK_CLASSPATH"])
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config(map=SESSION_CONF)  # the job's own settings
        .config("spark.local.dir", str(scratch / "local"))
        .config("spark.sql.warehouse.dir", str(scratch / "spark-warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A name unique to this test and run, usable for topics, subjects and tables."""
    import uuid

    base = "".join(ch if ch.isalnum() else "_" for ch in request.node.name.lower())[:40]
    return f"{base}_{uuid.uuid4().hex[:8]}"
