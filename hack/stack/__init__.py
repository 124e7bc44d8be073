"""The local stack of real components: ``python -m hack.stack up|down|status|env``.

Tests and the demo use :func:`ensure_up` and :func:`connection_env`; fault tests use
:func:`stop_component` and :func:`start_component` to restart a single component in place.
"""

from __future__ import annotations

import json
import shutil
import sys
import time

from . import cds, cluster, components, images, kube, node, paths, procs, provision
from .components import COMPONENTS, WAVES, State
from .procs import ComponentError


def _log(message: str) -> None:
    print(f"[stack] {message}", file=sys.stderr, flush=True)


def load_state() -> State | None:
    if not paths.STATE_FILE.exists():
        return None
    return json.loads(paths.STATE_FILE.read_text())


def _save_state(state: State) -> None:
    paths.RUN.mkdir(parents=True, exist_ok=True)
    paths.STATE_FILE.write_text(json.dumps(state, indent=2))
    paths.STATE_FILE.chmod(0o600)


def health(state: State | None = None) -> dict[str, bool]:
    state = state or load_state()
    result = {}
    for name, component in COMPONENTS.items():
        try:
            result[name] = (
                bool(state) and procs.pid_of(name) is not None and component.healthy(state)
            )
        except Exception:  # noqa: BLE001 - a probe failing in any way is a component down
            result[name] = False
    return result


def is_up() -> bool:
    state = load_state()
    return state is not None and all(health(state).values())


def _start(state: State, names: list[str]) -> dict[str, float]:
    timings: dict[str, float] = {}
    started: list[str] = []
    spawned_at: dict[str, float] = {}
    for name in names:
        component = COMPONENTS[name]
        if procs.pid_of(name) is not None and component.healthy(state):
            continue
        procs.stop(name)
        component.prepare(state)
        procs.spawn(name, component.command(state), cwd=paths.RUN)
        spawned_at[name] = time.monotonic()
        started.append(name)
    for name in started:
        procs.wait_healthy(
            name, lambda c=COMPONENTS[name]: c.healthy(state), COMPONENTS[name].timeout
        )
        timings[name] = time.monotonic() - spawned_at[name]
        _log(f"{name}: healthy {timings[name]:.1f}s after start")
    return timings


def _state_to_start() -> State:
    state = load_state()
    running = any(procs.pid_of(n) for n in COMPONENTS)
    if state is None or (not running and not _ports_free(state)):
        # First start, or another program took our ports: start over with fresh ports and data.
        _wipe_run_dir()
        state = components.new_state()
    _save_state(components.complete_state(state))
    return state


def provision_all() -> State:
    """Everything a start needs: provision.py's downloads and Go builds and, beside the Go
    builds, floe's images.  Those need the node's containerd and dockerd (Debian's, nothing to
    build), which start here and stay up for :func:`up`."""
    state = _state_to_start()
    node.network_up()
    try:
        for name in ("containerd", "dockerd"):
            _start(state, [name])
        provision.all_components(then=images.build_floe_images)
    except (ComponentError, provision.ProvisionError):
        down()
        raise
    return state


def up() -> State:
    """Provisions what is missing, then starts every component that is not running."""
    started = time.monotonic()
    state = provision_all()
    try:
        for wave in WAVES:
            _start(state, wave)
        images.build_and_import()
        cluster.ready(state)
        cds.ensure_archive(spark_classpath())
    except ComponentError:
        down()
        raise
    _log(f"stack up in {time.monotonic() - started:.1f}s; run directory {paths.RUN}")
    return state


def _wipe_run_dir() -> None:
    if paths.RUN.exists():
        shutil.rmtree(paths.RUN)
    paths.RUN.mkdir(parents=True)


def _ports_free(state: State) -> bool:
    return not any(
        procs.port_open(p, host)
        for p in state["ports"].values()
        for host in ("127.0.0.1", node.NODE_IP)
    )


def down() -> None:
    for wave in reversed(WAVES):
        for name in wave:
            if name == "containerd":
                node.stop_containers()  # the pods' processes are not containerd's children
            if procs.stop(name):
                _log(f"{name}: stopped")


def ensure_up() -> tuple[State, bool]:
    """Returns the running stack's state, starting it first if needed (second item True)."""
    state = load_state()
    if state is not None and all(health(state).values()):
        images.build_and_import()  # the images hold the code under test: keep them current
        cluster.install_spark_operator()  # and the namespaces it serves
        cds.ensure_archive(spark_classpath())
        return state, False
    return up(), True


def spark_classpath() -> str:
    """The connector jars and floe's as a class path (for ``--driver-class-path``)."""
    return ":".join(provision.spark_jar_list())


def stop_component(name: str, *, kill: bool = False) -> None:
    procs.stop(name, kill=kill)


def start_component(name: str) -> float:
    state = load_state()
    assert state is not None, "the stack is not up"
    return _start(state, [name]).get(name, 0.0)


def connection_env(state: State) -> dict[str, str]:
    """The connection settings of the running stack, as environment variables."""
    ports = state["ports"]
    s3 = state["s3"]
    jars = provision.spark_jar_list()
    classpath = ":".join(jars)
    archive = cds.archive_path(classpath)
    return {
        "FLOE_STACK_RUN": str(paths.RUN),
        "FLOE_KAFKA_BOOTSTRAP": f"{node.NODE_IP}:{ports['kafka']}",
        "FLOE_SCHEMA_REGISTRY_URL": f"http://{node.NODE_IP}:{ports['registry']}/apis/ccompat/v7",
        "FLOE_S3_ENDPOINT": f"http://{node.NODE_IP}:{ports['s3']}",
        "FLOE_S3_ACCESS_KEY": s3["access_key"],
        "FLOE_S3_SECRET_KEY": s3["secret_key"],
        "FLOE_S3_BUCKET": s3["bucket"],
        "FLOE_S3_REGION": s3["region"],
        "FLOE_GCS_ENDPOINT": components.gcs_endpoint(state),
        "FLOE_GCS_BUCKET": components.GCS_BUCKET,
        "FLOE_ADLS_ENDPOINT": components.adls_endpoint(state),
        "FLOE_ADLS_ACCOUNT": state["adls"]["account"],
        "FLOE_ADLS_KEY": state["adls"]["key"],
        "FLOE_ADLS_CONTAINER": state["adls"]["container"],
        "FLOE_POSTGRES_JDBC": components.postgres_jdbc_uri(state),
        "FLOE_POSTGRES_USER": components.POSTGRES_USER,
        "FLOE_POSTGRES_PASSWORD": state["postgres"]["password"],
        "FLOE_REST_CATALOG_URI": components.rest_catalog_uri(state),
        "FLOE_REST_CATALOG_WAREHOUSE": components.rest_catalog_warehouse(state),
        "FLOE_TOXIPROXY_URL": components.toxiproxy_url(state),
        # The same neighbours through their fault proxies (tests/faultproxy.py adds the faults)
        "FLOE_FAULTY_KAFKA_BOOTSTRAP": components.proxied_address(state, "kafka"),
        "FLOE_FAULTY_SCHEMA_REGISTRY_URL": (
            f"http://{components.proxied_address(state, 'registry')}/apis/ccompat/v7"
        ),
        "FLOE_FAULTY_S3_ENDPOINT": f"http://{components.proxied_address(state, 's3')}",
        "FLOE_FAULTY_POSTGRES_JDBC": f"jdbc:postgresql://"
        f"{components.proxied_address(state, 'postgres')}/"
        f"{components.POSTGRES_DATABASE}",
        "FLOE_FAULTY_REST_CATALOG_URI": (
            f"http://{components.proxied_address(state, 'rest_catalog')}"
        ),
        "FLOE_SPARK_JARS": ",".join(jars),
        # The same jars on the driver's class path, where the JVMs' class-data-sharing archive
        # (hack/stack/cds.py) holds their classes too: a local JVM starts seconds sooner. A local
        # JVM compiles with the Spark image's JIT thresholds, as the job's driver does.
        "FLOE_SPARK_CLASSPATH": classpath,
        "SPARK_SUBMIT_OPTS": " ".join(
            ([f"-XX:SharedArchiveFile={archive}"] if archive.exists() else []) + [cds.jit_options()]
        ),
        "FLOE_KUBE_SERVER": components.apiserver_url(state),
        "FLOE_NODE_SHARED": str(node.shared_dir()),
        "FLOE_KUBE_CA": str(kube.ca_path()),
        "FLOE_KUBE_NOBODY_TOKEN": state["tokens"]["nobody"],
        "KUBECONFIG": str(kube.kubeconfig_path()),
        "PATH": paths.tool_path(),
    }


__all__ = [
    "ComponentError",
    "State",
    "connection_env",
    "down",
    "ensure_up",
    "health",
    "is_up",
    "load_state",
    "paths",
    "provision_all",
    "start_component",
    "stop_component",
    "up",
]
