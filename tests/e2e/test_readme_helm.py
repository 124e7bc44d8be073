"""The Helm commands of docs/install.md, run as written against the local API server."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from .kube import ROOT, admin_client, wait_until

# The chart installed as written, cluster-wide (every namespace watched, the CRDs applied anew):
# no other test of the stack runs beside it.
pytestmark = [pytest.mark.e2e, pytest.mark.node, pytest.mark.alone("kubernetes")]

MARKER = "<!-- The commands of this block are run as written by tests/e2e/test_readme_helm.py. -->"
UPGRADE = (
    "<!-- The commands of this block are run as written by tests/e2e/test_readme_helm.py too. -->"
)


def readme_commands(marker: str = MARKER) -> list[str]:
    text = (ROOT / "docs" / "install.md").read_text()
    block = text[text.index(marker) + len(marker) :].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_the_readmes_helm_install_upgrade_and_uninstall_work_as_written(stack):
    commands = readme_commands()
    assert [c.split()[:2] for c in commands] == [
        ["helm", "install"],
        ["kubectl", "get"],
        ["helm", "upgrade"],
        ["helm", "uninstall"],
    ]
    upgrade = readme_commands(UPGRADE)  # the CRDs applied, the release upgraded, helm test
    assert [c.split()[:2] for c in upgrade] == [
        ["kubectl", "apply"],
        ["helm", "upgrade"],
        ["helm", "test"],
    ]
    apps = client.AppsV1Api(admin_client(stack))
    core = client.CoreV1Api(admin_client(stack))

    def deployment():
        try:
            return apps.read_namespaced_deployment("floe-floe-operator", "floe-system")
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def namespace_gone() -> bool:  # a previous run's namespace may still be terminating
        try:
            core.read_namespace("floe-system")
            return False
        except ApiException as error:
            return error.status == 404

    assert wait_until(namespace_gone, timeout=120)
    try:
        outputs = []

        def run(command: str) -> None:
            done = subprocess.run(
                shlex.split(command), cwd=ROOT, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, f"{command}\n{done.stderr}"
            outputs.append(done.stdout)

        for command in commands[:2]:
            run(command)
        assert deployment().spec.replicas == 1
        # The operator up (a user runs `helm test` once it is), then the upgrade as written.
        assert wait_until(lambda: (deployment().status.ready_replicas or 0) == 1, timeout=180)
        for command in upgrade:
            run(command)
        assert "Phase:          Succeeded" in outputs[-1], outputs[-1]
        for command in commands[2:]:
            run(command)
            if command.startswith("helm upgrade"):
                assert deployment().spec.replicas == 2
        assert "Next steps" in outputs[0]
        assert wait_until(lambda: deployment() is None, timeout=60)
    finally:
        subprocess.run(
            ["helm", "uninstall", "floe", "--namespace", "floe-system"], capture_output=True
        )
        try:
            core.delete_namespace("floe-system")
        except ApiException as error:
            assert error.status == 404
