"""Fetches and builds the stack's components into the cache, once; later calls are no-ops.

Go binaries are built through the Go module proxy, from the small modules in ``hack/go`` where
the upstream module has ``replace`` lines (Kubernetes, etcd, spark-operator,
prometheus-operator, Prometheus);
jars are resolved from Maven Central with the poms in ``hack/maven``; the schema registry is
built from Maven Central by ``hack/registry``; Node.js servers (Azurite) come from the npm
registry.  A ``.complete`` marker in each target
directory makes an interrupted download or build start over instead of being used half-done.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import paths


class ProvisionError(RuntimeError):
    pass


def _log(message: str) -> None:
    print(f"[stack] {message}", file=sys.stderr, flush=True)


def _run(
    cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, what: str
) -> None:
    log_file = paths.CACHE / "logs" / f"provision-{what}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_file.open("w") as out:
        result = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-30:])
        raise ProvisionError(f"provisioning {what} failed ({' '.join(cmd)}):\n{tail}")
    _log(f"{what}: done in {time.monotonic() - started:.0f}s")


def _complete(target: Path) -> bool:
    return (target / ".complete").exists()


def _mark_complete(target: Path, built_with: str = "") -> None:
    (target / ".complete").write_text(built_with)


def _built_with(target: Path) -> str | None:
    """What a complete build was made with (its marker's text), None if not complete."""
    marker = target / ".complete"
    return marker.read_text() if marker.exists() else None


def _fresh(target: Path) -> Path:
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    return target


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-buildvcs=false")
    # Static binaries, as each project releases them: no cgo, so no C compiler in the build.
    env.setdefault("CGO_ENABLED", "0")
    # The compiler collects garbage less often for more memory, of which there is plenty.
    env.setdefault("GOGC", "400")
    return env


# No symbol table or DWARF: smaller binaries, shorter links (the builds' markers record it).
LINK_FLAGS = "-s -w"

PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"


def _prometheus_version_flags(version: str) -> str:
    """The version the Prometheus projects' release builds stamp in (without the "v", as their
    VERSION files have it): unstamped, `prometheus --version` and `promtool --version` report
    none, and the operator defaults its config-reloader image to the tag "v".  (Their releases
    stamp the git revision too, which the Go module proxy does not serve: these say "unknown".)"""
    return f"{LINK_FLAGS} -X github.com/prometheus/common/version.Version={version}"


# The control plane, the node (kubelet, kube-proxy) and the clients, from one Go build so the
# packages they share compile once.
KUBE_COMMANDS = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "kubectl",
)


def _kube_version_flags() -> str:
    """The version the binaries report (kubectl version, the node, Helm's kubeVersion checks),
    which a build from the module proxy leaves at v0.0.0 unless the linker sets it."""
    version = paths.KUBERNETES_VERSION
    major, minor = version.lstrip("v").split(".")[:2]
    package = "k8s.io/component-base/version"
    return " ".join(
        [
            LINK_FLAGS,
            *(
                f"-X {package}.{key}={value}"
                for key, value in (
                    ("gitVersion", version),
                    ("gitMajor", major),
                    ("gitMinor", minor),
                    ("gitTreeState", "clean"),
                )
            ),
        ]
    )


def go_binaries() -> None:
    kube = paths.go_bin_dir("kube", paths.KUBERNETES_VERSION)
    if _built_with(kube) != _kube_version_flags() or not all(
        (kube / n).exists() for n in KUBE_COMMANDS
    ):
        _log(
            f"building {', '.join(KUBE_COMMANDS)} {paths.KUBERNETES_VERSION} "
            "(first time only; several minutes on 2 cores)"
        )
        _fresh(kube)
        _run(
            [
                "go",
                "build",
                "-o",
                str(kube),
                "-ldflags",
                _kube_version_flags(),
                *(f"k8s.io/kubernetes/cmd/{name}" for name in KUBE_COMMANDS),
            ],
            cwd=paths.HACK / "go" / "kube",
            env=_go_env(),
            what="kubernetes",
        )
        _mark_complete(kube, _kube_version_flags())

    # Modules of our own (hack/go/NAME) that pin an upstream module go install refuses; each
    # builds one (package, binary) pair or several into the same directory.
    for name, version, builds, flags in (
        ("etcd", paths.ETCD_VERSION, [("go.etcd.io/etcd/server/v3", "etcd")], LINK_FLAGS),
        (
            "spark-operator",
            paths.SPARK_OPERATOR_VERSION,
            [("github.com/kubeflow/spark-operator/v2/cmd/operator", "spark-operator")],
            LINK_FLAGS,
        ),
        (
            "coredns",
            paths.COREDNS_VERSION,
            [(".", "coredns")],  # main.go: the node's plugins only
            LINK_FLAGS,
        ),
        (
            "prometheus-operator",
            paths.PROMETHEUS_OPERATOR_VERSION,
            [
                (f"{PROMETHEUS_OPERATOR_MODULE}/cmd/operator", "operator"),
                (
                    f"{PROMETHEUS_OPERATOR_MODULE}/cmd/prometheus-config-reloader",
                    "prometheus-config-reloader",
                ),
            ],
            _prometheus_version_flags(paths.PROMETHEUS_OPERATOR_VERSION.lstrip("v")),
        ),
        (
            "prometheus",
            paths.PROMETHEUS_VERSION,
            [
                ("github.com/prometheus/prometheus/cmd/prometheus", "prometheus"),
                ("github.com/prometheus/prometheus/cmd/promtool", "promtool"),
            ],
            _prometheus_version_flags(paths.PROMETHEUS_RELEASE),
        ),
    ):
        target = paths.go_bin_dir(name, version)
        module = paths.HACK / "go" / name
        built_with = f"{paths.source_hash(module)} {flags}"
        if _built_with(target) == built_with:
            continue
        _log(f"building {name} {version}")
        _fresh(target)
        for package, binary in builds:  # the later builds reuse the packages the first compiled
            _run(
                ["go", "build", "-ldflags", flags, "-o", str(target / binary), package],
                cwd=module,
                env=_go_env(),
                what=name if len(builds) == 1 else f"{name}-{binary}",
            )
        _mark_complete(target, built_with)

    for name, version, package, flags in (
        ("helm", paths.HELM_VERSION, "helm.sh/helm/v3/cmd/helm", _helm_flags()),
        (
            "versitygw",
            paths.VERSITYGW_VERSION,
            "github.com/versity/versitygw/cmd/versitygw",
            LINK_FLAGS,
        ),
        (
            "toxiproxy",
            paths.TOXIPROXY_VERSION,
            "github.com/Shopify/toxiproxy/v2/cmd/server",
            LINK_FLAGS,
        ),
        (
            "fake-gcs-server",
            paths.FAKE_GCS_SERVER_VERSION,
            "github.com/fsouza/fake-gcs-server",
            LINK_FLAGS,
        ),
    ):
        target = paths.go_bin_dir(name, version)
        if _built_with(target) == flags:
            continue
        _log(f"building {name} {version}")
        _fresh(target)
        env = _go_env()
        env["GOBIN"] = str(target)
        _run(["go", "install", "-ldflags", flags, f"{package}@{version}"], env=env, what=name)
        _mark_complete(target, flags)


def prometheus_operator_crds_dir() -> Path:
    """The monitoring.coreos.com CRDs (``monitoring.coreos.com_*.yaml``: Prometheus,
    ServiceMonitor, PodMonitor, PrometheusRule, ...) of the pinned Prometheus Operator, as its
    release ships them: the directory in the Go module cache, downloaded if it is not there yet.
    (The ``-full`` directory beside it adds AlertmanagerConfig v1beta1, which needs upstream's
    conversion webhook.)  They are large: apply them with ``kubectl apply --server-side``."""
    import json

    what = f"{PROMETHEUS_OPERATOR_MODULE}@{paths.PROMETHEUS_OPERATOR_VERSION}"
    result = subprocess.run(
        ["go", "mod", "download", "-json", what],
        cwd=paths.HACK / "go" / "prometheus-operator",
        env=_go_env(),
        capture_output=True,
        text=True,
    )
    info = json.loads(result.stdout or "{}")
    if result.returncode != 0 or "Dir" not in info:
        raise ProvisionError(
            f"go mod download {what} failed: {info.get('Error') or result.stderr.strip()}"
        )
    crds = Path(info["Dir"]) / "example" / "prometheus-operator-crd"
    if not any(crds.glob("monitoring.coreos.com_*.yaml")):
        raise ProvisionError(f"no monitoring.coreos.com CRDs in {crds}")
    return crds


# The Kubernetes version of the client-go module helm's release is built with (its go.mod):
# helm's own release builds stamp it in, as the default of `helm template` and `helm lint`
# (without it they assume 1.20, older than the chart's kubeVersion allows).
HELM_KUBERNETES_MINOR = 37


def _helm_flags() -> str:
    """helm's release link flags: its version, and the Kubernetes version it assumes."""
    stamped = [f"-X helm.sh/helm/v3/internal/version.version={paths.HELM_VERSION}"]
    for package in ("pkg/lint/rules", "pkg/chartutil"):
        stamped += [
            f"-X helm.sh/helm/v3/{package}.k8sVersionMajor=1",
            f"-X helm.sh/helm/v3/{package}.k8sVersionMinor={HELM_KUBERNETES_MINOR}",
        ]
    return " ".join([LINK_FLAGS, *stamped])


def _maven_copy(
    pom: Path,
    target: Path,
    what: str,
    extra: list[str] | None = None,
    then: Callable[[Path], None] | None = None,
) -> None:
    if _complete(target):
        return
    _log(f"resolving {what} jars from Maven Central")
    _fresh(target)
    _run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={target}",
            *(extra or []),
        ],
        what=what,
    )
    if then is not None:
        then(target)
    _mark_complete(target)


# The Iceberg GCP bundle carries Apache Arrow's classes unrelocated, of an older release than
# Spark's own: on a class path before Spark's, they would mix with Spark's Arrow (its Python
# UDFs, toPandas). GCSFileIO does not use them; they go (images/spark/Dockerfile does the same).
UNRELOCATED = {"iceberg-gcp-bundle-": "org/apache/arrow/"}


def without_unrelocated(directory: Path) -> None:
    import zipfile

    for prefix, classes in UNRELOCATED.items():
        for jar in directory.glob(f"{prefix}*.jar"):
            kept = jar.with_suffix(".tmp")
            with (
                zipfile.ZipFile(jar) as source,
                zipfile.ZipFile(kept, "w", zipfile.ZIP_DEFLATED) as out,
            ):
                for entry in source.infolist():
                    if not entry.filename.startswith(classes):
                        out.writestr(entry, source.read(entry.filename))
            kept.replace(jar)


def kafka_jars() -> None:
    _maven_copy(paths.HACK / "maven" / "kafka" / "pom.xml", paths.kafka_jars_dir(), "kafka")


def spark_jars() -> None:
    _maven_copy(
        paths.HACK / "maven" / "spark" / "pom.xml",
        paths.spark_jars_dir(),
        "spark",
        [f"-Dspark.version={paths.pyspark_version()}"],
        then=without_unrelocated,
    )


def rest_catalog_jars() -> None:
    _maven_copy(
        paths.HACK / "maven" / "rest" / "pom.xml", paths.rest_catalog_jars_dir(), "REST catalog"
    )


def connect_jars() -> Path:
    """Kafka Connect and the Iceberg sink, for the benchmark's peer (resolved on first use, not
    by provisioning: nothing else runs them)."""
    _maven_copy(
        paths.HACK / "maven" / "connect" / "pom.xml", paths.connect_jars_dir(), "Kafka Connect"
    )
    return paths.connect_jars_dir()


def floe_jvm() -> None:
    """Builds floe's jar (sparkapp/jvm) against the jars Spark runs it with."""
    target = paths.floe_jvm_dir()
    if _complete(target):
        return
    _log("building floe's jar (sparkapp/jvm)")
    _fresh(target)
    _run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(paths.REPO / "sparkapp" / "jvm" / "pom.xml"),
            "package",
            f"-Dfloe.build.dir={target / 'build'}",
        ],
        what="floe-jvm",
    )
    (target / "build" / "floe-jvm.jar").rename(target / "floe-jvm.jar")
    _mark_complete(target)


def spark_jar_list() -> list[str]:
    """The jars the Spark job needs beside pyspark's own: the connectors and floe's."""
    spark_jars()
    floe_jvm()
    return sorted(
        str(p)
        for directory in (paths.spark_jars_dir(), paths.floe_jvm_dir())
        for p in directory.glob("*.jar")
    )


def npm_packages() -> None:
    """Node.js servers of the stack, from the npm registry: Azurite (the Azure Storage
    emulator)."""
    for name, version in (("azurite", paths.AZURITE_VERSION),):
        target = paths.npm_dir(name, version)
        if _complete(target):
            continue
        _log(f"installing {name} {version} from the npm registry")
        _fresh(target)
        _run(
            [
                "npm",
                "install",
                "--no-audit",
                "--no-fund",
                "--omit=dev",
                "--prefix",
                str(target),
                f"{name}@{version}",
            ],
            what=name,
        )
        _mark_complete(target)


def registry() -> None:
    target = paths.registry_dir()
    if _complete(target):
        return
    _log(
        f"building the Apicurio schema registry {paths.APICURIO_VERSION} from Maven Central "
        "(first time only)"
    )
    _fresh(target)
    _run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(paths.HACK / "registry" / "pom.xml"),
            "package",
            f"-Dfloe.build.dir={target / 'build'}",
        ],
        what="registry",
    )
    _mark_complete(target)


def _downloads(then: Callable[[], None] | None) -> None:
    """The parts that mostly wait on the network, beside the CPU-bound Go builds."""
    from .images import base_rootfs

    kafka_jars()
    spark_jars()
    floe_jvm()
    rest_catalog_jars()
    npm_packages()
    base_rootfs()
    registry()
    if then is not None:
        then()


def all_components(then: Callable[[], None] | None = None) -> None:
    """Provisions everything; Go builds (CPU-bound) overlap with Maven and Debian downloads and
    then with ``then`` (the stack's image builds, which need the Debian base made here)."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        for future in [pool.submit(go_binaries), pool.submit(_downloads, then)]:
            future.result()
    _log(f"provisioned in {time.monotonic() - started:.0f}s")
