"""The node's images, built here from the repository's Dockerfiles: no registry is reachable.

A Debian bookworm base is made once with ``debootstrap`` and imported into dockerd; the pause
image is Kubernetes' own ``pause.c`` compiled statically; floe's operator and Spark images and
spark-operator's image are ``docker build`` of ``images/`` on that base.  Each image is then
copied into containerd's ``k8s.io`` namespace, where the kubelet finds it, whenever its ID
differs from the copy there.  Docker's layer cache (under ``FLOE_CACHE``) makes an unchanged
build take seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from . import node, paths
from .procs import ComponentError

BASE_IMAGE = "floe.local/debian:bookworm"
OPERATOR_IMAGE = "floe/floe-operator:0.1.0"
SPARK_IMAGE = "floe/floe-spark:0.1.0"
SPARK_OPERATOR_IMAGE = f"floe.local/spark-operator:{paths.SPARK_OPERATOR_VERSION}"
PROMETHEUS_OPERATOR_IMAGE = f"floe.local/prometheus-operator:{paths.PROMETHEUS_OPERATOR_VERSION}"
PROMETHEUS_IMAGE = f"floe.local/prometheus:v{paths.PROMETHEUS_RELEASE}"

# Trust stores handed to builds as optional secrets, for machines whose egress re-signs TLS.
_SECRETS = {
    "ca-certificates": Path("/etc/ssl/certs/ca-certificates.crt"),
    "java-cacerts": Path("/etc/ssl/certs/java/cacerts"),
}


def _log(message: str) -> None:
    print(f"[stack] {message}", file=sys.stderr, flush=True)


def _run(cmd: list[str], what: str, **kwargs) -> str:
    log_file = paths.CACHE / "logs" / f"image-{what}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **node.docker_env()}
    with log_file.open("w") as out:
        result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=out, env=env, **kwargs)
    if result.returncode != 0:
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-30:])
        raise ComponentError(f"image {what}: {' '.join(cmd[:3])} failed:\n{tail}")
    return result.stdout.decode(errors="replace") if isinstance(result.stdout, bytes) else ""


def _docker(*args: str, what: str) -> str:
    return _run([node.DOCKER, *args], what)


def image_id(tag: str) -> str | None:
    result = subprocess.run(
        [node.DOCKER, "image", "inspect", "--format", "{{.Id}}", tag],
        capture_output=True,
        text=True,
        env={**os.environ, **node.docker_env()},
    )
    return result.stdout.strip() if result.returncode == 0 else None


def base_rootfs() -> Path:
    """Debian bookworm (minbase) from debootstrap, once; needs no daemon, so provisioning makes
    it while the Go builds run."""
    root = paths.CACHE / "images" / "debian-bookworm"
    if not (root / ".complete").exists():
        started = time.monotonic()
        _log("making the Debian base image's root with debootstrap (first time only)")
        subprocess.run(["rm", "-rf", str(root)], check=True)
        root.mkdir(parents=True)
        _run(["debootstrap", "--variant=minbase", "bookworm", str(root / "rootfs")], "debootstrap")
        subprocess.run(
            [
                "rm",
                "-rf",
                *map(str, (root / "rootfs" / "var" / "cache" / "apt").glob("*.bin")),
                str(root / "rootfs" / "var" / "lib" / "apt" / "lists"),
            ],
            check=True,
        )
        (root / "rootfs" / "var" / "lib" / "apt" / "lists" / "partial").mkdir(parents=True)
        (root / ".complete").touch()
        _log(f"debootstrap: done in {time.monotonic() - started:.0f}s")
    return root / "rootfs"


def base_image() -> None:
    """The debootstrap root imported into dockerd as BASE_IMAGE."""
    if image_id(BASE_IMAGE):
        return
    tar = subprocess.Popen(
        ["tar", "-C", str(base_rootfs()), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE
    )
    _run(
        [node.DOCKER, "import", "--change", 'CMD ["/bin/bash"]', "-", BASE_IMAGE],
        "base-import",
        stdin=tar.stdout,
    )
    tar.wait()


def _pause_context() -> Path:
    """pause.c from the k8s.io/kubernetes module, compiled statically."""
    context = paths.CACHE / "images" / "pause"
    binary = context / "pause"
    if binary.exists():
        return context
    context.mkdir(parents=True, exist_ok=True)
    modcache = subprocess.run(
        ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True
    ).stdout.strip()
    source = (
        Path(modcache) / f"k8s.io/kubernetes@{paths.KUBERNETES_VERSION}/build/pause/linux/pause.c"
    )
    _run(
        [
            "gcc",
            "-Os",
            "-static",
            "-Wall",
            "-Werror",
            f'-DVERSION="{paths.KUBERNETES_VERSION}"',
            "-o",
            str(binary),
            str(source),
        ],
        "pause-gcc",
    )
    return context


def _build(dockerfile: str, tag: str, context: Path, **args: str) -> None:
    command = [
        "build",
        "--network",
        "host",
        "--quiet",
        "-f",
        str(paths.REPO / dockerfile),
        "-t",
        tag,
    ]
    for key, value in args.items():
        command += ["--build-arg", f"{key}={value}"]
    for name, source in _SECRETS.items():
        if source.exists():
            command += ["--secret", f"id={name},src={source}"]
    started = time.monotonic()
    _docker(*command, str(context), what=tag.replace("/", "_").replace(":", "_"))
    _log(f"image {tag}: built in {time.monotonic() - started:.0f}s")


def _imported() -> dict[str, str]:
    result = subprocess.run(node.ctr("images", "ls"), capture_output=True, text=True, check=True)
    images = {}
    for line in result.stdout.splitlines()[1:]:
        fields = line.split()
        if fields:
            images[fields[0]] = fields[2]  # REF TYPE DIGEST ...
    return images


def _copy_to_containerd(tag: str) -> None:
    save = subprocess.Popen(
        [node.DOCKER, "save", tag], stdout=subprocess.PIPE, env={**os.environ, **node.docker_env()}
    )
    try:
        _run(node.ctr("images", "import", "-"), f"import-{tag.split('/')[-1]}", stdin=save.stdout)
    finally:
        save.stdout.close()
        if save.wait() != 0:
            raise ComponentError(f"image {tag}: docker save failed")


def _import(tags: list[str]) -> None:
    """Copies docker images into containerd's k8s.io namespace when they changed there."""
    record_file = paths.CACHE / "images" / "imported.json"
    record = json.loads(record_file.read_text()) if record_file.exists() else {}
    present = _imported()
    for tag in tags:
        built = image_id(tag)
        ref = tag if "/" in tag.split(":")[0] and "." in tag.split("/")[0] else f"docker.io/{tag}"
        if record.get(tag) == built and ref in present:
            continue
        started = time.monotonic()
        for attempt in (1, 2):
            try:
                _copy_to_containerd(tag)
                break
            except ComponentError:
                # containerd 1.6 may collect a layer the import counted on while the image's
                # tag moves to the new version ("parent snapshot ... does not exist"); a second
                # import lays the missing layers down again.
                if attempt == 2:
                    raise
        record[tag] = built
        record_file.write_text(json.dumps(record, indent=2))
        _log(f"image {tag}: imported into containerd in {time.monotonic() - started:.0f}s")


def build_floe_images() -> None:
    """floe's operator and Spark images, in containerd: they need only the Debian base, so
    provisioning builds them beside the Go builds."""
    base_image()
    _build("images/operator/Dockerfile", OPERATOR_IMAGE, paths.REPO, BASE=BASE_IMAGE)
    _build("images/spark/Dockerfile", SPARK_IMAGE, paths.REPO, BASE=BASE_IMAGE)
    _import([OPERATOR_IMAGE, SPARK_IMAGE])


def build_and_import() -> None:
    """Builds every image the node runs and makes the kubelet see the current ones."""
    build_floe_images()
    _build("images/pause/Dockerfile", node.PAUSE_IMAGE, _pause_context())
    _build(
        "images/spark-operator/Dockerfile",
        SPARK_OPERATOR_IMAGE,
        paths.go_bin_dir("spark-operator", paths.SPARK_OPERATOR_VERSION),
        SPARK_IMAGE=SPARK_IMAGE,
    )
    for dockerfile, tag, name, version in (
        (
            "images/prometheus-operator/Dockerfile",
            PROMETHEUS_OPERATOR_IMAGE,
            "prometheus-operator",
            paths.PROMETHEUS_OPERATOR_VERSION,
        ),
        ("images/prometheus/Dockerfile", PROMETHEUS_IMAGE, "prometheus", paths.PROMETHEUS_VERSION),
    ):
        _build(dockerfile, tag, paths.go_bin_dir(name, version), BASE=BASE_IMAGE)
    _import([node.PAUSE_IMAGE, SPARK_OPERATOR_IMAGE, PROMETHEUS_OPERATOR_IMAGE, PROMETHEUS_IMAGE])
