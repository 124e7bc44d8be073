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
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
IDLE_SECONDS = 60
# What the operator reads or writes: its resources, their children, the Secrets they reference
# and the Events it posts.
OPERATOR_KINDS = {
    "kafkaicebergtopics",
    "sparkapplications",
    "configmaps",
    "cronjobs",
    "secrets",
    "events",
    "pods",
    "kopfpeerings",
    "clusterkopfpeerings",
}


def _families(text: str) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def apiserver_requests_by_kind(api_client) -> dict[str, float]:
    """Requests the API server has served since it started (all clients), by verb and
    resource."""
    settings = api_client.configuration
    text = requests.get(
        f"{settings.host}/metrics",
        timeout=30,
        verify=settings.ssl_ca_cert,
        headers={"Authorization": settings.api_key["BearerToken"]},
    ).text
    family = _families(text).get("apiserver_request")
    kinds: dict[str, float] = {}
    for sample in family.samples:
        if sample.name == "apiserver_request_total":
            labels = sample.labels
            kind = " ".join(
                filter(
                    None, (labels.get("verb"), labels.get("resource"), labels.get("subresource"))
                )
            )
            kinds[kind] = kinds.get(kind, 0.0) + sample.value
    return kinds


def reconcile_buckets(metrics_url: str) -> dict[float, float]:
    """Cumulative bucket counts of the reconcile histogram, summed over all resources."""
    family = _families(requests.get(metrics_url, timeout=30).text)[
        "floe_reconcile_duration_seconds"
    ]
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
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "KafkaIcebergTopic",
        "metadata": {"name": f"topic-{index:04d}"},
        "spec": {
            "kafka": {"bootstrapServers": env["FLOE_KAFKA_BOOTSTRAP"], "topic": topic},
            "value": {
                "format": "avro",
                "schemaRegistry": {
                    "url": env["FLOE_SCHEMA_REGISTRY_URL"],
                    "subject": f"{topic}-value",
                },
            },
            "table": {
                "catalog": {
                    "name": "bench",
                    "uri": f"jdbc:sqlite:{work / f'{index}.db'}",
                    "warehouse": f"file://{work / 'warehouse'}",
                },
                "identifier": f"bench.topic_{index:04d}",
            },
            "commit": {"interval": "30s"},
        },
    }


def _steady(item: dict[str, Any]) -> bool:
    status = item.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    return (
        status.get("observedGeneration") == item["metadata"].get("generation")
        and conditions.get("TableReady") == "True"
        and conditions.get("MaintenanceScheduled") == "True"
        and "offsets" in status
    )


def measure(
    size: int, env: dict[str, str], work: Path, topic: str, timeout: float
) -> dict[str, Any]:
    from kubernetes import client, config

    from hack.stack.procs import stop_group
    from tests.e2e.kube import delete_namespace_without_operator, wait_until

    api_client = config.new_client_from_config(config_file=env["KUBECONFIG"])
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    namespace = f"bench-{size}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    # The drivers' account, as the chart makes it in a namespace it serves: without it the
    # resources would wait for it instead of having their SparkApplications.
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="floe-spark"))
    )
    work = work / namespace
    work.mkdir(parents=True)
    metrics_port = _free_port()
    log = (work / "operator.log").open("w")
    operator = subprocess.Popen(
        [sys.executable, "-m", "floe_operator"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={
            **os.environ,
            **env,
            "FLOE_NAMESPACES": namespace,
            "FLOE_METRICS_PORT": str(metrics_port),
            "FLOE_LIVENESS": f"http://127.0.0.1:{_free_port()}/healthz",
        },
    )
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        created: dict[str, float] = {}
        started = time.monotonic()
        for index in range(size):
            body = _body(env, work, index, topic)
            custom.create_namespaced_custom_object(
                "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
            )
            created[body["metadata"]["name"]] = time.monotonic()
        steady_at: dict[str, float] = {}
        while len(steady_at) < size and time.monotonic() - started < timeout:
            items = custom.list_namespaced_custom_object(
                "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics"
            )["items"]
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
        by_kind = sorted(
            (
                (kind, (count - before_kinds.get(kind, 0.0)) / minutes)
                for kind, count in after_kinds.items()
            ),
            key=lambda kc: -kc[1],
        )
        # The operator's: every request on the kinds it reads or writes (other watchers of
        # ConfigMaps, Pods and Events count too: an upper bound).
        operator_requests = sum(
            rate
            for kind, rate in by_kind
            if kind.split(" ")[1:2] and kind.split(" ")[1] in OPERATOR_KINDS
        )
        visits = after_buckets[float("inf")] - before_buckets.get(float("inf"), 0)
        memory = _memory(operator.pid)
        return {
            "resources": size,
            "steady": len(steady_at),
            "all_steady_seconds": round(all_steady, 1) if all_steady is not None else None,
            "create_to_steady_p99_seconds": round(p99, 2) if p99 is not None else None,
            "reconcile_p99_seconds": quantile(0.99, before_buckets, after_buckets),
            "reconcile_p50_seconds": quantile(0.50, before_buckets, after_buckets),
            "idle_visits_per_resource_per_minute": round(visits / size / minutes, 2),
            "idle_api_requests_per_resource_per_minute": round(operator_requests / size, 2),
            "idle_api_requests_per_minute_by_kind": {
                kind: round(rate, 1) for kind, rate in by_kind[:8] if rate
            },
            "operator_rss_bytes": memory.get("VmRSS"),
            "operator_peak_rss_bytes": memory.get("VmHWM"),
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

    import workload
    from tests.e2e.kube import FLOE_CRD, OPERATION_CRD, SPARK_CRD, install_crd

    api_client = config.new_client_from_config(config_file=env["KUBECONFIG"])
    install_crd(api_client, FLOE_CRD)
    install_crd(api_client, OPERATION_CRD)
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


# --- status writes with a running job ----------------------------------------------------------

STATUS_WRITES = ROOT / "bench" / "results" / "status-writes.json"


class _Stack:
    """What the tests' helpers read of the stack, from its connection settings."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
        self.registry_url = env["FLOE_SCHEMA_REGISTRY_URL"]


def _count_writes(api_client, namespace: str, stop, counts: dict[str, int]) -> None:
    """Counts the resource's changes the API server sends its watchers: every one, and those
    whose status changed."""
    from kubernetes import client, watch

    custom = client.CustomObjectsApi(api_client)
    last: dict[str, Any] = {}
    stream = watch.Watch()
    for event in stream.stream(
        custom.list_namespaced_custom_object,
        "floe.dev",
        "v1alpha1",
        namespace,
        "kafkaicebergtopics",
        timeout_seconds=3600,
    ):
        if stop.is_set():
            stream.stop()
            break
        if event["type"] != "MODIFIED":
            continue
        status = event["object"].get("status")
        counts["events"] = counts.get("events", 0) + 1
        if status != last.get("status"):
            counts["status"] = counts.get("status", 0) + 1
        last["status"] = status


@contextmanager
def node_topic(
    tree: Path,
    env: dict[str, str],
    work: Path,
    namespace: str,
    interval: str,
    conf: dict[str, str] | None = None,
) -> Iterator[NodeTopic]:
    """``tree``'s operator (a process, as the tests run it) serving ``namespace`` on the node,
    and one KafkaIcebergTopic there whose job runs on the node at the commit ``interval``, with
    the JVM's default compilers (a job that runs as long as a user's does) and ``conf`` added
    to its ``spark.conf`` (``{shared}`` in a value: the directory the pods mount, the
    resource's catalog and checkpoints in it); 10 records wait in its Kafka topic. The
    resource is deleted, and the operator stopped, after."""
    from kubernetes import client, config

    from hack.demo import node_spark
    from hack.stack.procs import stop_group
    from tests.e2e.kube import install_crd, wait_until
    from tests.e2e.test_operator import topic_body
    from tests.integration.jobkit import AvroProducer, create_topic
    from tests.integration.test_job_roundtrip import produce_orders

    api_client = config.new_client_from_config(config_file=env["KUBECONFIG"])
    for definition in sorted((tree / "crds").glob("*.yaml")):
        install_crd(api_client, definition)
    custom = client.CustomObjectsApi(api_client)
    # The drivers' account and Role, as the chart makes them in a namespace it serves.
    rendered = subprocess.run(
        [
            "helm",
            "template",
            "floe",
            str(tree / "charts" / "floe-operator"),
            "--show-only",
            "templates/spark-rbac.yaml",
            "--set",
            f"watch.namespaces={{{namespace}}}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    subprocess.run(
        ["kubectl", "apply", "-f", "-"], input=rendered, capture_output=True, text=True, check=True
    )
    stack = _Stack(env)
    shared = Path(env["FLOE_NODE_SHARED"]) / f"bench-{uuid.uuid4().hex[:8]}"
    shared.mkdir()
    shared.chmod(0o777)
    topic = f"bench-node-{uuid.uuid4().hex[:6]}"
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 10)
    body = topic_body(stack, shared, topic)
    body["spec"]["commit"]["interval"] = interval
    spark = node_spark(shared)
    # "{shared}" in a setting: the directory the pods mount (a JVM's log file, say)
    spark["conf"].update(
        {key: value.replace("{shared}", str(shared)) for key, value in (conf or {}).items()}
    )
    body["spec"]["spark"].update(spark)
    path = os.pathsep.join(str(tree / part) for part in ("operator", "sparkapp", "."))
    log = (work / f"operator-{tree.name}-{topic}.log").open("w")
    operator = subprocess.Popen(
        [sys.executable, "-m", "floe_operator"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        umask=0,
        cwd=tree,
        env={
            **os.environ,
            **env,
            "PYTHONPATH": path,
            "FLOE_NAMESPACES": namespace,
            "FLOE_METRICS_PORT": str(_free_port()),
            "FLOE_LIVENESS": f"http://127.0.0.1:{_free_port()}/healthz",
        },
    )
    try:
        custom.create_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
        )
        yield NodeTopic(
            api_client,
            custom,
            namespace,
            shared,
            wait_until,
            lambda first, count: produce_orders(producer, first, count),
        )
    finally:
        custom.delete_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
        )
        wait_until(
            lambda: (
                not custom.list_namespaced_custom_object(
                    "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics"
                )["items"]
            ),
            timeout=300,
        )
        stop_group(operator, timeout=60)
        log.close()
        shutil.rmtree(shared, ignore_errors=True)


@dataclass
class NodeTopic:
    """The resource ``orders`` of :func:`node_topic`, and how to feed and watch it."""

    api_client: Any
    custom: Any
    namespace: str
    shared: Path
    wait_until: Callable[..., bool]
    produce: Callable[[int, int], None]  # (first id, count)

    def status(self) -> dict[str, Any]:
        return (
            self.custom.get_namespaced_custom_object(
                "floe.dev", "v1alpha1", self.namespace, "kafkaicebergtopics", "orders"
            ).get("status")
            or {}
        )

    def landed(self) -> bool:
        """Ready, and every record in Kafka committed to the table."""
        status = self.status()
        ready = {c["type"]: c["status"] for c in status.get("conditions") or []}
        return ready.get("Ready") == "True" and (status.get("offsets") or {}).get("lag") == 0

    def patch_spec(self, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            "floe.dev", "v1alpha1", self.namespace, "kafkaicebergtopics", "orders", {"spec": spec}
        )


def status_writes(
    tree: Path,
    env: dict[str, str],
    work: Path,
    namespace: str,
    interval: str,
    minutes: float,
    rate: float,
) -> dict[str, Any]:
    """``tree``'s operator on one resource whose job runs on the node (:func:`node_topic`):
    the resource's status writes per minute while records flow at ``rate`` a second, then
    while none do (the job idle)."""
    import threading

    stop = threading.Event()
    counts: dict[str, int] = {}
    with node_topic(tree, env, work, namespace, interval) as topic:
        try:
            if not topic.wait_until(topic.landed, timeout=600, interval=2):
                raise RuntimeError(f"{tree.name}: the resource never became Ready")
            watcher = threading.Thread(
                target=_count_writes, args=(topic.api_client, namespace, stop, counts), daemon=True
            )
            watcher.start()
            time.sleep(2)  # the watch's first list has been read
            result: dict[str, Any] = {}
            sent = 10
            for phase, producing in (("busy", True), ("idle", False)):
                before = dict(counts)
                started = time.monotonic()
                while time.monotonic() - started < minutes * 60:
                    if producing:
                        count = max(1, int(rate))
                        topic.produce(sent, count)
                        sent += count
                    time.sleep(1)
                elapsed = (time.monotonic() - started) / 60
                result[phase] = {
                    "status_writes_per_minute": round(
                        (counts.get("status", 0) - before.get("status", 0)) / elapsed, 2
                    ),
                    "changes_per_minute": round(
                        (counts.get("events", 0) - before.get("events", 0)) / elapsed, 2
                    ),
                }
                if producing:  # what landed is caught up before the idle window
                    topic.wait_until(topic.landed, timeout=300, interval=2)
            return result
        finally:
            stop.set()


def main() -> int:
    """``python bench/operator_scale.py status-writes BEFORE AFTER``: the status writes per
    resource per minute with a running job on the node, by two revisions' operators in turns,
    recorded in bench/results/status-writes.json with the command and the machine."""
    import argparse
    import json
    import tempfile

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    from benchkit import machine, worktree
    from hack import stack as local_stack
    from hack.stack.cluster import JOB_NAMESPACES

    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["status-writes"])
    parser.add_argument("revisions", nargs=2, metavar="REVISION")
    parser.add_argument("--interval", default="30s", help="the resource's commit interval")
    parser.add_argument("--minutes", type=float, default=3.0, help="each window's length")
    parser.add_argument("--rate", type=float, default=20.0, help="records a second, when busy")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    state, _ = local_stack.ensure_up()
    env = local_stack.connection_env(state)
    os.environ.update(env)
    work = Path(tempfile.mkdtemp(prefix="floe-bench-status-"))
    namespace = JOB_NAMESPACES[-1]  # served by the node's spark-operator
    trees = {revision: worktree(revision, work) for revision in args.revisions}
    runs: dict[str, list[dict[str, Any]]] = {revision: [] for revision in args.revisions}
    try:
        for _round in range(args.rounds):
            for revision, tree in trees.items():
                print(f"[bench] status writes: {revision}", file=sys.stderr, flush=True)
                runs[revision].append(
                    status_writes(
                        tree, env, work, namespace, args.interval, args.minutes, args.rate
                    )
                )
                print(f"[bench] {runs[revision][-1]}", file=sys.stderr, flush=True)
    finally:
        for tree in trees.values():
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                capture_output=True,
            )
        shutil.rmtree(work, ignore_errors=True)
    record = {
        "command": "python bench/operator_scale.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "setting": {
            "commit_interval": args.interval,
            "refresh_seconds": 10,
            "busy_records_per_second": args.rate,
            "window_minutes": args.minutes,
        },
        "runs": runs,
    }
    STATUS_WRITES.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
