"""Where the local stack keeps its downloads, builds and run state, and which versions it uses.

Everything lives outside the repository: downloads and builds under ``FLOE_CACHE``
(default ``~/.cache/floe``), the running stack's state, data and logs under ``FLOE_RUN``
(default ``$FLOE_CACHE/run``).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HACK = REPO / "hack"

CACHE = Path(os.environ.get("FLOE_CACHE", Path.home() / ".cache" / "floe")).expanduser()
RUN = Path(os.environ.get("FLOE_RUN", CACHE / "run")).expanduser()
STATE_FILE = RUN / "stack.json"
LOGS = RUN / "logs"

KUBERNETES_VERSION = "v1.35.4"
ETCD_VERSION = "v3.6.8"
HELM_VERSION = "v3.22.0"
VERSITYGW_VERSION = "v1.8.0"
ICEBERG_VERSION = "1.11.0"
APICURIO_VERSION = "2.4.2.Final"
COREDNS_VERSION = "v1.13.2"
SPARK_OPERATOR_VERSION = "v2.3.0"
# The newest release whose modules the Go module proxy serves in full: v0.94.x's pkg/client
# submodule is not served, so its operator cannot be built (hack/go/prometheus-operator pins it).
PROMETHEUS_OPERATOR_VERSION = "v0.93.1"
# Prometheus 3.13.1, the operator's default (hack/go/prometheus pins it): upstream tags its Go
# module v0.3MM.P for Prometheus 3.MM.P, the release its binaries report (change both together).
PROMETHEUS_VERSION = "v0.313.1"
PROMETHEUS_RELEASE = "3.13.1"
TOXIPROXY_VERSION = "v2.12.0"
# Object store emulators for warehouses on Google Cloud Storage and Azure (Blob storage, which
# Iceberg's ADLSFileIO reaches through its Data Lake client).  Azurite 3.35 is the newest that
# runs on Node.js 20 (3.36 asks for 21, 3.37 for 22).
FAKE_GCS_SERVER_VERSION = "v1.56.1"
AZURITE_VERSION = "3.35.0"


def kafka_version() -> str:
    """The Kafka version pinned in hack/maven/kafka/pom.xml."""
    text = (HACK / "maven" / "kafka" / "pom.xml").read_text()
    return text.split("<kafka.version>", 1)[1].split("<", 1)[0]


def pyspark_version() -> str:
    """The pyspark version pyproject.toml pins; the Kafka connector jar must match it exactly.
    (Read from the pin, not the installed package: provisioning runs while pip installs.)"""
    import re

    pin = re.search(r'"pyspark==([^"]+)"', (REPO / "pyproject.toml").read_text())
    if pin is None:
        raise RuntimeError("pyproject.toml pins no exact pyspark version")
    return pin.group(1)


def go_bin_dir(name: str, version: str) -> Path:
    return CACHE / "go" / f"{name}-{version}"


def npm_dir(name: str, version: str) -> Path:
    return CACHE / "npm" / f"{name}-{version}"


def bin_dirs() -> list[Path]:
    """Directories holding the stack's binaries (kubectl and helm among them), for PATH."""
    return [
        go_bin_dir("kube", KUBERNETES_VERSION),
        go_bin_dir("etcd", ETCD_VERSION),
        go_bin_dir("helm", HELM_VERSION),
        go_bin_dir("versitygw", VERSITYGW_VERSION),
        go_bin_dir("coredns", COREDNS_VERSION),
        go_bin_dir("spark-operator", SPARK_OPERATOR_VERSION),
        go_bin_dir("prometheus", PROMETHEUS_VERSION),  # prometheus, promtool
    ]


def tool_path() -> str:
    """PATH with the stack's binaries first."""
    return os.pathsep.join([str(d) for d in bin_dirs()] + [os.environ.get("PATH", "")])


def source_hash(path: Path) -> str:
    """A short hash of the files under ``path``: a changed build input gets a fresh build."""
    import hashlib

    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        digest.update(str(file.relative_to(path.parent)).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()[:8]


def kafka_jars_dir() -> Path:
    pom = HACK / "maven" / "kafka" / "pom.xml"
    return CACHE / "jars" / f"kafka-{kafka_version()}-{source_hash(pom)}"


def spark_jars_dir() -> Path:
    pom = HACK / "maven" / "spark" / "pom.xml"
    return (
        CACHE / "jars" / f"spark-{pyspark_version()}-iceberg-{ICEBERG_VERSION}-{source_hash(pom)}"
    )


def floe_jvm_dir() -> Path:
    """floe's own jar (``sparkapp/jvm``: the Protobuf decoder), rebuilt when its sources change."""
    return CACHE / "jars" / f"floe-jvm-{source_hash(REPO / 'sparkapp' / 'jvm')}"


def rest_catalog_jars_dir() -> Path:
    pom = HACK / "maven" / "rest" / "pom.xml"
    return CACHE / "jars" / f"rest-catalog-iceberg-{ICEBERG_VERSION}-{source_hash(pom)}"


def connect_jars_dir() -> Path:
    """The benchmark's peer: Kafka Connect with the Iceberg sink (``hack/maven/connect``)."""
    pom = HACK / "maven" / "connect" / "pom.xml"
    return (
        CACHE / "jars" / f"connect-{kafka_version()}-iceberg-{ICEBERG_VERSION}-{source_hash(pom)}"
    )


def registry_dir() -> Path:
    return CACHE / "registry" / f"apicurio-{APICURIO_VERSION}-{source_hash(HACK / 'registry')}"
