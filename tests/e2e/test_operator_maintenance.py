"""Maintenance CronJobs on the real API server, and one run as a Job on the node, as
`kubectl create job --from=cronjob/...` runs it."""

from __future__ import annotations

import subprocess

import pytest
from kubernetes import client

from ..integration.jobkit import OBJECT_STORES, AvroProducer, create_topic, object_store
from ..integration.test_maintenance import multiset, produce_old
from .kube import SPARK_POD_DEFAULTS, admin_client, wait_until
from .test_operator import (
    logs,
    orders_rows,
    postgres_catalog,
    rest_catalog,
    topic_body,
    topic_catalog,
)

pytestmark = pytest.mark.e2e


def cron_jobs(admin, namespace) -> dict[str, client.V1CronJob]:
    batch = client.BatchV1Api(admin)
    return {c.metadata.name: c for c in batch.list_namespaced_cron_job(namespace).items}


def run_now(admin, namespace: str, cron_job: str) -> tuple[str, str]:
    """Runs a CronJob's Job now, on the node; its outcome (Complete or Failed) and its log."""
    job = f"{cron_job}-now"
    subprocess.run(
        ["kubectl", "create", "job", "-n", namespace, job, f"--from=cronjob/{cron_job}"],
        check=True,
        capture_output=True,
    )
    batch = client.BatchV1Api(admin)

    def outcome() -> str | None:
        conditions = batch.read_namespaced_job(job, namespace).status.conditions or []
        return next(
            (c.type for c in conditions if c.type in ("Complete", "Failed") and c.status == "True"),
            None,
        )

    wait_until(lambda: outcome() is not None, timeout=600, interval=1)
    log = subprocess.run(
        ["kubectl", "logs", "-n", namespace, f"job/{job}", "--tail=60"],
        capture_output=True,
        text=True,
    )
    return outcome() or "Running", log.stdout + log.stderr


# Where the resource places its pods, over the tests' operator's defaults (SPARK_POD_DEFAULTS).
PLACEMENT = {
    "imagePullSecrets": [{"name": "team-registry"}],
    "podLabels": {"team": "orders"},
    "podAnnotations": {"floe.dev/test-note": "placed"},
}


def placed(pod: client.V1Pod, node: str) -> list[str]:
    """What ``pod`` lacks of the placement it was given: pull secret, node selector, the
    default toleration, both labels and the annotation."""
    spec, meta = pod.spec, pod.metadata
    default = SPARK_POD_DEFAULTS["tolerations"][0]
    missing = []
    if "team-registry" not in {s.name for s in spec.image_pull_secrets or []}:
        missing.append("imagePullSecrets")
    if (spec.node_selector or {}).get("kubernetes.io/hostname") != node:
        missing.append("nodeSelector")
    if not any(
        (t.key, t.operator, t.effect) == (default["key"], "Exists", "NoSchedule")
        for t in spec.tolerations or []
    ):
        missing.append("tolerations")
    for key, value in (("team", "orders"), ("floe.dev/test-suite", "e2e")):
        if (meta.labels or {}).get(key) != value:
            missing.append(f"label {key}")
    if (meta.annotations or {}).get("floe.dev/test-note") != "placed":
        missing.append("annotation")
    return missing


def catalog_spec(stack, kind: str, name: str) -> dict | None:
    """``sqlite``: topic_body's own; ``postgresql``: a JDBC catalog of its own on the stack's
    PostgreSQL; ``gcs``, ``adls``: the same, its warehouse on the stack's Google Cloud Storage
    or Azure emulator; ``rest``: the stack's REST catalog server, where the table left by an
    earlier run is dropped first (the server's catalog outlives a test)."""
    if kind == "sqlite":
        return None
    if kind == "postgresql":
        return postgres_catalog(stack, name)
    if kind in OBJECT_STORES:
        catalog = postgres_catalog(stack, name)
        warehouse, properties = object_store(stack, kind, name)
        return {
            **catalog,
            "warehouse": warehouse,
            "properties": {
                **properties,
                **{
                    key: value
                    for key, value in catalog["properties"].items()
                    if key.startswith("jdbc.")
                },
            },
        }
    spec = rest_catalog(stack)
    catalog = topic_catalog(None, spec)
    if catalog.table_exists("analytics.orders"):
        catalog.purge_table("analytics.orders")
    return spec


@pytest.mark.node
@pytest.mark.parametrize("catalog_kind", ["sqlite", "postgresql", "rest", *OBJECT_STORES])
def test_maintenance_cron_jobs_follow_the_spec_and_one_run_on_the_node_compacts_the_table(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name, catalog_kind
):
    """The operator, the job on the node and a maintenance Job, on a SQLite catalog, a
    PostgreSQL one and the Iceberg REST catalog server. The driver, the executor and the
    maintenance pod are placed as the resource and the operator's defaults say."""
    admin = admin_client(stack)
    custom = client.CustomObjectsApi(admin)
    core = client.CoreV1Api(admin)
    kafka_topic = f"mt-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=1)
    producer = AvroProducer(stack, kafka_topic)
    spec_catalog = catalog_spec(stack, catalog_kind, kafka_topic)
    body = topic_body(stack, shared, kafka_topic, spec_catalog)
    body["spec"]["commit"] = {"interval": "1s"}
    # A registry Secret as a cluster with a private registry has (the node has the image: it
    # is not pulled), and the node the pods must run on, by its hostname label.
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="team-registry"),
            type="kubernetes.io/dockerconfigjson",
            string_data={".dockerconfigjson": '{"auths": {}}'},
        ),
    )
    node = core.list_node().items[0].metadata.labels["kubernetes.io/hostname"]
    body["spec"]["spark"].update(PLACEMENT, nodeSelector={"kubernetes.io/hostname": node})
    body["spec"]["maintenance"] = {"compaction": {"minInputFiles": 2}}
    custom.create_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
    )

    def resource() -> dict:
        return custom.get_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
        )

    assert wait_until(lambda: len(cron_jobs(admin, namespace)) == 4, timeout=60), logs(
        tmp_path, namespace
    )
    jobs = cron_jobs(admin, namespace)
    assert {name: (c.spec.schedule, c.spec.concurrency_policy) for name, c in jobs.items()} == {
        "floe-orders-compaction": ("17 * * * *", "Forbid"),
        "floe-orders-expire-snapshots": ("43 3 * * *", "Forbid"),
        "floe-orders-remove-orphans": ("13 4 * * 0", "Forbid"),
        "floe-orders-rewrite-manifests": ("29 5 * * *", "Forbid"),
    }
    owner = jobs["floe-orders-compaction"].metadata.owner_references[0]
    assert (owner.kind, owner.uid) == ("KafkaIcebergTopic", resource()["metadata"]["uid"])

    # A few commits, each its own small file, in a partition nobody writes any more.
    for batch in range(4):
        produce_old(producer, batch * 30, 30)
        assert wait_until(
            lambda: len(orders_rows(topic_catalog(shared, spec_catalog))) == (batch + 1) * 30,  # noqa: B023 - called within this iteration
            timeout=180,
        ), logs(tmp_path, namespace)
    app_uid = custom.get_namespaced_custom_object(
        "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications", "floe-orders"
    )["metadata"]["uid"]
    for role in ("driver", "executor"):
        pods = core.list_namespaced_pod(namespace, label_selector=f"spark-role={role}").items
        assert pods and all(p.status.phase == "Running" for p in pods), role
        assert {p.metadata.name: placed(p, node) for p in pods} == {
            p.metadata.name: [] for p in pods
        }

    # (a schedule that does not fire during the test: a run of its own would record its outcome
    # over the one below)
    custom.patch_namespaced_custom_object(
        "floe.dev",
        "v1alpha1",
        namespace,
        "kafkaicebergtopics",
        "orders",
        {
            "spec": {
                "maintenance": {
                    "compaction": {"schedule": "7 3 1 * *"},
                    "removeOrphans": {"enabled": False},
                }
            }
        },
    )
    assert wait_until(
        lambda: (
            set(cron_jobs(admin, namespace))
            == {
                "floe-orders-compaction",
                "floe-orders-expire-snapshots",
                "floe-orders-rewrite-manifests",
            }
            and cron_jobs(admin, namespace)["floe-orders-compaction"].spec.schedule == "7 3 1 * *"
        ),
        timeout=60,
    ), logs(tmp_path, namespace)
    # A maintenance setting is not something the streaming job runs on: it keeps running.
    assert (
        custom.get_namespaced_custom_object(
            "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications", "floe-orders"
        )["metadata"]["uid"]
        == app_uid
    )

    catalog = topic_catalog(shared, spec_catalog)
    table = catalog.load_table("analytics.orders")
    files_before = len(list(table.scan().plan_files()))
    rows_before = orders_rows(catalog)
    assert files_before >= 4
    outcome, log = run_now(admin, namespace, "floe-orders-compaction")
    assert outcome == "Complete", log[-4000:]
    maintenance = core.list_namespaced_pod(
        namespace, label_selector="job-name=floe-orders-compaction-now"
    ).items
    assert maintenance and all(placed(p, node) == [] for p in maintenance), [
        placed(p, node) for p in maintenance
    ]

    table = catalog.load_table("analytics.orders")
    assert len(list(table.scan().plan_files())) < files_before
    assert multiset(orders_rows(catalog)) == multiset(rows_before)

    def reported() -> bool:
        state = resource().get("status", {})
        conditions = {c["type"]: (c["status"], c["reason"]) for c in state.get("conditions", [])}
        last = state.get("maintenance", {}).get("compaction", {}).get("lastRun", {})
        return (
            conditions.get("MaintenanceScheduled") == ("True", "Scheduled")
            and last.get("outcome") == "Succeeded"
        )

    assert wait_until(reported, timeout=60), resource().get("status")
    status = resource()["status"]["maintenance"]
    assert status["compaction"]["schedule"] == "7 3 1 * *"
    assert status["compaction"]["lastRun"]["rewritten_data_files_count"] >= 4
    assert "remove-orphans" not in status


@pytest.mark.faults
def test_long_names_that_share_a_prefix_each_get_their_own_job_and_cron_jobs(
    stack, operator, namespace, tmp_path, unique_name
):
    """Names are cut to what Kubernetes allows (63 for the SparkApplication, 52 for a CronJob):
    two topics whose names share their first 58 characters, and the four actions of each, must
    still get children of their own."""
    admin = admin_client(stack)
    custom = client.CustomObjectsApi(admin)
    kafka_topic = f"ln-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=1)
    producer = AvroProducer(stack, kafka_topic)
    produce_old(producer, 0, 1)  # the subject the tables are made from
    prefix = "orders-" + "x" * 51
    names = {f"{prefix}-a": "long_a", f"{prefix}-b": "long_b"}
    for name, table in names.items():
        body = topic_body(stack, tmp_path, kafka_topic)
        body["metadata"]["name"] = name
        body["spec"]["table"]["identifier"] = f"analytics.{table}"
        body["spec"]["spark"]["checkpointLocation"] = str(tmp_path / f"checkpoint-{table}")
        custom.create_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
        )

    def owned_by() -> dict[str, list[tuple[str, str]]]:
        """Each topic's SparkApplications and CronJobs (kind, name), by their owner."""
        children: dict[str, list[tuple[str, str]]] = {name: [] for name in names}
        apps = custom.list_namespaced_custom_object(
            "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications"
        )["items"]
        for app in apps:
            for owner in app["metadata"].get("ownerReferences", []):
                children[owner["name"]].append(("SparkApplication", app["metadata"]["name"]))
        for cron_job in cron_jobs(admin, namespace).values():
            for owner in cron_job.metadata.owner_references or []:
                children[owner.name].append(("CronJob", cron_job.metadata.name))
        return children

    def status(name: str) -> dict:
        return custom.get_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", name
        ).get("status", {})

    def complete() -> bool:
        return all(len(kids) == 5 for kids in owned_by().values()) and all(
            len(status(name).get("maintenance", {})) == 4 for name in names
        )

    assert wait_until(complete, timeout=90), (owned_by(), logs(tmp_path, namespace))
    children = owned_by()
    every = [kid for kids in children.values() for kid in kids]
    assert len(set(every)) == 10, children
    for name, kids in children.items():
        state = status(name)
        assert {("CronJob", entry["cronJob"]) for entry in state["maintenance"].values()} == {
            kid for kid in kids if kid[0] == "CronJob"
        }
        assert state["sparkApplication"]["name"] in {kid[1] for kid in kids}
        for action in ("compaction", "expire-snapshots", "remove-orphans", "rewrite-manifests"):
            assert state["maintenance"][action]["cronJob"].endswith(f"-{action}")
