"""The cluster's monitoring: the Prometheus Operator, installed from its own manifests (the
module it was built from: its CRDs and ``example/rbac/prometheus-operator``) with the image
built from ``images/prometheus-operator``, and the objects of a Prometheus server that watches
one namespace's ServiceMonitors, PodMonitors and PrometheusRules (the image built from
``images/prometheus``, Prometheus as built from the Go module proxy).

The stack installs the operator; a test (or a user of ``make demo``) makes a Prometheus."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from . import images, kube, paths
from .procs import ComponentError

NAMESPACE = "monitoring"
OPERATOR = "prometheus-operator"


def _log(message: str) -> None:
    import sys

    print(f"[stack] {message}", file=sys.stderr, flush=True)


def _kubectl(*args: str, stdin: str | None = None) -> str:
    return kube.run("kubectl", *args, stdin=stdin)


def _example(module: Path, name: str) -> list[dict[str, Any]]:
    folder = module / "example" / "rbac" / name
    return [
        doc
        for path in sorted(folder.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def _operator_objects(module: Path) -> list[dict[str, Any]]:
    """Upstream's install in namespace ``monitoring``, running the images built here; the
    image's ID on the pod, so that a rebuilt image (same tag) rolls it."""
    objects = [
        o
        for o in _example(module, "prometheus-operator")
        if o["kind"]
        in {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"}
    ]
    for thing in objects:
        if thing["metadata"].get("namespace"):
            thing["metadata"]["namespace"] = NAMESPACE
        for subject in thing.get("subjects", []):
            subject["namespace"] = NAMESPACE
        if thing["kind"] != "Deployment":
            continue
        template = thing["spec"]["template"]
        template["metadata"].setdefault("annotations", {})["floe.dev/image"] = (
            images.image_id(images.PROMETHEUS_OPERATOR_IMAGE) or ""
        )
        [container] = template["spec"]["containers"]
        container["image"] = images.PROMETHEUS_OPERATOR_IMAGE
        container["imagePullPolicy"] = "IfNotPresent"
        container["args"] = [
            (
                f"--prometheus-config-reloader={images.PROMETHEUS_OPERATOR_IMAGE}"
                if a.startswith("--prometheus-config-reloader=")
                else a
            )
            for a in container["args"]
        ]
        container["resources"] = {
            "requests": {"cpu": "10m", "memory": "64Mi"},
            "limits": {"memory": "200Mi"},
        }
    return objects


def install_prometheus_operator() -> None:
    from .provision import prometheus_operator_crds_dir

    started = time.monotonic()
    crds = prometheus_operator_crds_dir()
    # Several CRDs are larger than a client-side apply's last-applied annotation may be.
    _kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
    _kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))
    try:
        _kubectl("get", "namespace", NAMESPACE)
    except ComponentError:
        _kubectl("create", "namespace", NAMESPACE)
    _kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(_operator_objects(crds.parent.parent)))
    _kubectl("rollout", "status", "-n", NAMESPACE, f"deployment/{OPERATOR}", "--timeout=180s")
    _log(f"prometheus-operator: installed in {time.monotonic() - started:.0f}s")


def prometheus(
    namespace: str, scraped: tuple[str, ...] = (), name: str = "floe", interval: str = "5s"
) -> list[dict[str, Any]]:
    """A Prometheus server in ``namespace`` that scrapes and evaluates what that namespace's
    ServiceMonitors, PodMonitors and PrometheusRules say, with the account and the discovery
    rights it needs there and in the ``scraped`` namespaces (where those monitors find their
    pods). Apply them; its pod is ``prometheus-<name>-0``, its API on port 9090."""
    account = f"prometheus-{name}"
    own = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    rights = []
    for where in dict.fromkeys((namespace, *scraped)):
        rights += [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": account, "namespace": where},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["services", "endpoints", "pods"],
                        "verbs": ["get", "list", "watch"],
                    },
                    {
                        "apiGroups": ["discovery.k8s.io"],
                        "resources": ["endpointslices"],
                        "verbs": ["get", "list", "watch"],
                    },
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": account, "namespace": where},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": account,
                },
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            },
        ]
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": namespace},
        },
        *rights,
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "image": images.PROMETHEUS_IMAGE,
                "version": f"v{paths.PROMETHEUS_RELEASE}",
                "replicas": 1,
                "serviceAccountName": account,
                "scrapeInterval": interval,
                "evaluationInterval": interval,
                "serviceMonitorSelector": {},
                "serviceMonitorNamespaceSelector": own,
                "podMonitorSelector": {},
                "podMonitorNamespaceSelector": own,
                "ruleSelector": {},
                "ruleNamespaceSelector": own,
                "resources": {
                    "requests": {"cpu": "50m", "memory": "128Mi"},
                    "limits": {"memory": "512Mi"},
                },
            },
        },
    ]
