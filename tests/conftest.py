"""Shared fixtures: one local stack and one SparkSession per test run.

Integration and e2e tests use the running stack (``python -m hack.stack up``) and start it
when it is not up; a stack started here is stopped at the end unless FLOE_KEEP_STACK=1.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import groups

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


# --- the groups side by side (tests/groups.py) ---------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--group",
        choices=groups.GROUPS,
        default=None,
        help="run one group of the suite alone (tests/groups.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "xdist_group(name): the group a test runs in")
    if not groups.is_worker(config):
        groups.run_directory()  # made before the workers start: they inherit its path


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    only = config.getoption("--group")
    kept, deselected = [], []
    for item in items:
        group = groups.group_of(item)
        if only is not None and group != only:
            deselected.append(item)
            continue
        if group != "free":
            item.add_marker(pytest.mark.xdist_group(group))
        kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_collection_finish(session: pytest.Session) -> None:
    """The groups must hold: xdist groups tests by a suffix of their ids, which some pytest
    releases drop (the groups would then run spread over every worker)."""
    if (
        groups.is_worker(session.config)
        and session.config.getoption("dist", "no") == "no"
        and getattr(session.config.option, "loadgroup", False)
    ):
        spread = [
            item.nodeid
            for item in session.items
            if groups.group_of(item) != "free" and "@" not in item.nodeid
        ]
        if spread:
            raise pytest.UsageError(
                f"xdist did not group {spread[0]} (and {len(spread) - 1} "
                "more): this pytest and pytest-xdist do not work together"
            )


# --- job starts and waits: how many each test made and how long each took ------------------


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    from .jobstarts import recorder
    from .waits import waits

    recorder.test = waits.test = item.nodeid
    item.user_properties.append(("group", groups.group_of(item)))
    item.user_properties.append(("worker", groups.worker_id(item.config)))
    item.user_properties.append(("started", f"{time.time():.3f}"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    yield
    from .jobstarts import recorder

    directory = getattr(item, "funcargs", {}).get("tmp_path")
    recorder.local(item.nodeid, directory)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Each process keeps what it saw; the controller merges them (pytest_terminal_summary),
    and stops a stack that this run started."""
    from .jobstarts import recorder
    from .waits import waits

    parts = groups.run_directory()
    name = groups.worker_id(session.config)
    recorder.dump(parts / f"job-starts.{name}.json")
    waits.dump(parts / f"waits.{name}.json")
    if (
        not groups.is_worker(session.config)
        and (parts / "stack-started").exists()
        and os.environ.get("FLOE_KEEP_STACK") != "1"
    ):
        from hack import stack as local_stack

        local_stack.down()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    from .jobstarts import Recorder
    from .waits import Waits

    parts = groups.run_directory()
    for line in Recorder.summarize(
        parts.glob("job-starts.*.json"), ROOT / "reports" / "job-starts.json"
    ):
        terminalreporter.write_line(line)
    for line in Waits.summarize(parts.glob("waits.*.json"), ROOT / "reports" / "waits.json"):
        terminalreporter.write_line(line)
    junit = config.option.xmlpath  # written by now (pytest's junitxml ends the session first)
    if junit and Path(junit).exists():
        from .suite_report import summary

        for line in summary(Path(junit)):
            terminalreporter.write_line(line)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """A test of the stack holds the parts it uses shared, those it needs alone exclusively,
    and what it `holds` alone (tests/groups.py); outside the test's timeout, which counts from
    its setup."""
    if "stack" not in item.fixturenames:
        yield
        return
    directory = groups.run_directory()
    alone = groups.parts_alone(item)
    asked = time.monotonic()
    with contextlib.ExitStack() as held:
        for name in groups.holds(item):
            held.enter_context(groups.file_lock(directory / f"holds-{name}.lock"))
        for part in groups.PARTS:
            if part in alone or part in groups.parts_used(item):
                held.enter_context(groups.part_held(directory, part, part in alone))
        # how long it waited for the tests beside it (not in its time in the report)
        item.user_properties.append(("waited", f"{time.monotonic() - asked:.1f}"))
        yield


@pytest.fixture(autouse=True)
def _driver_pods_recorded(request: pytest.FixtureRequest) -> None:
    """The node's tests have their driver pods recorded (tests/jobstarts.py): only the one
    process that runs them watches the pods."""
    if groups.group_of(request.node) == "node" and "stack" in request.node.fixturenames:
        from kubernetes import config as kube_config

        from .jobstarts import recorder

        env = request.getfixturevalue("stack").env
        recorder.watch(kube_config.new_client_from_config(config_file=env["KUBECONFIG"]))


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """The running stack, started by the first worker that needs it (the others wait for it),
    and stopped by the controller at the run's end when this run started it."""
    from hack import stack as local_stack

    parts = groups.run_directory()
    with groups.file_lock(parts / "stack-up.lock"):
        ready = (parts / "stack-ready").exists()
        if ready:
            state = local_stack.load_state()
            assert state is not None, "the stack went down during the run"
        else:
            state, started = local_stack.ensure_up()
            if started:
                (parts / "stack-started").touch()
        env = local_stack.connection_env(state)
        os.environ.update(env)  # the stack's tools on the PATH before the demo is removed
        if not ready:
            _remove_the_demo()
            from .leftovers import clear_topics

            clear_topics(env["FLOE_KAFKA_BOOTSTRAP"])
            (parts / "stack-ready").touch()
    yield Stack(state, env)


@pytest.fixture(scope="session")
def spark(stack: Stack, tmp_path_factory: pytest.TempPathFactory):
    """A local SparkSession with the connector jars; catalogs are added per test."""
    from pyspark.sql import SparkSession

    from floe_sparkapp.session import SESSION_CONF
    from hack.stack.cds import jit_options

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
        # The image's JIT thresholds, as a job's driver has them (hack/stack/cds.py).
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch} {jit_options()}")
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
