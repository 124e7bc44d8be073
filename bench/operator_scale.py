"""The operator at scale on the real API server: 10, 100 and 500 KafkaIcebergTopics.

For each size, in a namespace of its own, the operator (a real process, watching that
namespace) reconciles every resource into its table, ConfigMap, SparkApplication and CronJobs;
no runner executes the SparkApplications. Measured:

* time until every resource has a steady status (observed, TableReady, MaintenanceScheduled,
  offsets), and the p99 of each resource's time from creation to that;
* over a 60 s idle window after that: p99 of one reconcile visit (the operator's own
  ``floe_reconcile_duration_seconds`` histogram, interpolated as Prometheus'
  ``histogram_quantile`` does), API requests per resource per minute (the API server's
  ``apiserver_request_total`` on the kinds the operator reads or writes), and the operator's
  memory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
IDLE_SECONDS = 60
# What the operator reads or writes: its resources, their children, the Secrets they reference
# and the Events it posts.
OPERATOR_KINDS = {"kafkaicebergtopics", "sparkapplications", "configmaps", "cronjobs", "secrets",
                  "events", "pods", "kopfpeerings", "clusterkopfpeerings"}


def _families(text: str) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def apiserver_requests_by_kind(api_client) -> dict[str, float]:
    """Requests the API server has served since it started (all clients), by verb and
    resource."""
    settings = api_client.configuration
    text = requests.get(f"{settings.host}/metrics", timeout=30, verify=settings.ssl_ca_cert,
                        headers={"Authorization": settings.api_key["BearerToken"]}).text
    family = _families(text).get("apiserver_request")
    kinds: dict[str, float] = {}
    for sample in family.samples:
        if sample.name == "apiserver_request_total":
            labels = sample.labels
            kind = " ".join(filter(None, (labels.get("verb"), labels.get("resource"),
                                          labels.get("subresource"))))
            kinds[kind] = kinds.get(kind, 0.0) + sample.value
    return kinds


def reconcile_buckets(metrics_url: str) -> dict[float, float]:
    """Cumulative bucket counts of the reconcile histogram, summed over all resources."""
    family = _families(requests.get(metrics_url, timeout=30).text)["floe_reconcile_duration_seconds"]
    buckets: dict[float, float] = {}
    for sample in family.samples:
        if sample.name.endswith("_bucket"):
            bound = float(sample.labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return buckets


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float | None:
    """``histogram_quantile`` over the visits between two scrapes."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, counts):
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = bound, count
    return lower


def _memory(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":")[0]
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(line.split()[1]) * 1024
    return fields


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _body(env: dict[str, str], work: Path, index: int, topic: str) -> dict[str, Any]:
    return {
        "apiVersion": "floe.dev/v1alpha1", "kind": "KafkaIcebergTopic",
        "metadata": {"name": f"topic-{index:04d}"},
        "spec": {
            "kafka": {"bootstrapServers": env["FLOE_KAFKA_BOOTSTRAP"], "topic": topic},
            "value": {"format": "avro", "schemaRegistry": {
                "url": env["FLOE_SCHEMA_REGISTRY_URL"], "subject": f"{topic}-value"}},
            "table": {"catalog": {"name": "bench", "uri": f"jdbc:sqlite:{work / f'{index}.db'}",
                                  "warehouse": f"file://{work / 'warehouse'}"},
                      "identifier": f"bench.topic_{index:04d}"},
            "commit": {"interval": "30s"},
        },
    }


def _steady(item: dict[str, Any]) -> bool:
    status = item.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    return (status.get("observedGeneration") == item["metadata"].get("generation")
            and conditions.get("TableReady") == "True"
            and conditions.get("MaintenanceScheduled") == "True" and "offsets" in status)


def measure(size: int, env: dict[str, str], work: Path, topic: str,
            timeout: float) -> dict[str, Any]:
    from kubernetes import client, config

    from hack.stack.procs import stop_group
    from tests.e2e.kube import delete_namespace_without_operator, wait_until

    api_client = config.new_client_from_config(config_file=env["KUBECONFIG"])
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    namespace = f"bench-{size}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    # The drivers' account, as the chart makes it in a namespace it serves: without it the
    # resources would wait for it instead of having their SparkApplications.
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name="floe-spark")))
    work = work / namespace
    work.mkdir(parents=True)
    metrics_port = _free_port()
    log = (work / "operator.log").open("w")
    operator = subprocess.Popen(
        [sys.executable, "-m", "floe_operator"], stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **env, "FLOE_NAMESPACES": namespace,
             "FLOE_METRICS_PORT": str(metrics_port),
             "FLOE_LIVENESS": f"http://127.0.0.1:{_free_port()}/healthz"})
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        created: dict[str, float] = {}
        started = time.monotonic()
        for index in range(size):
            body = _body(env, work, index, topic)
            custom.create_namespaced_custom_object("floe.dev", "v1alpha1", namespace,
                                                   "kafkaicebergtopics", body)
            created[body["metadata"]["name"]] = time.monotonic()
        steady_at: dict[str, float] = {}
        while len(steady_at) < size and time.monotonic() - started < timeout:
            items = custom.list_namespaced_custom_object("floe.dev", "v1alpha1", namespace,
                                                         "kafkaicebergtopics")["items"]
            now = time.monotonic()
            for item in items:
                name = item["metadata"]["name"]
                if name not in steady_at and _steady(item):
                    steady_at[name] = now
            time.sleep(1)
        all_steady = max(steady_at.values()) - started if len(steady_at) == size else None
        latencies = sorted(steady_at[n] - created[n] for n in steady_at)
        p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else None

        before_buckets = reconcile_buckets(metrics_url)
        before_kinds = apiserver_requests_by_kind(api_client)
        window_started = time.monotonic()
        time.sleep(IDLE_SECONDS)
        after_buckets = reconcile_buckets(metrics_url)
        after_kinds = apiserver_requests_by_kind(api_client)
        minutes = (time.monotonic() - window_started) / 60
        # What the API server served in the window, most first (everyone's: the controller
        # manager's and the kubelet's too).
        by_kind = sorted(((kind, (count - before_kinds.get(kind, 0.0)) / minutes)
                          for kind, count in after_kinds.items()), key=lambda kc: -kc[1])
        # The operator's: every request on the kinds it reads or writes (other watchers of
        # ConfigMaps, Pods and Events count too: an upper bound).
        operator_requests = sum(rate for kind, rate in by_kind
                                if kind.split(" ")[1:2] and kind.split(" ")[1] in OPERATOR_KINDS)
        visits = after_buckets[float("inf")] - before_buckets.get(float("inf"), 0)
        memory = _memory(operator.pid)
        return {
            "resources": size, "steady": len(steady_at),
            "all_steady_seconds": round(all_steady, 1) if all_steady is not None else None,
            "create_to_steady_p99_seconds": round(p99, 2) if p99 is not None else None,
            "reconcile_p99_seconds": quantile(0.99, before_buckets, after_buckets),
            "reconcile_p50_seconds": quantile(0.50, before_buckets, after_buckets),
            "idle_visits_per_resource_per_minute": round(visits / size / minutes, 2),
            "idle_api_requests_per_resource_per_minute": round(operator_requests / size, 2),
            "idle_api_requests_per_minute_by_kind": {kind: round(rate, 1)
                                                     for kind, rate in by_kind[:8] if rate},
            "operator_rss_bytes": memory.get("VmRSS"), "operator_peak_rss_bytes": memory.get("VmHWM"),
        }
    finally:
        stop_group(operator, timeout=60)
        log.close()
        delete_namespace_without_operator(api_client, namespace)
        # The next size starts once the namespace and its objects are gone: its deletion is
        # not measured with the next size.
        wait_until(lambda: _gone(core, namespace), timeout=900, interval=2)


def _gone(core, namespace: str) -> bool:
    from kubernetes.client.rest import ApiException

    try:
        core.read_namespace(namespace)
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def run(sizes: list[int], env: dict[str, str], work: Path, timeout: float) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from kubernetes import config

    from tests.e2e.kube import FLOE_CRD, SPARK_CRD, install_crd

    import workload

    api_client = config.new_client_from_config(config_file=env["KUBECONFIG"])
    install_crd(api_client, FLOE_CRD)
    install_crd(api_client, SPARK_CRD)
    topic = f"bench-operator-{uuid.uuid4().hex[:6]}"
    workload.create_topic(env["FLOE_KAFKA_BOOTSTRAP"], topic, partitions=1)
    workload.register(env["FLOE_SCHEMA_REGISTRY_URL"], f"{topic}-value", workload.SMALL)
    results = {}
    for size in sizes:
        print(f"[bench] operator with {size} resources", file=sys.stderr, flush=True)
        results[str(size)] = measure(size, env, work, topic, timeout)
        print(f"[bench] {results[str(size)]}", file=sys.stderr, flush=True)
    return results
