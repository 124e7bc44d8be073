"""The CRD in crds/ is generated from the resource models and kept in step with them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from floe_operator.crd import render
from floe_operator.resource import KafkaIcebergTopicSpec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "floe.dev_kafkaicebergtopics.yaml"


def test_crds_directory_is_up_to_date():
    from floe_operator.crd import FILES

    for name in FILES:
        assert (ROOT / "crds" / name).read_text() == render(name), (
            f"crds/{name} is stale: run `make crds`"
        )


def test_the_chart_ships_the_same_crds():
    chart = sorted(p.name for p in (ROOT / "charts" / "floe-operator" / "crds").iterdir())
    assert chart == sorted(p.name for p in (ROOT / "crds").iterdir())
    for name in chart:
        assert (ROOT / "charts" / "floe-operator" / "crds" / name).read_text() == (
            ROOT / "crds" / name
        ).read_text(), f"charts/floe-operator/crds/{name} is stale: run `make crds`"


def test_the_schema_is_structural():
    schema = yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"
    ]

    def walk(node, path):
        assert "$ref" not in node and "anyOf" not in node, path
        if (
            node.get("type") == "object"
            and path != ".metadata"
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            assert "properties" in node or "additionalProperties" in node, path
        for name, child in node.get("properties", {}).items():
            walk(child, f"{path}.{name}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*")

    walk(schema, "")


def test_every_status_the_planner_writes_fits_the_crds_status_schema():
    """The API server keeps no field the status schema lacks: each field a plan writes must be
    in it (the models refuse any other), or it would be dropped and written again at every
    visit."""
    from dataclasses import replace

    from floe_operator.plan import plan
    from floe_operator.resource import KafkaIcebergTopicStatus
    from floe_operator.view import RegistryView, TableView

    from .test_plan import NOW_MS, SETTINGS, TOPIC, V3, steady, topic_of

    def written(status):
        if isinstance(status, dict):
            return {k: written(v) for k, v in status.items() if v is not None}
        if isinstance(status, list):
            return [written(v) for v in status]
        return status

    routed = topic_of(
        routes=[
            {"field": "region", "values": ["eu"], "table": {"identifier": "analytics.orders_eu"}}
        ]
    )
    runs = {
        "compaction": {
            "time": "2026-11-18T03:00:00Z",
            "outcome": "Failed",
            "attempts": 5,
            "message": "conflict",
        }
    }
    worlds = [
        (TOPIC, steady()),
        (TOPIC, steady(table=replace(steady().table, maintenance_runs=runs))),
        (TOPIC, steady(registry=RegistryView(3, V3))),
        (TOPIC, steady(latest_offsets=None, kafka_error="KafkaException: down")),
        (TOPIC, steady(table=replace(steady().table, committed_at_ms=NOW_MS - 3_600_000))),
        (routed, steady(routed, routes={"analytics.orders_eu": TableView(error="OSError")})),
        (topic_of(suspend=True), steady()),
    ]
    for topic, world in worlds:
        status = plan(topic, world, {}, SETTINGS).status
        KafkaIcebergTopicStatus.model_validate(written(status))
        again = plan(topic, world, status, SETTINGS).status
        KafkaIcebergTopicStatus.model_validate(written({**status, **again}))


def test_the_resource_reference_is_a_valid_spec():
    """docs/resource.md's reference block, every field with its example value, is a spec the
    operator and the CRD accept (the CRD side: the e2e CRD validation tests)."""
    import re

    text = (ROOT / "docs" / "resource.md").read_text()
    block = re.search(r"# The KafkaIcebergTopic resource\n\n```yaml\n(.*?)```", text, re.S)
    resource = yaml.safe_load(block.group(1))
    spec = KafkaIcebergTopicSpec.model_validate(resource["spec"])
    assert resource["kind"] == "KafkaIcebergTopic"
    assert spec.spark.image_pull_secrets[0].name == "registry"
    assert spec.spark.tolerations[0]["effect"] == "NoSchedule"


def test_the_charts_pod_defaults_have_the_fields_of_a_resources_pod_settings():
    """The chart's spark.pod (values, their schema) and spec.spark's pod settings are the same
    fields: the operator reads the one under the other."""
    import json

    from floe_operator.resource import PodSpec

    fields = {field.alias for field in PodSpec.model_fields.values()}
    chart = ROOT / "charts" / "floe-operator"
    schema = json.loads((chart / "values.schema.json").read_text())
    assert set(schema["properties"]["spark"]["properties"]["pod"]["properties"]) == fields
    values = yaml.safe_load((chart / "values.yaml").read_text())
    assert set(values["spark"]["pod"]) == fields
    PodSpec.model_validate(values["spark"]["pod"])


def test_the_designs_example_spec_parses_with_defaults():
    spec = KafkaIcebergTopicSpec.model_validate(
        {
            "kafka": {
                "bootstrapServers": "kafka:9092",
                "topic": "orders",
                "authSecretRef": {"name": "kafka-auth"},
            },
            "value": {
                "format": "avro",
                "schemaRegistry": {"url": "http://registry:8081", "subject": "orders-value"},
            },
            "table": {
                "catalog": {
                    "type": "sql",
                    "uri": "jdbc:postgresql://pg:5432/iceberg",
                    "warehouse": "s3://lake/wh",
                    "secretRef": {"name": "lake"},
                },
                "identifier": "analytics.orders",
            },
            "commit": {"interval": "60s", "maxRecordsPerCommit": 500000},
            "deadLetter": {"topic": "orders.dlq"},
        }
    )
    assert spec.table.partitioning == "day"
    assert spec.table.deletion_policy == "Retain"
    assert spec.schema_evolution.mode == "additive"
    assert spec.spark.executor.instances == 1
    assert spec.suspend is False
