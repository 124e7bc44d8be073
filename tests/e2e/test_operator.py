"""The operator, as a real process on the real API server; the jobs of the tests marked `node`
run on the stack's node, as driver and executor pods of the real spark-operator."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from kubernetes import client

from floe_operator.clock import epoch
from floe_operator.plan import failover_delay
from hack.demo import node_spark

from ..integration.jobkit import AvroProducer, assert_exactly_once, create_topic, recreate_topic
from ..integration.test_job_roundtrip import V1, V2, order, produce_orders
from .kube import FAILOVER_BACKOFF_SECONDS, SPARK_CRD, admin_client, install_crd, wait_until

pytestmark = pytest.mark.e2e


def topic_body(stack, directory: Path, kafka_topic: str, catalog: dict | None = None) -> dict:
    """A KafkaIcebergTopic named orders whose checkpoints are in ``directory`` (on the node, one
    under its shared directory, mounted in the Spark pods) and whose catalog is ``catalog`` (a
    spec's catalog section) or, by default, a SQLite catalog with its warehouse there too.
    Its jobs live a minute or two: their JVMs compile with the client compiler alone
    (``node_spark``'s short_lived); the chart's tests in test_node keep the JVM's default.

    The SQLite catalog's file is made first, writable by all: the operator (a process of root
    here) and the Spark pods (the image's user) both write it, and SQLite makes new files 0644."""
    if catalog is None:
        catalog_file = directory / "c.db"
        if not catalog_file.exists():
            catalog_file.touch()
            catalog_file.chmod(0o666)
    return {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "KafkaIcebergTopic",
        "metadata": {"name": "orders"},
        "spec": {
            "kafka": {"bootstrapServers": stack.bootstrap, "topic": kafka_topic},
            "value": {
                "format": "avro",
                "schemaRegistry": {"url": stack.registry_url, "subject": f"{kafka_topic}-value"},
            },
            "table": {
                "catalog": catalog or sqlite_catalog(directory),
                "identifier": "analytics.orders",
            },
            "commit": {"interval": "2s"},
            "spark": {
                "checkpointLocation": str(directory / "checkpoint"),
                **node_spark(directory, short_lived=True),
            },
        },
    }


def declared_orders(
    stack,
    directory: Path,
    namespace: str,
    kafka_topic: str,
    records: int,
    labels: dict[str, str] | None = None,
    spec: dict[str, dict] | None = None,
) -> AvroProducer:
    """``records`` orders on a new Kafka topic of two partitions, declared as the
    KafkaIcebergTopic ``orders`` of ``namespace`` (:func:`topic_body`, each section of ``spec``
    merged into its own); its producer."""
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    producer = AvroProducer(stack, kafka_topic)
    produce_orders(producer, 0, records)
    body = topic_body(stack, directory, kafka_topic)
    if labels:
        body["metadata"]["labels"] = labels
    for section, fields in (spec or {}).items():
        body["spec"][section] = {**body["spec"].get(section, {}), **fields}
    client.CustomObjectsApi(admin_client(stack)).create_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
    )
    return producer


def orders_status(stack, namespace: str) -> dict:
    """The status of the KafkaIcebergTopic ``orders`` of ``namespace``."""
    return (
        client.CustomObjectsApi(admin_client(stack))
        .get_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
        )
        .get("status", {})
    )


def sqlite_catalog(directory: Path) -> dict:
    return {
        "name": "op",
        "uri": f"jdbc:sqlite:{directory / 'c.db'}",
        "warehouse": f"file://{directory / 'wh'}",
    }


def rest_catalog(stack) -> dict:
    """The stack's Iceberg REST catalog server, its warehouse on the S3 server."""
    from ..integration.jobkit import s3_properties

    return {
        "type": "rest",
        "name": "op",
        "uri": stack.env["FLOE_REST_CATALOG_URI"],
        "warehouse": stack.env["FLOE_REST_CATALOG_WAREHOUSE"],
        "properties": s3_properties(stack),
    }


def postgres_catalog(stack, warehouse: str) -> dict:
    """A JDBC catalog on the stack's PostgreSQL, its warehouse (a path of its own) on the S3
    server. The server outlives a test, so the catalog's name is new each time."""
    from ..integration.jobkit import s3_properties

    return {
        "type": "sql",
        "name": f"pg_{uuid.uuid4().hex[:8]}",
        "uri": stack.env["FLOE_POSTGRES_JDBC"],
        "warehouse": f"s3://{stack.env['FLOE_S3_BUCKET']}/{warehouse}",
        "properties": {
            **s3_properties(stack),
            "jdbc.user": stack.env["FLOE_POSTGRES_USER"],
            "jdbc.password": stack.env["FLOE_POSTGRES_PASSWORD"],
        },
    }


def topic_catalog(directory: Path, catalog: dict | None = None):
    """The catalog topic_body points at, opened with PyIceberg."""
    from floe_sparkapp.catalog import load_catalog
    from floe_sparkapp.contract import CatalogSpec

    return load_catalog(CatalogSpec.model_validate(catalog or sqlite_catalog(directory)))


def orders_rows(catalog) -> list[dict]:
    """The rows of analytics.orders, or none while it cannot be read yet (polled by tests)."""
    try:
        return catalog.load_table("analytics.orders").scan().to_arrow().to_pylist()
    except Exception:  # noqa: BLE001 - not created yet, or the catalog busy with a commit
        return []


def kubectl(*args: str) -> str:
    done = subprocess.run(["kubectl", *args], capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def kill_driver(namespace: str) -> None:
    """SIGKILLs every process of the orders job's driver container but its init, the JVM among
    them: the driver dies with exit code 137."""
    kubectl(
        "exec",
        "-n",
        namespace,
        "floe-orders-driver",
        "-c",
        "spark-kubernetes-driver",
        "--",
        "sh",
        "-c",
        "kill -KILL -1",
    )


def logs(tmp_path, namespace: str) -> str:
    """What a failing test shows: the operator's log, the namespace's pods and applications, and
    the end of each Spark pod's log."""
    files = sorted(tmp_path.glob("operator*.log"))
    parts = [f"--- {p.name}\n" + p.read_text(errors="replace")[-4000:] for p in files]
    parts.append(kubectl("get", "pods,sparkapplications", "-n", namespace, "-o", "wide"))
    for role in ("driver", "executor"):
        parts.append(
            f"--- {role} pods\n"
            + kubectl("logs", "-n", namespace, "-l", f"spark-role={role}", "--tail=40", "--prefix")
        )
    return "\n".join(parts)


@pytest.mark.node
def test_a_topic_lands_and_its_status_shows_it(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    custom = client.CustomObjectsApi(admin_client(stack))
    kafka_topic = f"op-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    # A dead-letter topic too small for one of the undecodable records.
    dead_letter = f"{kafka_topic}.dlq"
    create_topic(stack.bootstrap, dead_letter, partitions=1, config={"max.message.bytes": "2000"})
    producer = AvroProducer(stack, kafka_topic)
    produce_orders(producer, 0, 120)
    producer.send(key=b"huge", raw=b"not avro " * 1000, partition=0)
    producer.flush()

    body = topic_body(stack, shared, kafka_topic)
    body["spec"]["deadLetter"] = {"topic": dead_letter}
    custom.create_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
    )

    def current_status() -> dict:
        return custom.get_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
        ).get("status", {})

    expected = {str(p): o for p, o in producer.next_offsets().items()}

    def landed() -> bool:
        state = current_status()
        return (
            state.get("offsets", {}).get("committed") == expected
            and state.get("offsets", {}).get("lag") == 0
        )

    assert wait_until(landed, timeout=240, interval=2), (
        f"{current_status()}\n{logs(tmp_path, namespace)}"
    )
    waited = subprocess.run(
        [
            "kubectl",
            "wait",
            "--for=condition=Ready",
            "-n",
            namespace,
            "kit/orders",
            "--timeout=60s",
        ],
        capture_output=True,
        text=True,
    )
    assert waited.returncode == 0, waited.stderr
    state = current_status()
    conditions = {c["type"]: c for c in state["conditions"]}
    assert set(conditions) == {
        "Ready",
        "JobRunning",
        "TableReady",
        "SchemaInSync",
        "MaintenanceScheduled",
        "DeadLetter",
    }
    assert conditions["MaintenanceScheduled"]["status"] == "True"
    assert conditions["Ready"]["status"] == "True"  # the refused record is in value_raw
    refused = conditions["DeadLetter"]
    assert (refused["status"], refused["reason"]) == ("False", "DeadLetterFailing")
    assert refused["message"].startswith(
        f"1 undecodable record(s) not sent to dead-letter topic {dead_letter} after 3 attempts"
    )
    assert "RecordTooLargeException" in refused["message"]
    huge = [r for r in orders_rows(topic_catalog(shared)) if r["key"] == b"huge"]
    assert len(huge) == 1 and huge[0]["value_raw"] == b"not avro " * 1000
    assert conditions["SchemaInSync"]["status"] == "True"
    assert state["phase"] == "Running"
    assert state["observedGeneration"] == 1
    assert state["sparkApplication"]["name"] == "floe-orders"
    assert state["sparkApplication"]["state"] == "RUNNING"
    assert int(state["table"]["snapshotId"]) > 0
    assert state["table"]["registryVersion"] == 1
    assert state["landedThrough"] <= time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    printed = subprocess.run(
        ["kubectl", "get", "kit", "-n", namespace], capture_output=True, text=True, check=True
    ).stdout
    header, row = printed.splitlines()[:2]
    assert header.split() == ["NAME", "READY", "PHASE", "LAG", "FRESHNESS", "AGE"]
    assert row.split()[:4] == ["orders", "True", "Running", "0"]
    scraped = requests.get(operator.metrics_url, timeout=10).text
    series = f'{{name="orders",namespace="{namespace}"}}'
    assert f"floe_topic_ready{series} 1.0" in scraped
    assert f"floe_topic_lag_records{series} 0.0" in scraped
    assert f"floe_reconciles_total{series}" in scraped
    assert "floe_reconcile_duration_seconds_count " in scraped  # one series, all resources
    assert re.search(r"^floe_build_info{version=\"[^\"]+\"} 1.0$", scraped, re.M)
    commits = re.search(rf"^floe_topic_commits_total{re.escape(series)} (\S+)$", scraped, re.M)
    assert commits and float(commits.group(1)) >= 1, scraped
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "floe"), "status", "-n", namespace],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = shown.splitlines()[1].split()
    assert line[:4] == ["orders", "True", "Running", "0"]
    assert line[5:7] == [state["table"]["snapshotId"], "v1"]  # line[4] is the freshness, moving
    events = (
        client.CoreV1Api(admin_client(stack))
        .list_namespaced_event(namespace, field_selector="involvedObject.name=orders")
        .items
    )
    became_ready = [e for e in events if e.reason == "Landing"]
    assert became_ready and became_ready[0].type == "Normal", [
        (e.reason, e.message) for e in events
    ]
    assert became_ready[0].message.startswith("Ready is True")
    failing = [e for e in events if e.reason == "DeadLetterFailing"]
    assert failing and failing[0].type == "Warning" and dead_letter in failing[0].message

    # The next undecodable record fits: it is delivered and the condition clears.
    producer.send(key=b"small", raw=b"not avro", partition=1)
    producer.flush()

    def delivering() -> bool:
        shown = {c["type"]: c for c in current_status()["conditions"]}["DeadLetter"]
        return (shown["status"], shown["reason"]) == ("True", "Delivering")

    assert wait_until(delivering, timeout=120), f"{current_status()}\n{logs(tmp_path, namespace)}"


def test_an_invalid_spec_is_reported_and_nothing_is_created(
    stack, operator, namespace, tmp_path, unique_name
):
    install_crd(admin_client(stack), SPARK_CRD)
    custom = client.CustomObjectsApi(admin_client(stack))
    body = topic_body(stack, tmp_path, "whatever")
    del body["spec"]["spark"]
    # A REST catalog that names no warehouse (the server has its own): no checkpoint root.
    body["spec"]["table"]["catalog"] = {"type": "rest", "uri": "http://catalog.invalid:8181"}

    custom.create_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
    )

    def reported():
        state = custom.get_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
        ).get("status", {})
        ready = {c["type"]: c for c in state.get("conditions", [])}.get("Ready", {})
        return ready.get("reason") == "InvalidSpec" and ready

    ready = None
    assert wait_until(lambda: bool(reported()), timeout=60), logs(tmp_path, namespace)
    ready = reported()
    assert ready["status"] == "False"
    assert ready["message"] == (
        "spec.spark.checkpointLocation is required when the catalog has "
        "no warehouse and the operator has no checkpoint root"
    )
    apps = custom.list_namespaced_custom_object(
        "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications"
    )["items"]
    assert apps == []


def test_a_namespace_spark_operator_does_not_serve_is_named_on_the_status_with_the_fix(
    stack, operator, namespace, tmp_path, unique_name
):
    """The test's namespace is not among spark-operator's job namespaces: the application is
    never taken up, and the status and a Warning Event say so, with the command that fixes it
    (the tests' operators wait 2 s for spark-operator here instead of FLOE_SUBMIT_WAIT_SECONDS'
    30)."""
    install_crd(admin_client(stack), SPARK_CRD)
    custom = client.CustomObjectsApi(admin_client(stack))
    kafka_topic = f"unserved-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=1)
    producer = AvroProducer(stack, kafka_topic)
    produce_orders(producer, 0, 3)
    producer.flush()
    custom.create_namespaced_custom_object(
        "floe.dev",
        "v1alpha1",
        namespace,
        "kafkaicebergtopics",
        topic_body(stack, tmp_path, kafka_topic),
    )

    def job_condition() -> dict:
        state = custom.get_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
        ).get("status", {})
        return {c["type"]: c for c in state.get("conditions", [])}

    assert wait_until(
        lambda: job_condition().get("Ready", {}).get("reason") == "SparkOperatorNotWatching",
        timeout=60,
    ), logs(tmp_path, namespace)
    job = job_condition()["JobRunning"]
    assert job["status"] == "False" and job["reason"] == "SparkOperatorNotWatching"
    assert "has not taken up SparkApplication floe-orders" in job["message"]
    assert f"--set 'spark.jobNamespaces={{<the namespaces it has>,{namespace}}}'" in job["message"]
    events = (
        client.CoreV1Api(admin_client(stack))
        .list_namespaced_event(namespace, field_selector="involvedObject.kind=KafkaIcebergTopic")
        .items
    )
    warned = [e for e in events if e.reason == "SparkOperatorNotWatching"]
    assert len(warned) == 1 and warned[0].type == "Warning", [(e.reason, e.message) for e in events]


def test_a_missing_driver_account_is_named_and_the_job_starts_once_it_is_there(
    stack, operator, namespace, tmp_path, unique_name
):
    """A resource whose driver runs as an account nobody made: no SparkApplication (its
    submission would fail again and again), the status and an Event say what to make; made,
    the job is created at the next visit."""
    install_crd(admin_client(stack), SPARK_CRD)
    admin = admin_client(stack)
    custom, core = client.CustomObjectsApi(admin), client.CoreV1Api(admin)
    kafka_topic = f"account-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=1)
    producer = AvroProducer(stack, kafka_topic)
    produce_orders(producer, 0, 3)
    producer.flush()
    body = topic_body(stack, tmp_path, kafka_topic)
    body["spec"]["spark"]["serviceAccount"] = "orders-driver"
    custom.create_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
    )

    def conditions() -> dict:
        state = custom.get_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
        ).get("status", {})
        return {c["type"]: c for c in state.get("conditions", [])}

    def apps() -> list:
        return custom.list_namespaced_custom_object(
            "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications"
        )["items"]

    assert wait_until(
        lambda: conditions().get("Ready", {}).get("reason") == "ServiceAccountMissing", timeout=60
    ), logs(tmp_path, namespace)
    job = conditions()["JobRunning"]
    assert job["status"] == "False"
    assert job["message"].startswith(
        f"ServiceAccount orders-driver not found in namespace {namespace}"
    )
    assert "spec.spark.serviceAccount" in job["message"]
    assert apps() == []
    events = core.list_namespaced_event(
        namespace, field_selector="involvedObject.kind=KafkaIcebergTopic"
    ).items
    assert [e.type for e in events if e.reason == "ServiceAccountMissing"] == ["Warning"]

    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="orders-driver"))
    )
    assert wait_until(lambda: len(apps()) == 1, timeout=60), logs(tmp_path, namespace)
    assert apps()[0]["spec"]["driver"]["serviceAccount"] == "orders-driver"
    assert wait_until(
        lambda: conditions()["JobRunning"]["reason"] != "ServiceAccountMissing", timeout=60
    ), conditions()


@pytest.mark.node
def test_a_spec_change_rolls_the_job_into_a_branch_that_main_follows_only_when_published(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    """A spec change restarts the job; this one also lands it in a branch (write, audit,
    publish), from main's offsets, and main moves when kubectl floe publish (or the
    annotation) says so. (Suspend and resume: test_kubectl_plugin.)"""
    custom = client.CustomObjectsApi(admin_client(stack))
    args = ("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders")
    kafka_topic = f"roll-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    producer = AvroProducer(stack, kafka_topic)

    def current_status() -> dict:
        return custom.get_namespaced_custom_object(*args).get("status", {})

    def landed() -> bool:
        offsets = current_status().get("offsets", {})
        expected = {str(p): o for p, o in producer.next_offsets().items()}
        return offsets.get("committed") == expected

    def app():
        items = custom.list_namespaced_custom_object(
            "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications"
        )["items"]
        return items[0] if items else None

    produce_orders(producer, 0, 60)
    custom.create_namespaced_custom_object(*args[:4], topic_body(stack, shared, kafka_topic))
    catalog = topic_catalog(shared)  # after topic_body made its file, writable by the pods
    assert wait_until(landed, timeout=240, interval=2), logs(tmp_path, namespace)
    first_uid = app()["metadata"]["uid"]

    custom.patch_namespaced_custom_object(
        *args, {"spec": {"commit": {"interval": "3s"}, "table": {"branch": "audit"}}}
    )
    assert wait_until(
        lambda: (
            (app() or {}).get("metadata", {}).get("annotations", {}).get("floe.dev/generation")
            == "2"
        ),
        timeout=60,
    ), logs(tmp_path, namespace)
    assert app()["metadata"]["uid"] != first_uid  # the job was restarted with the new spec
    produce_orders(producer, 60, 40)
    assert wait_until(landed, timeout=240, interval=2), logs(tmp_path, namespace)
    assert current_status()["observedGeneration"] == 2
    # The 40 landed in the branch: main's readers still see the first 60.
    assert len(orders_rows(catalog)) == 60
    branch = current_status()["branch"]
    assert branch["name"] == "audit" and branch["unpublishedCommits"] >= 1, branch
    published = subprocess.run(
        ["kubectl", "floe", "publish", "orders", "-n", namespace, "-w"],
        capture_output=True,
        text=True,
        timeout=180,
        env=plugin_env(),
    )
    assert published.returncode == 0, published.stdout + published.stderr
    assert (
        published.stdout.splitlines()[-1]
        == f"published: main is at snapshot {branch['snapshotId']}"
    )
    assert_exactly_once(orders_rows(catalog), producer.sent)
    assert wait_until(lambda: current_status()["branch"]["unpublishedCommits"] == 0, timeout=60)

    # More commits on the branch, then any other value of the annotation publishes its head.
    produce_orders(producer, 100, 40)
    assert wait_until(landed, timeout=240, interval=2), logs(tmp_path, namespace)
    assert len(orders_rows(catalog)) == 100
    custom.patch_namespaced_custom_object(
        *args, {"metadata": {"annotations": {"floe.dev/publish": "after-more"}}}
    )
    assert wait_until(
        lambda: (
            (current_status()["branch"].get("lastPublish") or {}).get("request") == "after-more"
        ),
        timeout=60,
    ), logs(tmp_path, namespace)
    assert "error" not in current_status()["branch"]["lastPublish"]
    assert_exactly_once(orders_rows(catalog), producer.sent)


@pytest.mark.node
def test_registry_versions_evolve_the_table_and_a_breaking_one_waits_for_approval(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    custom = client.CustomObjectsApi(admin_client(stack))
    args = ("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders")
    kafka_topic = f"schema-{unique_name}".replace("_", "-")
    subject = f"{kafka_topic}-value"
    create_topic(stack.bootstrap, kafka_topic, partitions=1)
    producer = AvroProducer(stack, kafka_topic)
    produce_orders(producer, 0, 20)
    custom.create_namespaced_custom_object(*args[:4], topic_body(stack, shared, kafka_topic))
    catalog = topic_catalog(shared)

    def value_fields() -> dict[str, str]:
        try:
            table = catalog.load_table("analytics.orders")
        except Exception:  # noqa: BLE001 - not made yet, or the catalog busy with a commit
            return {}
        return {
            f.name: str(f.field_type) for f in table.schema().find_field("value").field_type.fields
        }

    def schema_condition() -> dict:
        state = custom.get_namespaced_custom_object(*args).get("status", {})
        return {c["type"]: c for c in state.get("conditions", [])}.get("SchemaInSync", {})

    assert wait_until(lambda: schema_condition().get("status") == "True", timeout=120), logs(
        tmp_path, namespace
    )
    registry = SchemaRegistryClient({"url": stack.registry_url})

    # An additive version: the table evolves with no manual step.
    registry.register_schema(subject, Schema(json.dumps(V2), "AVRO"))
    assert wait_until(lambda: "note" in value_fields(), timeout=60), logs(tmp_path, namespace)
    assert wait_until(
        lambda: (
            custom.get_namespaced_custom_object(*args)["status"]["table"].get("registryVersion")
            == 2
        ),
        timeout=60,
    )

    # A breaking version: condition set, nothing changed until approved.
    requests.put(
        f"{stack.registry_url}/config/{subject}", json={"compatibility": "NONE"}, timeout=10
    ).raise_for_status()
    v3 = {
        **V2,
        "fields": [
            f if f["name"] != "quantity" else {"name": "quantity", "type": "string"}
            for f in V2["fields"]
        ],
    }
    registry.register_schema(subject, Schema(json.dumps(v3), "AVRO"))
    assert wait_until(lambda: schema_condition().get("reason") == "BreakingChange", timeout=60)
    condition = schema_condition()
    assert condition["status"] == "False"
    assert condition["message"] == (
        "registry version 3: breaking schema change: value.quantity: type changed from int to "
        "string; the table keeps its schema and those records land in value_raw until the "
        'annotation floe.dev/approve-schema-version: "3" approves the change'
    )
    assert value_fields()["quantity"] == "int"

    # Approved with the kubectl plugin, which shows the change first.
    approved = subprocess.run(
        ["kubectl", "floe", "approve", "orders", "-n", namespace, "--yes"],
        capture_output=True,
        text=True,
        env=plugin_env(),
    )
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.splitlines()[:2] == [
        f"KafkaIcebergTopic {namespace}/orders: registry version 3 changes the table's columns:",
        "  ~ value.quantity: type changed from int to string",
    ]
    assert (
        custom.get_namespaced_custom_object(*args)["metadata"]["annotations"][
            "floe.dev/approve-schema-version"
        ]
        == "3"
    )
    assert wait_until(lambda: value_fields().get("quantity") == "string", timeout=60), logs(
        tmp_path, namespace
    )
    assert value_fields()["quantity_before_v3"] == "int"
    assert wait_until(lambda: schema_condition().get("status") == "True", timeout=60)
    assert schema_condition()["message"] == (
        "applied approved registry version 3: value.quantity -> quantity_before_v3"
    )

    # Records of the approved version now decode into the table.
    producer.send(key=b"v3", value={**order(99, 2), "quantity": "a dozen"}, schema=v3)
    producer.flush()

    def v3_row():
        return next((r for r in orders_rows(catalog) if r["key"] == b"v3"), None)

    assert wait_until(lambda: v3_row() is not None, timeout=120, interval=1), logs(
        tmp_path, namespace
    )
    assert v3_row()["value"]["quantity"] == "a dozen" and v3_row()["value_error"] is None


@pytest.mark.node
@pytest.mark.faults
def test_a_job_that_keeps_failing_or_ends_is_recreated_by_the_operator_and_recorded(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    admin = admin_client(stack)
    custom = client.CustomObjectsApi(admin)
    args = ("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders")
    kafka_topic = f"fail-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    producer = AvroProducer(stack, kafka_topic)
    produce_orders(producer, 0, 50)
    custom.create_namespaced_custom_object(*args[:4], topic_body(stack, shared, kafka_topic))

    def app_status() -> dict:
        try:
            return custom.get_namespaced_custom_object(
                "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications", "floe-orders"
            ).get("status", {})
        except client.ApiException:
            return {}

    def record() -> dict:
        return (
            custom.get_namespaced_custom_object(*args).get("status", {}).get("sparkApplication", {})
        )

    def failover_events() -> list:
        events = (
            client.CoreV1Api(admin)
            .list_namespaced_event(namespace, field_selector="involvedObject.name=orders")
            .items
        )
        return sorted(
            (e for e in events if e.reason == "Failover"),
            key=lambda e: e.metadata.creation_timestamp,
        )

    # The driver dies twice: spark-operator does not resubmit it (restartPolicy Never); the
    # operator recreates the application each time, after 3 s and then 6 s. Each death: every
    # process of the driver's container but its init is killed, the JVM with them.
    seen: dict = {}
    for failover in (1, 2):
        assert wait_until(
            lambda: app_status().get("applicationState", {}).get("state") == "RUNNING",
            timeout=180,
            interval=1,
        ), logs(tmp_path, namespace)
        assert app_status().get("executionAttempts") == 1  # one submission per application
        killed = time.time()
        kill_driver(namespace)

        def failed_over() -> bool:  # kept: the count starts over once the job is healthy again
            seen.update(record())
            return seen.get("failovers") == failover  # noqa: B023 - called within this iteration

        assert wait_until(failed_over, timeout=120), logs(tmp_path, namespace)
        assert "driver container failed with ExitCode: 137" in seen["lastFailure"]
        # The backoff: no sooner than the fixture's 3 s, then 6 s, after the driver died (the
        # status' timestamps are whole seconds).
        assert epoch(seen["lastFailoverTime"]) + 1 >= killed + failover_delay(
            failover - 1, FAILOVER_BACKOFF_SECONDS
        )
        assert wait_until(lambda: len(failover_events()) == failover, timeout=30)  # noqa: B023 - called within this iteration
        event = failover_events()[-1]
        assert event.type == "Warning"
        assert f"recreating it (failover {failover})" in event.message
    assert wait_until(
        lambda: app_status().get("applicationState", {}).get("state") == "RUNNING", timeout=120
    ), logs(tmp_path, namespace)

    produce_orders(producer, 50, 30)
    catalog = topic_catalog(shared)
    assert wait_until(lambda: len(orders_rows(catalog)) >= 80, timeout=180, interval=2), logs(
        tmp_path, namespace
    )
    assert_exactly_once(orders_rows(catalog), producer.sent)

    # Running without dying again for FLOE_FAILOVER_RESET_SECONDS (the fixture's 45) resets
    # the count, and so the backoff; the last failure stays on the status.
    assert wait_until(lambda: record().get("failovers") == 0, timeout=120), logs(
        tmp_path, namespace
    )
    assert record()["state"] == "RUNNING"
    assert "driver container failed with ExitCode: 137" in record()["lastFailure"]

    # The job's Python process is told to stop: it stops its query and exits 0, so the driver
    # ends and spark-operator reports the application COMPLETED. A streaming job never ends by
    # itself: the operator recreates it too.
    kubectl(
        "exec",
        "-n",
        namespace,
        "floe-orders-driver",
        "-c",
        "spark-kubernetes-driver",
        "--",
        "sh",
        "-c",
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | "
        "grep -q '^[^ ]*python[^ ]* .*floe_[j]ob' && kill -TERM ${p#/proc/}; done; true",
    )
    assert wait_until(lambda: record().get("failovers") == 1, timeout=180), logs(
        tmp_path, namespace
    )
    assert "a streaming job never ends by itself" in record()["lastFailure"]
    events = (
        client.CoreV1Api(admin)
        .list_namespaced_event(namespace, field_selector="involvedObject.name=orders")
        .items
    )
    assert any(e.reason == "Failover" and "job ended (COMPLETED)" in e.message for e in events)
    produce_orders(producer, 80, 20)
    assert wait_until(lambda: len(orders_rows(catalog)) >= 100, timeout=240, interval=2), logs(
        tmp_path, namespace
    )
    assert_exactly_once(orders_rows(catalog), producer.sent)


def plugin_env() -> dict[str, str]:
    """The environment kubectl finds the floe plugin in (kubectl-floe beside this Python)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def visits(operator, name: str) -> float:
    """How many visits of the resource the operator has finished (its visits counter)."""
    scraped = requests.get(operator.metrics_url, timeout=10).text
    found = re.search(rf'^floe_reconciles_total{{name="{name}",[^}}]*}} (\S+)$', scraped, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.mark.node
@pytest.mark.faults
def test_a_job_stopped_by_data_loss_is_not_failed_over_until_the_spec_changes(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    custom = client.CustomObjectsApi(admin_client(stack))
    args = ("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders")
    kafka_topic = f"loss-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=1)
    produce_orders(AvroProducer(stack, kafka_topic), 0, 20)
    custom.create_namespaced_custom_object(*args[:4], topic_body(stack, shared, kafka_topic))
    catalog = topic_catalog(shared)
    assert wait_until(lambda: len(orders_rows(catalog)) >= 20, timeout=240, interval=2), logs(
        tmp_path, namespace
    )

    # The topic is deleted and created again: its offsets start over below the table's.
    recreate_topic(stack.bootstrap, kafka_topic, partitions=1)
    again = AvroProducer(stack, kafka_topic)
    produce_orders(again, 100, 5)

    def state() -> dict:
        return custom.get_namespaced_custom_object(*args).get("status", {})

    def job_condition() -> dict:
        return {c["type"]: c for c in state().get("conditions", [])}.get("JobRunning", {})

    assert wait_until(lambda: job_condition().get("reason") == "DataLoss", timeout=420), logs(
        tmp_path, namespace
    )
    assert state()["phase"] == "Failed"
    assert "the job stopped (exit code 3)" in job_condition()["message"]
    # Not failed over: the operator visits the resource after a failover would have been due,
    # and the failed application is still there, untouched.
    app_args = ("sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications", "floe-orders")
    failed = custom.get_namespaced_custom_object(*app_args)
    assert failed["status"]["applicationState"]["state"] == "FAILED"
    due = epoch(failed["status"]["terminationTime"]) + failover_delay(0, FAILOVER_BACKOFF_SECONDS)
    assert wait_until(lambda: time.time() > due, timeout=60)
    after_due = visits(operator, "orders") + 1  # the one under way may have begun before
    assert wait_until(lambda: visits(operator, "orders") > after_due, timeout=60)
    assert (
        custom.get_namespaced_custom_object(*app_args)["metadata"]["uid"]
        == failed["metadata"]["uid"]
    )
    assert not state().get("sparkApplication", {}).get("failovers")
    assert job_condition().get("reason") == "DataLoss"
    assert len(orders_rows(catalog)) == 20  # nothing of the new topic over the old offsets

    # What the message says to do: the resource created again, on another table. Its old
    # checkpoint, ahead of the new table, is set aside.
    custom.delete_namespaced_custom_object(*args)
    assert wait_until(
        lambda: not custom.list_namespaced_custom_object(*args[:4])["items"], timeout=120
    ), logs(tmp_path, namespace)
    body = topic_body(stack, shared, kafka_topic)
    body["spec"]["table"]["identifier"] = "analytics.orders_again"
    custom.create_namespaced_custom_object(*args[:4], body)

    def new_rows() -> list:
        try:
            return catalog.load_table("analytics.orders_again").scan().to_arrow().to_pylist()
        except Exception:  # noqa: BLE001 - not made yet, or the catalog busy with a commit
            return []

    assert wait_until(lambda: len(new_rows()) >= 5, timeout=240, interval=2), logs(
        tmp_path, namespace
    )
    assert_exactly_once(new_rows(), again.sent)


def test_deletion_policy_retain_keeps_the_table_and_delete_drops_it(
    stack, operator, namespace, tmp_path, unique_name
):
    custom = client.CustomObjectsApi(admin_client(stack))
    kafka_topic = f"del-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=1)
    producer = AvroProducer(stack, kafka_topic)
    producer.send(key=b"k", value=order(1, 1), schema=V1)
    producer.flush()
    catalog = topic_catalog(tmp_path)

    def exists(identifier: str) -> bool:
        return catalog.table_exists(identifier)

    resources = ("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics")
    policies = {"kept": "Retain", "dropped": "Delete"}
    for name, policy in policies.items():
        body = topic_body(stack, tmp_path, kafka_topic)
        body["metadata"]["name"] = name
        body["spec"]["table"]["identifier"] = f"analytics.{name}"
        body["spec"]["table"]["deletionPolicy"] = policy
        body["spec"]["spark"]["checkpointLocation"] = str(tmp_path / f"checkpoint-{name}")
        custom.create_namespaced_custom_object(*resources, body)
    for name in policies:
        assert wait_until(lambda: exists(f"analytics.{name}"), timeout=60), logs(  # noqa: B023 - called within this iteration
            tmp_path, namespace
        )
    for name in policies:  # both at once: each waits on its own application (unseen here)
        custom.delete_namespaced_custom_object(*resources, name)

    def gone(name: str) -> bool:
        try:
            custom.get_namespaced_custom_object(*resources, name)
            return False
        except client.ApiException as error:
            return error.status == 404

    for name in policies:
        assert wait_until(lambda: gone(name), timeout=60), logs(tmp_path, namespace)  # noqa: B023 - called within this iteration
    assert exists("analytics.kept")
    assert not exists("analytics.dropped")


@pytest.mark.node
@pytest.mark.faults
def test_an_upsert_topic_holds_the_last_record_per_key_through_killed_drivers(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    admin = admin_client(stack)
    custom = client.CustomObjectsApi(admin)
    args = ("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders")
    kafka_topic = f"upsert-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    producer = AvroProducer(stack, kafka_topic)
    latest: dict[str, str] = {}

    def updates(start_at: int, count: int) -> None:  # 100 keys, each updated in turn
        for i in range(start_at, start_at + count):
            key = f"k{i % 100}"
            producer.send(key=key.encode(), value={**order(i % 100, 1), "item": f"u{i}"}, schema=V1)
            latest[key] = f"u{i}"
        producer.flush()

    def table() -> dict:
        return {r["key"].decode(): r["value"]["item"] for r in orders_rows(catalog)}

    body = topic_body(stack, shared, kafka_topic)
    body["spec"]["table"].update(mode="upsert")
    catalog = topic_catalog(shared)
    updates(0, 500)
    custom.create_namespaced_custom_object(*args[:4], body)
    for round_ in range(1, 3):  # the driver killed twice, right after more updates came
        assert wait_until(lambda: table() == latest, timeout=300, interval=2), logs(
            tmp_path, namespace
        )
        updates(round_ * 500, 500)
        kill_driver(namespace)
    for k in range(10):  # tombstones
        producer.send(key=f"k{k}".encode(), raw=None)
        latest.pop(f"k{k}")
    producer.flush()
    assert wait_until(lambda: table() == latest, timeout=420, interval=2), logs(tmp_path, namespace)
    assert len(orders_rows(catalog)) == 90  # one row per key
    failed = custom.get_namespaced_custom_object(*args)["status"]["sparkApplication"]
    assert "driver container failed with ExitCode: 137" in failed["lastFailure"]


@pytest.mark.node
@pytest.mark.faults
def test_a_cdc_topic_holds_the_source_tables_rows_through_a_killed_driver(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    """Debezium change events through the operator: it makes the table from the envelope's
    row, the job applies snapshot reads, inserts, updates and deletes, and the source table
    gaining a column evolves the table."""
    from ..integration.test_job_cdc import ROW_V1, ROW_V2, Database, envelope

    custom = client.CustomObjectsApi(admin_client(stack))
    args = ("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders")
    kafka_topic = f"cdc-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    producer = AvroProducer(stack, kafka_topic)
    db = Database()

    def send(op: str, row_id: int, schema: dict, **fields) -> None:
        producer.send(
            key=str(row_id).encode(), value=db.change(op, row_id, **fields), schema=schema
        )

    def table() -> dict:
        return {
            r["value"]["id"]: r["value"] for r in orders_rows(catalog) if r["value"] is not None
        }

    for i in range(60):
        send("r", i, envelope(ROW_V1), name=f"customer {i}")
    producer.flush()
    body = topic_body(stack, shared, kafka_topic)
    body["spec"]["table"].update(mode="cdc", keyColumns=["id"])
    catalog = topic_catalog(shared)
    custom.create_namespaced_custom_object(*args[:4], body)
    expected = {i: {k: v for k, v in row.items() if k != "tier"} for i, row in db.rows.items()}
    assert wait_until(lambda: table() == expected, timeout=300, interval=2), logs(
        tmp_path, namespace
    )

    for i in range(60, 80):
        send("c", i, envelope(ROW_V1), name=f"customer {i}")
    for i in range(0, 40, 2):
        send("u", i, envelope(ROW_V1), email=f"{i}@example.com")
    producer.flush()
    kill_driver(namespace)
    for i in range(1, 40, 2):
        send("d", i, envelope(ROW_V2))
    for i in range(0, 20, 2):
        send("u", i, envelope(ROW_V2), tier="gold")
    producer.flush()
    assert wait_until(lambda: table() == db.rows, timeout=420, interval=2), logs(
        tmp_path, namespace
    )
    assert len(db.rows) == 60
    rows = orders_rows(catalog)
    assert {r["cdc"]["op"] for r in rows} == {"r", "c", "u"}
    status = custom.get_namespaced_custom_object(*args)["status"]
    assert "driver container failed with ExitCode: 137" in status["sparkApplication"]["lastFailure"]


SALE = {
    "type": "record",
    "name": "Sale",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "region", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}


@pytest.mark.node
@pytest.mark.faults
def test_a_routed_topic_lands_in_each_table_once_through_a_killed_driver(
    stack, operator, drivers, namespace, shared, tmp_path, unique_name
):
    """Routes through the operator: sales of eu go to an append table, those of us to an
    upsert table keyed by id, the rest to the topic's own table; the driver is killed
    mid-stream, and the status shows each table's progress."""
    custom = client.CustomObjectsApi(admin_client(stack))
    args = ("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders")
    kafka_topic = f"routes-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    producer = AvroProducer(stack, kafka_topic)
    regions = ("eu", "us", "apac")

    def sales(start_at: int, count: int) -> None:
        for i in range(start_at, start_at + count):
            producer.send(
                key=str(i % 50).encode(),
                schema=SALE,
                value={"id": i % 50, "region": regions[i % 3], "amount": float(i)},
            )
        producer.flush()

    def rows(identifier: str) -> list[dict]:
        try:
            return catalog.load_table(identifier).scan().to_arrow().to_pylist()
        except Exception:  # noqa: BLE001 - not made yet, or the catalog busy with a commit
            return []

    def sent(region: str) -> dict:
        return {p: r for p, r in producer.sent.items() if r["value"]["region"] == region}

    def landed() -> bool:
        return (
            len(rows("analytics.sales_eu")) == len(sent("eu"))
            and len(rows("analytics.orders")) == len(sent("apac"))
            and {r["value"]["id"]: r["value"]["amount"] for r in rows("analytics.sales_us")}
            == last_us()
        )

    def last_us() -> dict:
        return {
            r["value"]["id"]: r["value"]["amount"]
            for _, r in sorted(sent("us").items(), key=lambda item: item[1]["value"]["amount"])
        }

    sales(0, 300)
    body = topic_body(stack, shared, kafka_topic)
    body["spec"]["routes"] = [
        {"field": "region", "values": ["eu"], "table": {"identifier": "analytics.sales_eu"}},
        {
            "field": "region",
            "values": ["us"],
            "table": {"identifier": "analytics.sales_us", "mode": "upsert", "keyColumns": ["id"]},
        },
    ]
    catalog = topic_catalog(shared)
    custom.create_namespaced_custom_object(*args[:4], body)
    assert wait_until(landed, timeout=300, interval=2), logs(tmp_path, namespace)
    sales(300, 300)
    kill_driver(namespace)
    sales(600, 300)
    assert wait_until(landed, timeout=420, interval=2), logs(tmp_path, namespace)

    assert_exactly_once(rows("analytics.sales_eu"), sent("eu"))
    assert_exactly_once(rows("analytics.orders"), sent("apac"))
    assert len(rows("analytics.sales_us")) == len(last_us())  # a row per id
    latest = {str(p): o for p, o in producer.next_offsets().items()}

    def caught_up() -> bool:
        status = custom.get_namespaced_custom_object(*args).get("status") or {}
        return [
            (t["identifier"], t.get("committed"), t.get("lag")) for t in status.get("tables") or []
        ] == [
            (name, latest, 0)
            for name in ("analytics.orders", "analytics.sales_eu", "analytics.sales_us")
        ]

    assert wait_until(caught_up, timeout=60), custom.get_namespaced_custom_object(*args)
    status = custom.get_namespaced_custom_object(*args)["status"]
    assert status["offsets"]["lag"] == 0
    assert "driver container failed with ExitCode: 137" in status["sparkApplication"]["lastFailure"]
