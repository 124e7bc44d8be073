"""The Helm chart: linted, rendered for both RBAC modes, accepted by the real API server, and
installed, upgraded and uninstalled with helm against it."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from .kube import ROOT, admin_client, install_crd, wait_until

pytestmark = pytest.mark.e2e

CHART = str(ROOT / "charts" / "floe-operator")
CRDS = sorted((ROOT / "crds").glob("*.yaml"))


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["helm", *args], capture_output=True, text=True, timeout=120)
    assert not check or done.returncode == 0, done.stderr
    return done


def render(namespace: str, *settings: str) -> list[dict]:
    out = helm("template", "floe", CHART, "-n", namespace, *settings).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def container(docs: list[dict]) -> dict:
    [deployment] = by_kind(docs, "Deployment")
    [operator] = deployment["spec"]["template"]["spec"]["containers"]
    return operator


def env_of(docs: list[dict]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container(docs)["env"]}


OPERATOR_RULES = [
    {
        "apiGroups": ["floe.dev"],
        "resources": ["kafkaicebergtopics"],
        "verbs": ["get", "list", "watch", "patch", "update"],
    },
    {
        "apiGroups": ["floe.dev"],
        "resources": ["kafkaicebergtopics/status"],
        "verbs": ["get", "patch", "update"],
    },
    {
        "apiGroups": ["floe.dev"],
        "resources": ["kafkaicebergoperations"],
        "verbs": ["get", "list", "watch", "patch", "update"],
    },
    {
        "apiGroups": ["floe.dev"],
        "resources": ["kafkaicebergoperations/status"],
        "verbs": ["get", "patch", "update"],
    },
    {
        "apiGroups": ["sparkoperator.k8s.io"],
        "resources": ["sparkapplications"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]},
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["batch"],
        "resources": ["cronjobs"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "list", "watch"]},
]
DRIVER_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
        "verbs": [
            "get",
            "list",
            "watch",
            "create",
            "update",
            "patch",
            "delete",
            "deletecollection",
        ],
    }
]


def test_the_chart_lints_in_both_rbac_modes(stack):
    assert "0 chart(s) failed" in helm("lint", "--strict", CHART).stdout
    assert (
        "0 chart(s) failed"
        in helm("lint", "--strict", CHART, "--set", "watch.namespaces={team-a,team-b}").stdout
    )


def test_cluster_wide_mode_renders_a_cluster_role_and_a_hardened_deployment(stack):
    docs = render("floe-system")
    assert sorted({d["kind"] for d in docs}) == [
        "ClusterKopfPeering",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Pod",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]  # the Pod: `helm test`'s
    roles = {r["metadata"]["name"]: r for r in by_kind(docs, "ClusterRole")}
    assert set(roles) == {"floe-floe-operator", "floe-floe-operator-spark"}
    assert roles["floe-floe-operator"]["rules"] == [
        *OPERATOR_RULES,
        {
            "apiGroups": ["kopf.dev"],
            "resources": ["clusterkopfpeerings"],
            "resourceNames": ["floe"],
            "verbs": ["get", "patch"],
        },
        {
            "apiGroups": ["kopf.dev"],
            "resources": ["clusterkopfpeerings"],
            "verbs": ["list", "watch"],
        },
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["list", "watch"],
        },
        # The drivers' accounts where resources are: bound to the drivers' role, no other.
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["create", "patch"]},
        {
            "apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["rolebindings"],
            "verbs": ["get", "create", "patch"],
        },
        {
            "apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles"],
            "resourceNames": ["floe-floe-operator-spark"],
            "verbs": ["bind"],
        },
    ]
    assert roles["floe-floe-operator-spark"]["rules"] == DRIVER_RULES
    [binding] = by_kind(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "floe-floe-operator", "namespace": "floe-system"}
    ]
    # The only namespaced Role is the Spark drivers', in the release namespace.
    [spark_role] = by_kind(docs, "Role")
    assert (spark_role["metadata"]["name"], spark_role["metadata"]["namespace"]) == (
        "floe-spark",
        "floe-system",
    )
    assert spark_role["rules"] == DRIVER_RULES

    [deployment] = by_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "floe-floe-operator"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    operator = container(docs)
    assert operator["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert operator["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert operator["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {p["name"]: p["containerPort"] for p in operator["ports"]} == {
        "health": 8080,
        "metrics": 9090,
    }
    assert operator["resources"]["limits"]["memory"] == "1Gi"
    assert {"name": "tmp", "mountPath": "/tmp"} in operator["volumeMounts"]
    env = env_of(docs)
    assert env["FLOE_NAMESPACES"] == "" and env["FLOE_PEERING"] == "floe"
    assert env["FLOE_LIVENESS"] == "http://0.0.0.0:8080/healthz"
    assert env["FLOE_SPARK_IMAGE"] == "floe/floe-spark:0.1.0"
    assert env["FLOE_SPARK_ACCOUNT_ROLE"] == "floe-floe-operator-spark"
    [service] = by_kind(docs, "Service")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics"}]


def test_namespaced_mode_renders_roles_in_each_watched_namespace_and_nothing_cluster_wide(stack):
    docs = render(
        "floe-system", "--set", "watch.namespaces={team-a,team-b}", "--set", "replicaCount=2"
    )
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering"}
    operator_roles = [
        r for r in by_kind(docs, "Role") if r["metadata"]["name"] == "floe-floe-operator"
    ]
    assert sorted(r["metadata"]["namespace"] for r in operator_roles) == ["team-a", "team-b"]
    for role in operator_roles:
        assert role["rules"] == [
            *OPERATOR_RULES,
            {
                "apiGroups": ["kopf.dev"],
                "resources": ["kopfpeerings"],
                "verbs": ["get", "list", "watch", "patch"],
            },
        ]
    assert sorted(p["metadata"]["namespace"] for p in by_kind(docs, "KopfPeering")) == [
        "team-a",
        "team-b",
    ]
    spark_accounts = [
        a for a in by_kind(docs, "ServiceAccount") if a["metadata"]["name"] == "floe-spark"
    ]
    assert sorted(a["metadata"]["namespace"] for a in spark_accounts) == ["team-a", "team-b"]
    assert env_of(docs)["FLOE_NAMESPACES"] == "team-a,team-b"
    assert "FLOE_SPARK_ACCOUNT_ROLE" not in env_of(docs)  # the chart made them
    [deployment] = by_kind(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2


def test_the_monitors_rules_and_dashboard_are_optional(stack):
    defaults = render("floe-system")
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        assert not by_kind(defaults, kind), kind
    assert [c["metadata"]["name"] for c in by_kind(defaults, "ConfigMap")] == []
    [monitor] = by_kind(
        render(
            "floe-system",
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.serviceMonitor.labels.release=prom",
        ),
        "ServiceMonitor",
    )
    assert monitor["metadata"]["labels"]["release"] == "prom"
    # The operator's metrics keep their own namespace label: the resource's.
    assert monitor["spec"]["endpoints"] == [
        {
            "port": "metrics",
            "path": "/metrics",
            "interval": "30s",
            "honorLabels": True,
            "relabelings": [{"targetLabel": "job", "replacement": "floe-operator"}],
        }
    ]


@pytest.mark.parametrize(
    "setting, message",
    [
        ("replicaCount=-1", "at '/replicaCount': minimum: got -1, want 0"),
        ("watch.namespaces={Team_A}", "at '/watch/namespaces/0': 'Team_A' does not match pattern"),
        ("watch.namespace=team-a", "at '/watch': additional properties 'namespace' not allowed"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy': value must be one of"),
        ("peering.lifetime=5", "at '/peering/lifetime': minimum: got 5, want 10"),
        (
            "metrics.service.enabled=false,metrics.serviceMonitor.enabled=true",
            "metrics.serviceMonitor.enabled needs metrics.service.enabled",
        ),
    ],
)
def test_a_wrong_value_fails_with_a_clear_message(stack, setting, message):
    done = helm("template", "floe", CHART, "--set", setting, check=False)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


def _install_crds(stack) -> None:
    for crd in CRDS:
        install_crd(admin_client(stack), crd)


@pytest.mark.parametrize("mode", ["cluster-wide", "namespaced"])
def test_the_rendered_manifests_are_accepted_by_the_api_server(stack, namespace, mode):
    _install_crds(stack)
    settings = ["--set", f"watch.namespaces={{{namespace}}}"] if mode == "namespaced" else []
    rendered = helm("template", f"dry-{mode}", CHART, "-n", namespace, *settings).stdout
    applied = subprocess.run(
        ["kubectl", "apply", "--dry-run=server", "-n", namespace, "-f", "-", "-o", "name"],
        input=rendered,
        capture_output=True,
        text=True,
    )
    assert applied.returncode == 0, applied.stderr
    names = applied.stdout.split()
    expected_role = "clusterrole" if mode == "cluster-wide" else "role"
    assert f"deployment.apps/dry-{mode}-floe-operator" in names
    assert f"{expected_role}.rbac.authorization.k8s.io/dry-{mode}-floe-operator" in names


# Installed cluster-wide, its operator watches every namespace until it is uninstalled.
@pytest.mark.node
@pytest.mark.alone("kubernetes")
def test_helm_install_upgrade_and_uninstall(stack, namespace):
    _install_crds(stack)
    admin = admin_client(stack)
    apps, rbac = client.AppsV1Api(admin), client.RbacAuthorizationV1Api(admin)
    custom = client.CustomObjectsApi(admin)
    release = f"r{namespace[-8:]}"  # cluster-wide: its ClusterRole name must not clash
    fullname = f"{release}-floe-operator"
    installed = helm(
        "install",
        release,
        CHART,
        "-n",
        namespace,
        "--set",
        f"spark.namespaces={{{namespace}}}",
        "--set",
        f"peering.name={release}",
    )
    assert "STATUS: deployed" in installed.stdout
    assert "kubectl get kit -A --watch" in installed.stdout  # NOTES.txt tells the next step
    deployment = apps.read_namespaced_deployment(fullname, namespace)
    assert deployment.spec.template.spec.service_account_name == fullname
    assert rbac.read_cluster_role(fullname).rules
    assert custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", release)

    helm(
        "upgrade",
        release,
        CHART,
        "-n",
        namespace,
        "--reuse-values",
        "--set",
        "resources.limits.memory=1Gi",
        "--set",
        "replicaCount=2",
    )
    deployment = apps.read_namespaced_deployment(fullname, namespace)
    assert deployment.spec.replicas == 2
    assert deployment.spec.template.spec.containers[0].resources.limits["memory"] == "1Gi"
    [current] = json.loads(helm("list", "-n", namespace, "-o", "json").stdout)
    assert current["revision"] == "2" and current["status"] == "deployed"

    # A topic declared meanwhile survives the uninstall: the chart keeps CRDs and resources.
    custom.create_namespaced_custom_object(
        "floe.dev",
        "v1alpha1",
        namespace,
        "kafkaicebergtopics",
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "KafkaIcebergTopic",
            "metadata": {"name": "kept"},
            "spec": {
                "kafka": {"bootstrapServers": "k:9092", "topic": "t"},
                "value": {"format": "raw"},
                "table": {
                    "catalog": {"uri": "jdbc:sqlite:/tmp/c.db", "warehouse": "file:///tmp/w"},
                    "identifier": "db.t",
                },
            },
        },
    )
    helm("uninstall", release, "-n", namespace, "--wait")

    def gone(read) -> bool:
        try:
            read()
            return False
        except ApiException as error:
            return error.status == 404

    assert wait_until(lambda: gone(lambda: apps.read_namespaced_deployment(fullname, namespace)))
    assert gone(lambda: rbac.read_cluster_role(fullname))
    assert gone(lambda: rbac.read_cluster_role_binding(fullname))
    assert custom.get_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "kept"
    )
    client.ApiextensionsV1Api(admin).read_custom_resource_definition("kafkaicebergtopics.floe.dev")


def test_the_readmes_spark_operator_install_serves_every_namespace(stack, tmp_path):
    """The README's spark-operator values, rendered with spark-operator's own chart (the one the
    stack installs): its controller serves every namespace, through cluster-wide rules."""
    import re

    from hack.stack.cluster import spark_operator_chart

    readme = (ROOT / "README.md").read_text()
    printed = re.search(
        r"printf '(spark:\\n  jobNamespaces: \[\"\"\]\\n)' \| helm upgrade "
        r"--install spark-operator",
        readme,
    )
    assert printed, "the README's spark-operator install is gone"
    values = tmp_path / "values.yaml"
    values.write_text(printed.group(1).replace("\\n", "\n"))
    docs = [
        d
        for d in yaml.safe_load_all(
            helm(
                "template",
                "spark-operator",
                spark_operator_chart(),
                "-n",
                "spark-operator",
                "-f",
                str(values),
            ).stdout
        )
        if d
    ]
    [controller] = [
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("controller")
    ]
    args = controller["spec"]["template"]["spec"]["containers"][0]["args"]
    assert '--namespaces=""' in args  # every namespace, not its chart's default one
    assert [
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("controller")
    ]


def test_the_chart_as_well_liked_operator_charts_have_it(stack):
    """A PodDisruptionBudget once there are standbys, a schema that takes a parent chart's
    global values, and the Kubernetes versions it needs said up front."""
    assert not by_kind(render("floe-system"), "PodDisruptionBudget")
    [budget] = by_kind(render("floe-system", "--set", "replicaCount=2"), "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "floe-operator"
    assert render("floe-system", "--set", "global.imageRegistry=registry.example")  # as a subchart
    old = helm("template", "floe", CHART, "--kube-version", "1.26.0", check=False)
    assert old.returncode != 0 and "chart requires kubeVersion: >=1.27.0-0" in old.stderr
    [test_pod] = [d for d in render("floe-system") if d["kind"] == "Pod"]
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
