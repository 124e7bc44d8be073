"""The README's quickstart, run against the local stack as a user runs it on a cluster.

The user's edits are made as the README asks for them: the example's addresses, registry and
secrets (``...``) become the stack's; nothing else of the commands changes. Two things a user
does differently here:

- spark-operator's install needs its chart repository (the network): its values are rendered
  with the chart of the same version the stack runs, which serves floe's job namespaces.
- The node has two cores: the example's driver and executor (a core each, Spark's default) ask
  for a quarter core each, as on any cluster that small.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import textwrap
import uuid

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kubernetes import client
from kubernetes.client.rest import ApiException

from hack import demo
from hack.stack.cluster import serve_namespace, spark_operator_chart

from ..integration.jobkit import assert_exactly_once, s3_properties
from .conftest import _gone, _renew
from .kube import ROOT, admin_client, delete_namespace_without_operator, wait_until

# The chart installed as the README says, cluster-wide, and the namespace `data` made anew: no
# other test of the stack runs beside it.
pytestmark = [pytest.mark.e2e, pytest.mark.node, pytest.mark.alone]

NAMESPACE, TOPIC = "data", "orders"


def quickstart() -> list[tuple[str, str]]:
    """The README quickstart's code blocks in order: (language, text)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart on your cluster", 1)[1].split("\n## ", 1)[0]
    return [
        (lang, textwrap.dedent(body))
        for lang, body in re.findall(r"```(\w*)\n(.*?)^\s*```", section, re.S | re.M)
    ]


def commands(block: str) -> list[str]:
    """A shell block's commands, continuation lines joined."""
    return [c.strip() for c in re.sub(r"\s*\\\n\s*", " ", block).splitlines() if c.strip()]


def edits(env: dict[str, str], warehouse: str) -> dict[str, str]:
    """What a user puts in place of the example's addresses and secrets, in the stack's terms."""
    jdbc = env["FLOE_POSTGRES_JDBC"]
    user, password = env["FLOE_POSTGRES_USER"], env["FLOE_POSTGRES_PASSWORD"]
    return {
        "registry.example.com": "floe",  # the stack's images are floe/floe-operator, floe-spark
        "kafka.kafka.svc:9092": env["FLOE_KAFKA_BOOTSTRAP"],
        "http://schema-registry.kafka.svc:8081": env["FLOE_SCHEMA_REGISTRY_URL"],
        "jdbc:postgresql://iceberg-catalog.data.svc:5432/iceberg": jdbc,
        "postgresql+psycopg2://iceberg:...@iceberg-catalog.data.svc:5432/iceberg": f"postgresql+psycopg2://{user}:{password}@{jdbc.removeprefix('jdbc:postgresql://')}",
        "jdbc.user: iceberg": f"jdbc.user: {user}",
        "s3://lake/warehouse": warehouse,
        "http://minio.data.svc:9000": env["FLOE_S3_ENDPOINT"],
        "jdbc.password=...": f"jdbc.password={password}",
        "s3.access-key-id=...": f"s3.access-key-id={env['FLOE_S3_ACCESS_KEY']}",
        "s3.secret-access-key=...": f"s3.secret-access-key={env['FLOE_S3_SECRET_KEY']}",
        '"s3.access-key-id": "..."': f'"s3.access-key-id": "{env["FLOE_S3_ACCESS_KEY"]}"',
        '"s3.secret-access-key": "..."': f'"s3.secret-access-key": "{env["FLOE_S3_SECRET_KEY"]}"',
    }


def edited(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        text = text.replace(old, new)
    assert "..." not in text and "example.com" not in text, text
    return text


def run(command: str) -> str:
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def topic_records(bootstrap: str) -> tuple[dict[tuple[int, int], None], dict[str, int]]:
    """Every record the topic holds, by (partition, offset), and each partition's next offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"quickstart-{uuid.uuid4()}"})
    try:
        partitions = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        records, ends = {}, {}
        for partition in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=10)
            records.update({(partition, offset): None for offset in range(low, high)})
            ends[str(partition)] = high
        return records, ends
    finally:
        consumer.close()


def fresh_topic(bootstrap: str) -> None:
    """The example's topic, deleted if a previous run left it, so this run's records are all."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if TOPIC in admin.list_topics(timeout=10).topics:
        for future in admin.delete_topics([TOPIC]).values():
            future.result(timeout=30)
        assert wait_until(
            lambda: TOPIC not in admin.list_topics(timeout=10).topics, timeout=60, interval=1
        )


def query(snippet: str):
    """The README's Python snippet; the value of its last expression."""
    tree = ast.parse(snippet)
    last = ast.Expression(tree.body.pop().value)
    scope: dict = {}
    exec(compile(tree, "README.md", "exec"), scope)  # noqa: S102 - the README's own code
    return eval(compile(last, "README.md", "eval"), scope)  # noqa: S307


def test_the_readmes_quickstart_lands_the_example_topic_on_a_cluster(stack):
    blocks = quickstart()
    assert [lang for lang, _ in blocks] == ["sh", "sh", "sh", "", "python"], blocks
    spark_operator, install, declare, expected, snippet = (body for _, body in blocks)
    api = admin_client(stack)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    replacements = edits(
        stack.env, f"s3://{stack.env['FLOE_S3_BUCKET']}/quickstart-{uuid.uuid4().hex[:8]}"
    )
    every = (
        spark_operator
        + install
        + declare
        + snippet
        + (ROOT / "examples" / "orders.yaml").read_text()
    )
    assert [old for old in replacements if old not in every] == []  # the README's own words

    # 1. spark-operator: its chart, with the README's values, serves every namespace.
    add, upgrade = commands(spark_operator)
    assert add == "helm repo add spark-operator https://kubeflow.github.io/spark-operator"
    assert "helm upgrade --install spark-operator spark-operator/spark-operator" in upgrade
    rendered = run(
        upgrade.replace(
            "helm upgrade --install spark-operator spark-operator/spark-operator",
            f"helm template spark-operator {shlex.quote(spark_operator_chart())}",
        )
    )
    deployments = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] == "Deployment"]
    assert {
        d["metadata"]["name"]: [
            a
            for a in d["spec"]["template"]["spec"]["containers"][0]["args"]
            if a.startswith("--namespaces")
        ]
        for d in deployments
    } == {
        "spark-operator-controller": ['--namespaces=""'],
        "spark-operator-webhook": ['--namespaces=""'],
    }

    # The topic's records, as the user's producers wrote them; a previous run's topic and
    # table gone (the stack keeps Kafka's data from one run to the next).
    fresh_topic(stack.env["FLOE_KAFKA_BOOTSTRAP"])
    demo.produce(stack.env)
    from pyiceberg.catalog.sql import SqlCatalog

    sql = SqlCatalog(
        "lake",
        uri=replacements[next(k for k in replacements if k.startswith("postgresql+"))],
        warehouse=replacements["s3://lake/warehouse"],
        **s3_properties(stack),
    )
    if sql.table_exists("analytics.orders"):
        sql.drop_table("analytics.orders")
    assert wait_until(lambda: _gone(core, "floe-system"), timeout=120)
    if not _gone(core, NAMESPACE):  # the stack made it for the demo: the user makes it here
        delete_namespace_without_operator(api, NAMESPACE)
        assert wait_until(lambda: _gone(core, NAMESPACE), timeout=300, interval=1)

    def kit() -> dict:
        return custom.get_namespaced_custom_object(
            "floe.dev", "v1alpha1", NAMESPACE, "kafkaicebergtopics", "orders"
        )

    try:
        # 2. floe, from the chart's defaults and the images.
        [helm_install] = commands(install)
        assert helm_install.startswith("helm install floe charts/floe-operator")
        notes = run(edited(helm_install, replacements))
        assert "spark.jobNamespaces" in notes, notes

        # 3. The Secret and the example resource, edited as the README says.
        create_namespace, secret, apply, get = commands(declare)
        assert create_namespace == f"kubectl create namespace {NAMESPACE}"
        run(create_namespace)
        serve_namespace(NAMESPACE)  # spark-operator's Roles: its chart's, in a namespace it serves
        run(edited(secret, replacements))
        assert apply == "kubectl apply -f examples/orders.yaml"
        resource = yaml.safe_load(
            edited((ROOT / "examples" / "orders.yaml").read_text(), replacements)
        )
        resource["spec"]["spark"] = {
            "conf": {
                "spark.kubernetes.driver.request.cores": "250m",
                "spark.kubernetes.executor.request.cores": "250m",
            }
        }
        applied = subprocess.run(
            shlex.split(apply.replace("examples/orders.yaml", "-")),
            cwd=ROOT,
            input=yaml.safe_dump(resource),
            capture_output=True,
            text=True,
        )
        assert applied.returncode == 0, applied.stderr
        header = expected.split()[:6]
        assert run(get).split()[:6] == header

        sent, ends = topic_records(stack.env["FLOE_KAFKA_BOOTSTRAP"])
        expected_row = ["orders", "True", "Running", "0"]

        def shown() -> bool:
            lines = run(get).splitlines()
            return lines[0].split() == header and lines[1].split()[:4] == expected_row

        def why() -> str:
            return "\n".join(
                subprocess.run(shlex.split(command), capture_output=True, text=True).stdout
                for command in (
                    f"kubectl describe kit orders -n {NAMESPACE}",
                    "kubectl logs -n floe-system deployment/floe-floe-operator --tail=40",
                    f"kubectl logs -n {NAMESPACE} floe-orders-driver --tail=60",
                )
            )

        assert wait_until(shown, timeout=420, interval=3), why()
        assert kit()["status"]["offsets"]["committed"] == ends

        # 4. The README's query (decoded rows) reads every record once.
        rows = query(edited(snippet, replacements)).to_pylist()
        assert_exactly_once(rows, sent)
        assert {r["value"]["customer"] for r in rows} <= {"ada", "grace", "linus"}
    finally:
        try:
            custom.delete_namespaced_custom_object(
                "floe.dev", "v1alpha1", NAMESPACE, "kafkaicebergtopics", "orders"
            )
            wait_until(lambda: not _exists(kit), timeout=120, interval=1)
        except ApiException as error:
            assert error.status == 404
        subprocess.run(
            ["helm", "uninstall", "floe", "--namespace", "floe-system", "--wait"],
            capture_output=True,
        )
        try:
            core.delete_namespace("floe-system")
        except ApiException as error:
            assert error.status == 404
        _renew(api, NAMESPACE)  # as the stack keeps it: made, served by spark-operator


def _exists(read) -> bool:
    try:
        read()
        return True
    except ApiException as error:
        if error.status == 404:
            return False
        raise
