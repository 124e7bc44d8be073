"""What the control plane's parts share, below them all: where its files are (the admin
kubeconfig, the API server's CA), the flags kube-controller-manager and kube-scheduler take
alike, the HTTP probe of a health endpoint, and how the stack runs ``kubectl`` and ``helm``
as the admin.  :mod:`.components` (etcd, the API server, the controller manager), :mod:`.node`
(the kubelet, the scheduler, kube-proxy, CoreDNS), :mod:`.cluster` and :mod:`.monitoring`
take these from here, so none of them imports another for them."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from . import paths
from .procs import ComponentError

State = dict[str, Any]

# The components serve TLS with the stack's own self-signed certificates: probes do not verify.
NO_VERIFY = ssl.create_default_context()
NO_VERIFY.check_hostname = False
NO_VERIFY.verify_mode = ssl.CERT_NONE


def http_ok(url: str, token: str | None = None, ok_codes: tuple[int, ...] = (200,)) -> bool:
    """Whether ``url`` answers with one of ``ok_codes`` (a health probe)."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2, context=NO_VERIFY) as response:
            return response.status in ok_codes
    except urllib.error.HTTPError as error:
        return error.code in ok_codes


def kube_dir() -> Path:
    return paths.RUN / "kube"


def kubeconfig_path() -> Path:
    return kube_dir() / "kubeconfig"


def ca_path() -> Path:
    """The API server's serving certificate and its self-signed CA, made at its first start."""
    return kube_dir() / "certs" / "apiserver.crt"


def write_kubeconfig(path: Path, server: str, user: str, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "floe-local",
        "clusters": [
            {
                "name": "floe-local",
                "cluster": {"server": server, "certificate-authority": str(ca_path())},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": "floe-local",
                "context": {"cluster": "floe-local", "user": user, "namespace": "default"},
            }
        ],
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)


def control_plane_flags(state: State, port: str) -> list[str]:
    """What kube-controller-manager and kube-scheduler share: the admin kubeconfig for the API
    and for checking their own callers, and a secure port on loopback."""
    return [
        f"--kubeconfig={kubeconfig_path()}",
        f"--authentication-kubeconfig={kubeconfig_path()}",
        f"--authorization-kubeconfig={kubeconfig_path()}",
        "--bind-address=127.0.0.1",
        f"--secure-port={state['ports'][port]}",
        "--leader-elect=false",
    ]


def tool_env() -> dict[str, str]:
    """The environment ``kubectl`` and ``helm`` run in: the admin kubeconfig, the stack's
    tools first on the path."""
    return {**os.environ, "KUBECONFIG": str(kubeconfig_path()), "PATH": paths.tool_path()}


def run(*cmd: str, stdin: str | None = None) -> str:
    """Runs a cluster tool as the admin; its output, or :class:`ComponentError` with it."""
    result = subprocess.run(list(cmd), input=stdin, capture_output=True, text=True, env=tool_env())
    if result.returncode != 0:
        raise ComponentError(f"{' '.join(cmd[:3])} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout
