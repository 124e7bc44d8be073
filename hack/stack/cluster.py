"""What the local cluster runs once its node is up: the node Ready, kubeflow spark-operator
installed with its own Helm chart (from the Go module it was built from) and the image built
from ``images/spark-operator``, and the Prometheus Operator (:mod:`.monitoring`)."""

from __future__ import annotations

import subprocess
import sys
import time
from functools import partial

from . import images, kube, monitoring, node, paths
from .procs import ComponentError

SPARK_OPERATOR_NAMESPACE = "spark-operator"
SPARK_OPERATOR_RELEASE = "spark-operator"
# Where the real spark-operator runs applications: the namespace of the example resources (the
# demo, and the tests of floe installed with Helm), and the two where the e2e tests that run
# the operator as a process run their jobs, one test at a time, in turn: the one a test is done
# with is deleted and made again while the next test runs in the other.  Other test namespaces
# get no Spark: their SparkApplications stay objects in the API server.
JOB_NAMESPACES = ("data", "e2e-jobs", "e2e-jobs-2")


def _log(message: str) -> None:
    print(f"[stack] {message}", file=sys.stderr, flush=True)


def spark_operator_chart() -> str:
    modcache = subprocess.run(
        ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return (
        f"{modcache}/github.com/kubeflow/spark-operator/v2@{paths.SPARK_OPERATOR_VERSION}"
        "/charts/spark-operator-chart"
    )


def _wait(what: str, probe, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise ComponentError(f"{what} not ready after {timeout:.0f}s")
        time.sleep(1)


def _namespace_active(namespace: str) -> bool:
    """True once the namespace exists; makes it when absent (one a test run is deleting is
    waited for: the chart puts spark-operator's Roles in it)."""
    phase = subprocess.run(
        ["kubectl", "get", "namespace", namespace, "-o", "jsonpath={.status.phase}"],
        capture_output=True,
        text=True,
        env=kube.tool_env(),
    )
    if phase.returncode != 0 and "NotFound" in phase.stderr:
        subprocess.run(
            ["kubectl", "create", "namespace", namespace], capture_output=True, env=kube.tool_env()
        )
        return False
    return phase.stdout == "Active"


def install_spark_operator() -> None:
    registry, _, rest = images.SPARK_OPERATOR_IMAGE.partition("/")
    repository, _, tag = rest.partition(":")
    # The image's ID on its pods: a rebuilt image (same tag) rolls them, or they would keep
    # running the image they started with.
    image = images.image_id(images.SPARK_OPERATOR_IMAGE) or ""
    started = time.monotonic()
    for namespace in JOB_NAMESPACES:
        _wait(f"namespace {namespace}", partial(_namespace_active, namespace), 300)
    kube.run(
        "helm",
        "upgrade",
        "--install",
        SPARK_OPERATOR_RELEASE,
        spark_operator_chart(),
        "--namespace",
        SPARK_OPERATOR_NAMESPACE,
        "--create-namespace",
        "--set",
        f"image.registry={registry}",
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set-string",
        f"controller.annotations.floe\\.dev/image={image}",
        "--set-string",
        f"webhook.annotations.floe\\.dev/image={image}",
        "--set",
        f"spark.jobNamespaces={{{','.join(JOB_NAMESPACES)}}}",
        # floe's chart makes the drivers' ServiceAccount and its Role.
        "--set",
        "spark.serviceAccount.create=false",
        "--set",
        "spark.rbac.create=false",
        "--set",
        "controller.leaderElection.enable=false",
        "--set",
        "controller.workers=4",
        "--set",
        "controller.uiService.enable=false",
        # Its webhook makes each driver pod owned by its SparkApplication (and sets defaults):
        # without it a deleted application would leave its driver running.
        "--set",
        "webhook.enable=true",
        "--set",
        "webhook.leaderElection.enable=false",
        "--wait",
        "--timeout",
        "5m",
    )
    _log(f"spark-operator: installed in {time.monotonic() - started:.0f}s")


def serve_namespace(namespace: str) -> None:
    """Gives spark-operator back its Roles in a job namespace that was deleted and made again
    (they went with the namespace; its chart makes them in each namespace it serves)."""
    import yaml

    manifest = kube.run(
        "helm", "get", "manifest", SPARK_OPERATOR_RELEASE, "--namespace", SPARK_OPERATOR_NAMESPACE
    )
    objects = [
        o
        for o in yaml.safe_load_all(manifest)
        if o and o.get("metadata", {}).get("namespace") == namespace
    ]
    if not objects:
        raise ComponentError(f"spark-operator does not serve the namespace {namespace}")
    kube.run("kubectl", "apply", "-f", "-", stdin=yaml.safe_dump_all(objects))


def ready(state: dict) -> None:
    from .components import apiserver_url

    started = time.monotonic()
    _wait("the node", lambda: node.node_ready(state["tokens"]["admin"], apiserver_url(state)), 120)
    _log(f"node {node.NODE_NAME}: Ready in {time.monotonic() - started:.0f}s")
    install_spark_operator()
    monitoring.install_prometheus_operator()
