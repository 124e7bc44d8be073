"""Maintenance CronJobs on the real API server, and their command run locally on the table."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from kubernetes import client

from ..integration.jobkit import AvroProducer, create_topic
from ..integration.test_maintenance import multiset, produce_old
from .kube import ROOT, admin_client, wait_until
from .test_operator import logs, orders_rows, topic_body, topic_catalog

pytestmark = pytest.mark.e2e

# Where the job image keeps what the CronJob's command names, and where it is here.
IMAGE_PATHS = {"/opt/spark/bin/spark-submit": str(ROOT / ".venv" / "bin" / "spark-submit"),
               "/opt/floe/floe_job.py": str(ROOT / "images" / "spark" / "floe_job.py")}


def cron_jobs(admin, namespace) -> dict[str, client.V1CronJob]:
    batch = client.BatchV1Api(admin)
    return {c.metadata.name: c for c in batch.list_namespaced_cron_job(namespace).items}


def run_locally(stack, admin, cron_job, namespace, tmp_path) -> subprocess.CompletedProcess:
    """The CronJob's container command, with the image's paths mapped to this checkout's and
    the ConfigMap it mounts written to a local file."""
    [container] = cron_job.spec.job_template.spec.template.spec.containers
    config_map = client.CoreV1Api(admin).read_namespaced_config_map(
        "floe-orders-job", namespace)
    (tmp_path / "job").mkdir(exist_ok=True)
    (tmp_path / "job" / "job.json").write_text(config_map.data["job.json"])
    command = [IMAGE_PATHS.get(part, part).replace("/etc/floe/job", str(tmp_path / "job"))
               for part in container.command]
    # The image has the connector jars in Spark's own jars directory; here they are passed.
    command[1:1] = ["--jars", stack.env["FLOE_SPARK_JARS"]]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def test_maintenance_cron_jobs_follow_the_spec_and_their_command_compacts_the_table(
        stack, operator, runner, namespace, tmp_path, unique_name):
    admin = admin_client(stack)
    custom = client.CustomObjectsApi(admin)
    kafka_topic = f"mt-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=1)
    producer = AvroProducer(stack, kafka_topic)
    body = topic_body(stack, tmp_path, kafka_topic)
    body["spec"]["commit"] = {"interval": "1s"}
    body["spec"]["maintenance"] = {"compaction": {"minInputFiles": 2}}
    custom.create_namespaced_custom_object("floe.dev", "v1alpha1", namespace,
                                           "kafkaicebergtopics", body)

    def resource() -> dict:
        return custom.get_namespaced_custom_object("floe.dev", "v1alpha1", namespace,
                                                   "kafkaicebergtopics", "orders")

    assert wait_until(lambda: len(cron_jobs(admin, namespace)) == 4, timeout=60), logs(tmp_path)
    jobs = cron_jobs(admin, namespace)
    assert {name: (c.spec.schedule, c.spec.concurrency_policy) for name, c in jobs.items()} == {
        "floe-orders-compaction": ("17 * * * *", "Forbid"),
        "floe-orders-expire-snapshots": ("43 3 * * *", "Forbid"),
        "floe-orders-remove-orphans": ("13 4 * * 0", "Forbid"),
        "floe-orders-rewrite-manifests": ("29 5 * * *", "Forbid")}
    owner = jobs["floe-orders-compaction"].metadata.owner_references[0]
    assert (owner.kind, owner.uid) == ("KafkaIcebergTopic", resource()["metadata"]["uid"])

    # A few commits, each its own small file, in a partition nobody writes any more.
    for batch in range(4):
        produce_old(producer, batch * 30, 30)
        assert wait_until(lambda: len(orders_rows(topic_catalog(tmp_path))) == (batch + 1) * 30,
                          timeout=180), logs(tmp_path)
    app_uid = custom.get_namespaced_custom_object(
        "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications",
        "floe-orders")["metadata"]["uid"]

    custom.patch_namespaced_custom_object("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics",
                                          "orders", {"spec": {"maintenance": {
                                              "compaction": {"schedule": "*/5 * * * *"},
                                              "removeOrphans": {"enabled": False}}}})
    assert wait_until(lambda: set(cron_jobs(admin, namespace)) == {
        "floe-orders-compaction", "floe-orders-expire-snapshots", "floe-orders-rewrite-manifests"}
        and cron_jobs(admin, namespace)["floe-orders-compaction"].spec.schedule == "*/5 * * * *",
        timeout=60), logs(tmp_path)
    # A maintenance setting is not something the streaming job runs on: it keeps running.
    assert custom.get_namespaced_custom_object(
        "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications",
        "floe-orders")["metadata"]["uid"] == app_uid

    catalog = topic_catalog(tmp_path)
    table = catalog.load_table("analytics.orders")
    files_before = len(list(table.scan().plan_files()))
    rows_before = orders_rows(catalog)
    assert files_before >= 4
    done = run_locally(stack, admin, cron_jobs(admin, namespace)["floe-orders-compaction"],
                       namespace, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    table = catalog.load_table("analytics.orders")
    assert len(list(table.scan().plan_files())) < files_before
    assert multiset(orders_rows(catalog)) == multiset(rows_before)

    def reported() -> bool:
        state = resource().get("status", {})
        conditions = {c["type"]: (c["status"], c["reason"]) for c in state.get("conditions", [])}
        last = state.get("maintenance", {}).get("compaction", {}).get("lastRun", {})
        return (conditions.get("MaintenanceScheduled") == ("True", "Scheduled")
                and last.get("outcome") == "Succeeded")

    assert wait_until(reported, timeout=60), resource().get("status")
    status = resource()["status"]["maintenance"]
    assert status["compaction"]["schedule"] == "*/5 * * * *"
    assert status["compaction"]["lastRun"]["rewritten_data_files_count"] >= 4
    assert "remove-orphans" not in status
