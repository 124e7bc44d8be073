"""The GitOps example (examples/gitops): each overlay builds with kubectl's bundled kustomize and
the real API server accepts what it builds, with the CRD's strict schema and defaults."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from .kube import FLOE_CRD, ROOT, admin_client, install_crd, wait_until

pytestmark = pytest.mark.e2e

GITOPS = ROOT / "examples" / "gitops"
# What a user would check per environment after `kubectl apply -k`.
OVERLAYS = {
    "staging": {
        "namespace": "data-staging",
        "interval": "15s",
        "identifier": "staging.orders",
        "executors": 1,
        "executor_memory": "1g",
    },
    "production": {
        "namespace": "data-production",
        "interval": "60s",
        "identifier": "analytics.orders",
        "executors": 3,
        "executor_memory": "4g",
    },
}
SECRETS = {"kafka-auth", "schema-registry-auth", "lake-credentials"}


def kustomize(path) -> list[dict]:
    built = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return [doc for doc in yaml.safe_load_all(built.stdout) if doc]


def server_dry_run(objects: list[dict], *extra: str) -> dict:
    """`kubectl apply --dry-run=server` (strict field validation): the object as stored."""
    applied = subprocess.run(
        ["kubectl", "apply", "--dry-run=server", "-o", "yaml", *extra, "-f", "-"],
        input=yaml.safe_dump_all(objects),
        capture_output=True,
        text=True,
    )
    assert applied.returncode == 0, applied.stderr
    return yaml.safe_load(applied.stdout)


def secret_names(spec: dict) -> set[str]:
    return {
        spec["kafka"]["authSecretRef"]["name"],
        spec["value"]["schemaRegistry"]["authSecretRef"]["name"],
        spec["table"]["catalog"]["secretRef"]["name"],
    }


@pytest.fixture
def overlay_namespaces(stack):
    """The overlays' fixed namespaces, which a server dry-run needs to exist; the ones created
    here are deleted afterwards (and waited for, so the next run can create them again)."""
    core = client.CoreV1Api(admin_client(stack))
    created = []
    for expected in OVERLAYS.values():
        name = expected["namespace"]
        try:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
            created.append(name)
        except ApiException as error:
            assert error.status == 409, error
    yield
    for name in created:
        core.delete_namespace(name)

    def gone(name: str) -> bool:
        try:
            core.read_namespace(name)
        except ApiException as error:
            return error.status == 404
        return False

    for name in created:
        assert wait_until(lambda: gone(name), timeout=60), f"namespace {name} not deleted"  # noqa: B023 - called within this iteration


def test_each_overlay_builds_and_the_api_server_accepts_it(stack, overlay_namespaces):
    install_crd(admin_client(stack), FLOE_CRD)
    seen = {}
    for overlay, expected in OVERLAYS.items():
        objects = kustomize(GITOPS / "overlays" / overlay)
        assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
            ("KafkaIcebergTopic", "orders")
        ]
        # No Secret is in git: the topic only names them.
        assert secret_names(objects[0]["spec"]) == SECRETS

        stored = server_dry_run(objects)
        spec = stored["spec"]
        assert stored["metadata"]["namespace"] == expected["namespace"]
        assert stored["metadata"]["labels"]["environment"] == overlay
        assert spec["commit"]["interval"] == expected["interval"]
        assert spec["table"]["identifier"] == expected["identifier"]
        assert spec["spark"]["executor"]["instances"] == expected["executors"]
        assert spec["spark"]["executor"]["memory"] == expected["executor_memory"]
        assert secret_names(spec) == SECRETS
        # The base's shared fields survive the patches, and the server fills the defaults.
        assert spec["kafka"]["topic"] == "orders"
        assert spec["kafka"]["properties"]["security.protocol"] == "SASL_SSL"
        assert spec["table"]["deletionPolicy"] == "Retain"
        assert spec["suspend"] is False
        seen[overlay] = (
            stored["metadata"]["namespace"],
            spec["commit"]["interval"],
            spec["table"]["identifier"],
        )
    # Every field an environment owns differs between them.
    for field in zip(*seen.values()):
        assert len(set(field)) == len(OVERLAYS), seen


def test_the_base_alone_is_a_valid_topic_in_any_namespace(stack, namespace):
    install_crd(admin_client(stack), FLOE_CRD)
    objects = kustomize(GITOPS / "base")
    assert "namespace" not in objects[0]["metadata"]  # the overlays decide it
    stored = server_dry_run(objects, "-n", namespace)
    assert stored["metadata"]["namespace"] == namespace
    assert stored["spec"]["commit"] == {
        "interval": "60s",
        "maxRecordsPerCommit": 2000000,
        "maxBytesPerCommit": "512Mi",
    }
