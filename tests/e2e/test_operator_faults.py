"""The operator killed at awkward moments converges: one child per resource, finalizer honoured."""

from __future__ import annotations

import re
import subprocess

import pytest
from kubernetes import client

from .kube import (
    REFRESH_SECONDS,
    SPARK_CRD,
    admin_client,
    install_crd,
    running_job_pods,
    wait_until,
)
from .test_operator import topic_body

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

APPS = ("sparkoperator.k8s.io", "v1beta2")


@pytest.fixture
def api(stack):
    install_crd(admin_client(stack), SPARK_CRD)
    return client.CustomObjectsApi(admin_client(stack))


def apps(api, namespace) -> list[dict]:
    return api.list_namespaced_custom_object(*APPS, namespace, "sparkapplications")["items"]


def topic(api, namespace) -> dict | None:
    try:
        return api.get_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
        )
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def create_topic_resource(api, stack, namespace, tmp_path):
    from ..integration.jobkit import create_topic

    name = f"{namespace}-t"
    create_topic(stack.bootstrap, name, partitions=1)
    api.create_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", topic_body(stack, tmp_path, name)
    )


def test_operator_killed_right_after_creating_the_child_converges_to_one_child(
    stack, api, operator_control, namespace, tmp_path
):
    operator_control.start()
    create_topic_resource(api, stack, namespace, tmp_path)
    assert wait_until(lambda: len(apps(api, namespace)) == 1, timeout=60)
    operator_control.kill()  # possibly before it wrote the status

    operator_control.start()
    assert wait_until(
        lambda: (
            (topic(api, namespace) or {}).get("status", {}).get("sparkApplication", {}).get("name")
            == "floe-orders"
        ),
        timeout=60,
    )
    assert [a["metadata"]["name"] for a in apps(api, namespace)] == ["floe-orders"]


def test_child_deleted_while_the_operator_is_down_is_recreated(
    stack, api, operator_control, namespace, tmp_path
):
    operator_control.start()
    create_topic_resource(api, stack, namespace, tmp_path)
    assert wait_until(lambda: len(apps(api, namespace)) == 1, timeout=60)
    first = apps(api, namespace)[0]["metadata"]["uid"]
    operator_control.kill()
    api.delete_namespaced_custom_object(*APPS, namespace, "sparkapplications", "floe-orders")

    operator_control.start()
    assert wait_until(
        lambda: (
            len(apps(api, namespace)) == 1 and apps(api, namespace)[0]["metadata"]["uid"] != first
        ),
        timeout=60,
    )
    assert len(apps(api, namespace)) == 1


def test_resource_deleted_while_the_operator_is_down_is_finalized_when_it_returns(
    stack, api, operator_control, namespace, tmp_path
):
    operator_control.start()
    create_topic_resource(api, stack, namespace, tmp_path)
    assert wait_until(
        lambda: (
            "floe.dev/finalizer"
            in ((topic(api, namespace) or {}).get("metadata", {}).get("finalizers") or [])
        ),
        timeout=60,
    )
    assert wait_until(lambda: len(apps(api, namespace)) == 1, timeout=60)
    operator_control.kill()
    api.delete_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
    )
    assert topic(api, namespace) is not None  # held by the finalizer while nobody handles it

    operator_control.start()
    assert wait_until(lambda: topic(api, namespace) is None, timeout=60)
    assert wait_until(lambda: apps(api, namespace) == [], timeout=60)


def test_a_second_resource_on_a_table_is_refused_and_takes_it_over_once_the_first_is_gone(
    stack, api, operator, namespace, tmp_path
):
    from ..integration.jobkit import AvroProducer, create_topic
    from ..integration.test_job_roundtrip import V1, order
    from .test_operator import topic_catalog

    kafka_topic = f"{namespace}-t"
    create_topic(stack.bootstrap, kafka_topic, partitions=1)
    producer = AvroProducer(stack, kafka_topic)
    producer.send(key=b"k", value=order(1, 1), schema=V1)  # the subject the table is made from
    producer.flush()
    resources = ("floe.dev", "v1alpha1", namespace, "kafkaicebergtopics")
    api.create_namespaced_custom_object(*resources, topic_body(stack, tmp_path, kafka_topic))

    def condition(name: str, kind: str) -> tuple[str, str, str] | None:
        try:
            found = api.get_namespaced_custom_object(*resources, name)
        except client.ApiException:
            return None
        return next(
            (
                (c["status"], c["reason"], c["message"])
                for c in found.get("status", {}).get("conditions", [])
                if c["type"] == kind
            ),
            None,
        )

    def writer() -> str | None:
        return topic_catalog(tmp_path).load_table("analytics.orders").properties.get("floe.writer")

    assert wait_until(lambda: (condition("orders", "TableReady") or ("",))[0] == "True", timeout=60)
    assert writer() == f"{namespace}/orders"

    copy = topic_body(stack, tmp_path, kafka_topic)
    copy["metadata"]["name"] = "orders-copy"
    api.create_namespaced_custom_object(*resources, copy)
    assert wait_until(
        lambda: (condition("orders-copy", "Ready") or ("", ""))[:2] == ("False", "TableInUse"),
        timeout=60,
    )
    assert (
        f"written by KafkaIcebergTopic {namespace}/orders" in condition("orders-copy", "Ready")[2]
    )
    assert [a["metadata"]["name"] for a in apps(api, namespace)] == ["floe-orders"]
    assert writer() == f"{namespace}/orders"

    # The first resource goes (deletionPolicy Retain keeps the table): the second takes over.
    api.delete_namespaced_custom_object(*resources, "orders")
    assert wait_until(
        lambda: (condition("orders-copy", "TableReady") or ("",))[0] == "True", timeout=90
    ), condition("orders-copy", "Ready")
    assert wait_until(
        lambda: [a["metadata"]["name"] for a in apps(api, namespace)] == ["floe-orders-copy"],
        timeout=60,
    )
    assert writer() == f"{namespace}/orders-copy"
    events = (
        client.CoreV1Api(admin_client(stack))
        .list_namespaced_event(namespace, field_selector="involvedObject.name=orders-copy")
        .items
    )
    adopted = [e.message for e in events if e.reason == "TableAdopted"]
    assert adopted and f"was written by {namespace}/orders, which is gone" in adopted[0]


def create_dropping_topic(stack, api, namespace: str, shared, name: str, records: int) -> None:
    """A Kafka topic with ``records`` orders, and its resource ``orders`` with
    ``deletionPolicy: Delete``."""
    from ..integration.jobkit import AvroProducer, create_topic
    from ..integration.test_job_roundtrip import produce_orders

    kafka_topic = name.replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=1)
    produce_orders(AvroProducer(stack, kafka_topic), 0, records)
    body = topic_body(stack, shared, kafka_topic)
    body["spec"]["table"]["deletionPolicy"] = "Delete"
    api.create_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
    )


@pytest.mark.node
def test_a_resource_deleted_while_its_job_runs_goes_after_its_pods_and_takes_its_table(
    stack, api, operator, drivers, namespace, shared, tmp_path, unique_name
):
    from .test_operator import logs, orders_rows, topic_catalog

    create_dropping_topic(stack, api, namespace, shared, f"gone-{unique_name}", 20)
    catalog = topic_catalog(shared)
    assert wait_until(lambda: len(orders_rows(catalog)) == 20, timeout=300, interval=2), logs(
        tmp_path, namespace
    )
    api.delete_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
    )
    assert wait_until(lambda: topic(api, namespace) is None, timeout=180, interval=0.2), logs(
        tmp_path, namespace
    )
    # Nothing of the resource runs once it is gone.
    assert running_job_pods(admin_client(stack), namespace, "floe-orders") == []
    assert apps(api, namespace) == []
    assert not catalog.table_exists("analytics.orders")


@pytest.mark.node
def test_a_resource_deleted_while_its_application_is_submitting_leaves_no_driver_and_no_table(
    stack, api, operator, drivers, namespace, shared, tmp_path, unique_name
):
    """Deleted the moment its SparkApplication appears, while spark-operator runs spark-submit
    for it (no driver pod yet, and no finalizer on the application): the application is only
    deleted once spark-operator has submitted it, so no driver it was starting runs after the
    resource is gone (where spark-operator's webhook is off, nothing else refuses that pod),
    and the table the deletion drops stays dropped."""
    import time

    from .test_operator import logs, topic_catalog

    create_dropping_topic(stack, api, namespace, shared, f"submitting-{unique_name}", 5)
    assert wait_until(lambda: len(apps(api, namespace)) == 1, timeout=60, interval=0.1)
    state = (apps(api, namespace)[0].get("status") or {}).get("applicationState", {})
    assert state.get("state", "") == "", state  # not submitted yet
    api.delete_namespaced_custom_object(
        "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
    )
    states = []  # the application's state as long as it is there
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and (found := apps(api, namespace)):
        states.append((found[0].get("status") or {}).get("applicationState", {}).get("state", ""))
        time.sleep(0.1)
    assert states and states[-1] not in ("", "NEW"), states  # submitted before it went
    assert wait_until(lambda: topic(api, namespace) is None, timeout=180, interval=0.2), logs(
        tmp_path, namespace
    )

    catalog = topic_catalog(shared)
    admin = admin_client(stack)
    # A driver spark-operator was starting when the application went would be up by now.
    assert not wait_until(
        lambda: (
            running_job_pods(admin, namespace, "floe-orders")
            or catalog.table_exists("analytics.orders")
        ),
        timeout=20,
        interval=1,
    ), (running_job_pods(admin, namespace, "floe-orders"), logs(tmp_path, namespace))
    assert apps(api, namespace) == []


def held_visit(
    operator, namespace: str, refresh_seconds: float = REFRESH_SECONDS, timeout: float = 60
) -> bool:
    """Waits until a visit of ``orders`` is held: none has finished for longer than the
    refresh interval (the operator's /metrics counts the visits that finished)."""
    import time

    import requests
    from prometheus_client.parser import text_string_to_metric_families

    def finished() -> float:
        scraped = requests.get(operator.metrics_url, timeout=10).text
        return sum(
            sample.value
            for family in text_string_to_metric_families(scraped)
            for sample in family.samples
            if sample.name == "floe_reconciles_total"
            and sample.labels.get("namespace") == namespace
            and sample.labels.get("name") == "orders"
        )

    count, since, deadline = finished(), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (now := finished()) != count:
            count, since = now, time.monotonic()
        elif time.monotonic() - since > refresh_seconds + 2:
            return True
        time.sleep(0.5)
    return False


@pytest.mark.holds("toxiproxy")
def test_a_resource_deleted_during_a_refresh_leaves_no_table_and_no_application(
    stack, api, operator, namespace, tmp_path, unique_name
):
    """The operator reaches the registry through the stack's fault proxy; its answers held
    back (a latency toxic) keep a refresh busy while the resource is deleted."""
    from ..faultproxy import FaultProxy
    from ..integration.jobkit import AvroProducer, create_topic
    from ..integration.test_job_roundtrip import produce_orders
    from .test_operator import logs, topic_catalog

    kafka_topic = f"{namespace}-t"
    create_topic(stack.bootstrap, kafka_topic, partitions=1)
    produce_orders(AvroProducer(stack, kafka_topic), 0, 1)  # the subject the table is made from
    proxy = FaultProxy(stack.env["FLOE_TOXIPROXY_URL"])
    proxy.reset()
    try:
        body = topic_body(stack, tmp_path, kafka_topic)
        registry = body["spec"]["value"]["schemaRegistry"]
        registry["url"] = stack.env["FLOE_FAULTY_SCHEMA_REGISTRY_URL"]
        body["spec"]["table"]["deletionPolicy"] = "Delete"
        api.create_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
        )
        catalog = topic_catalog(tmp_path)
        assert wait_until(
            lambda: catalog.table_exists("analytics.orders") and len(apps(api, namespace)) == 1,
            timeout=60,
        ), logs(tmp_path, namespace)

        proxy.add_toxic("registry", "latency", latency=60_000)
        assert held_visit(operator, namespace), "no refresh waited on the registry"
        api.delete_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", "orders"
        )
        # kopf runs the deletion beside the busy refresh: an operator that dropped the table now
        # would see the refresh create the table and the job again once the registry answers.
        wait_until(lambda: not catalog.table_exists("analytics.orders"), timeout=5)
        proxy.reset()
        assert wait_until(lambda: topic(api, namespace) is None, timeout=90), logs(
            tmp_path, namespace
        )
        assert wait_until(lambda: apps(api, namespace) == [], timeout=30)
        assert not catalog.table_exists("analytics.orders"), logs(tmp_path, namespace)
        events = (
            client.CoreV1Api(admin_client(stack))
            .list_namespaced_event(namespace, field_selector="involvedObject.name=orders")
            .items
        )
        created = [e.message for e in events if e.reason == "JobCreated"]
        assert created == ["created SparkApplication floe-orders"], created  # never again
    finally:
        proxy.reset()


@pytest.mark.node
@pytest.mark.holds("toxiproxy")
def test_neighbours_the_operator_cannot_reach_leave_the_progress_it_showed_and_are_named(
    stack, api, operator, drivers, namespace, shared, tmp_path, unique_name
):
    """The resource reaches PostgreSQL, the S3 store, Kafka and the registry only through the
    stack's fault proxies: its job and the operator alike.  While they refuse connections the
    status names what the operator could not reach and keeps the table's progress as last
    seen (neither offsets gone nor the whole topic as lag), and nothing is made again; once
    they are back it shows the table's real offsets, and each record landed once."""
    import uuid

    from ..faultproxy import FaultProxy
    from ..integration.jobkit import AvroProducer, assert_exactly_once, create_topic
    from ..integration.nemesis import end_offsets
    from ..integration.test_job_roundtrip import produce_orders
    from .test_operator import logs, orders_rows, postgres_catalog, topic_catalog

    env = stack.env
    kafka_topic = f"down-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, kafka_topic, partitions=2)
    producer = AvroProducer(stack, kafka_topic)
    produce_orders(producer, 0, 100)
    catalog = postgres_catalog(stack, f"down-{uuid.uuid4().hex[:8]}")
    body = topic_body(
        stack,
        shared,
        kafka_topic,
        {
            **catalog,
            "uri": env["FLOE_FAULTY_POSTGRES_JDBC"],
            "properties": {**catalog["properties"], "s3.endpoint": env["FLOE_FAULTY_S3_ENDPOINT"]},
        },
    )
    body["spec"]["kafka"]["bootstrapServers"] = env["FLOE_FAULTY_KAFKA_BOOTSTRAP"]
    body["spec"]["value"]["schemaRegistry"]["url"] = env["FLOE_FAULTY_SCHEMA_REGISTRY_URL"]
    direct = topic_catalog(shared, catalog)  # the test reads the table past the proxies

    def status() -> dict:
        return (topic(api, namespace) or {}).get("status") or {}

    def condition(kind: str, shown: dict | None = None) -> tuple[str, str] | None:
        return {
            c["type"]: (c["status"], c["reason"])
            for c in (shown or status()).get("conditions") or []
        }.get(kind)

    def landed(ends: dict[int, int]) -> bool:
        shown = status()
        offsets = shown.get("offsets") or {}
        return (
            offsets.get("committed") == {str(p): o for p, o in ends.items()}
            and offsets.get("lag") == 0
            and "error" not in offsets
            and condition("Ready", shown) == ("True", "Landing")
        )

    def progress(shown: dict) -> tuple:
        offsets = shown["offsets"]
        return (
            offsets["committed"],
            offsets["latest"],
            offsets["lag"],
            shown["table"]["snapshotId"],
        )

    proxy = FaultProxy(env["FLOE_TOXIPROXY_URL"])
    proxy.reset()
    try:
        api.create_namespaced_custom_object(
            "floe.dev", "v1alpha1", namespace, "kafkaicebergtopics", body
        )
        ends = end_offsets(stack.bootstrap, kafka_topic, 2)
        assert wait_until(lambda: landed(ends), timeout=300, interval=2), (
            f"{status()}\n{logs(tmp_path, namespace)}"
        )
        before = status()
        table_uuid = direct.load_table("analytics.orders").metadata.table_uuid

        for name in ("postgres", "kafka", "registry"):  # connections refused
            proxy.enable(name, False)
        assert wait_until(
            lambda: (
                condition("TableReady") == ("False", "CatalogUnavailable")
                and condition("SchemaInSync") == ("Unknown", "RegistryUnavailable")
                and "error" in status()["offsets"]
            ),
            timeout=120,
            interval=1,
        ), f"{status()}\n{logs(tmp_path, namespace)}"
        during = status()
        assert progress(during) == progress(before)
        assert during["offsets"]["error"].startswith("Kafka could not be asked")
        assert (
            "could not read the table"
            in {c["type"]: c["message"] for c in during["conditions"]}["TableReady"]
        )
        proxy.reset()

        proxy.enable("s3", False)  # the table's metadata cannot be read
        assert wait_until(
            lambda: (
                condition("TableReady") == ("False", "CatalogUnavailable")
                and "error" not in status()["offsets"]
            ),
            timeout=120,
            interval=1,
        ), f"{status()}\n{logs(tmp_path, namespace)}"
        assert progress(status()) == progress(before)
        proxy.reset()

        produce_orders(producer, 100, 50)
        ends = end_offsets(stack.bootstrap, kafka_topic, 2)
        assert wait_until(lambda: landed(ends), timeout=300, interval=2), (
            f"{status()}\n{logs(tmp_path, namespace)}"
        )
    finally:
        proxy.reset()
    assert direct.load_table("analytics.orders").metadata.table_uuid == table_uuid  # not made again
    assert_exactly_once(
        orders_rows(direct), {(p, o): None for p, end in ends.items() for o in range(end)}
    )


# The driver's JVM (spark-submit's, in the driver container), found by its command line (the
# pattern's brackets keep it from matching this shell's own).
_JVM = (
    "for d in /proc/[0-9]*; do if tr '\\0' ' ' < $d/cmdline 2>/dev/null "
    "| grep -q 'org[.]apache[.]spark[.]deploy[.]SparkSubmi[t]'; then "
    "kill -{signal} ${{d#/proc/}}; fi; done"
)


@pytest.mark.node
def test_a_job_that_stops_committing_while_records_wait_is_called_stalled_with_what_it_does(
    stack, api, operator_control, drivers, namespace, shared, tmp_path, unique_name
):
    """The driver's JVM frozen (SIGSTOP: a hang that fails nothing, as a commit stuck on a
    silent neighbour does) while records wait in Kafka: after the stall threshold Ready turns
    False with reason Stalled and what the driver's metrics say it is doing, a Warning Event
    says so, and the operator's floe_topic_stalled is 1. Thawed, the job goes on: Ready again,
    every record once."""
    import requests

    from ..integration.jobkit import assert_exactly_once
    from ..integration.nemesis import end_offsets
    from ..integration.test_job_roundtrip import produce_orders
    from .conftest import free_port
    from .test_operator import declared_orders, logs, orders_rows, orders_status, topic_catalog

    metrics_port = free_port()
    operator_control.start(
        FLOE_STALL_INTERVALS="2", FLOE_STALL_MIN_SECONDS="15", FLOE_METRICS_PORT=str(metrics_port)
    )
    kafka_topic = f"stall-{unique_name}".replace("_", "-")
    producer = declared_orders(stack, shared, namespace, kafka_topic, 30)
    catalog = topic_catalog(shared)

    def ready() -> tuple[str, str, str] | None:
        found = {c["type"]: c for c in orders_status(stack, namespace).get("conditions") or []}
        ready = found.get("Ready")
        return (ready["status"], ready["reason"], ready["message"]) if ready else None

    def landed(count: int) -> bool:
        offsets = orders_status(stack, namespace).get("offsets") or {}
        return (
            len(orders_rows(catalog)) == count
            and offsets.get("lag") == 0
            and (ready() or ("",))[0] == "True"
        )

    assert wait_until(lambda: landed(30), timeout=300, interval=2), logs(tmp_path, namespace)
    driver = next(
        p
        for p in running_job_pods(admin_client(stack), namespace, "floe-orders")
        if p.endswith("-driver")
    )

    def signal_jvm(signal: str) -> None:
        done = subprocess.run(
            [
                "kubectl",
                "exec",
                "-n",
                namespace,
                driver,
                "-c",
                "spark-kubernetes-driver",
                "--",
                "sh",
                "-c",
                _JVM.format(signal=signal),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr

    signal_jvm("STOP")
    try:
        produce_orders(producer, 30, 20)
        assert wait_until(
            lambda: (ready() or ("",))[:2] == ("False", "Stalled"), timeout=180, interval=1
        ), f"{orders_status(stack, namespace)}\n" + logs(tmp_path, namespace)
        status = orders_status(stack, namespace)
        message = ready()[2]
        assert status["phase"] == "Degraded"
        assert message.startswith("the job has committed nothing since ")
        assert "though Kafka has records past the table's offsets; the job is " in message
        # What the driver's metrics said (its Python side still answers; Spark's JVM does not).
        assert re.search(
            r"the job is (starting|between micro-batches|reading|loading|sending|"
            r"writing|committing|expiring|waiting to try).*\(since \d{4}-",
            message,
        ), message
        assert f"kubectl logs -n {namespace} {driver}" in message
        warnings = [
            e
            for e in client.CoreV1Api(admin_client(stack))
            .list_namespaced_event(namespace, field_selector="involvedObject.name=orders")
            .items
            if e.reason == "Stalled"
        ]
        assert warnings and warnings[0].type == "Warning", warnings
        scraped = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
        assert f'floe_topic_stalled{{name="orders",namespace="{namespace}"}} 1.0' in scraped
    finally:
        signal_jvm("CONT")
    assert wait_until(lambda: landed(50), timeout=300, interval=2), logs(tmp_path, namespace)
    assert ready()[:2] == ("True", "Landing")
    assert_exactly_once(orders_rows(catalog), producer.sent)
    assert orders_status(stack, namespace)["offsets"]["committed"] == {
        str(p): o for p, o in end_offsets(stack.bootstrap, kafka_topic, 2).items()
    }
