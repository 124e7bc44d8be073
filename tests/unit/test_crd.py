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
    assert CRD_FILE.read_text() == render(), (
        "crds/ is stale: run `make crds`")


def test_the_chart_ships_the_same_crds():
    chart = sorted(p.name for p in (ROOT / "charts" / "floe-operator" / "crds").iterdir())
    assert chart == sorted(p.name for p in (ROOT / "crds").iterdir())
    for name in chart:
        assert (ROOT / "charts" / "floe-operator" / "crds" / name).read_text() == \
            (ROOT / "crds" / name).read_text(), f"charts/floe-operator/crds/{name} is stale: run `make crds`"


def test_the_schema_is_structural():
    schema = yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    def walk(node, path):
        assert "$ref" not in node and "anyOf" not in node, path
        if (node.get("type") == "object" and path != ".metadata"
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            assert "properties" in node or "additionalProperties" in node, path
        for name, child in node.get("properties", {}).items():
            walk(child, f"{path}.{name}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*")

    walk(schema, "")


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
    spec = KafkaIcebergTopicSpec.model_validate({
        "kafka": {"bootstrapServers": "kafka:9092", "topic": "orders",
                  "authSecretRef": {"name": "kafka-auth"}},
        "value": {"format": "avro", "schemaRegistry": {"url": "http://registry:8081",
                                                       "subject": "orders-value"}},
        "table": {"catalog": {"type": "sql", "uri": "jdbc:postgresql://pg:5432/iceberg",
                              "warehouse": "s3://lake/wh", "secretRef": {"name": "lake"}},
                  "identifier": "analytics.orders"},
        "commit": {"interval": "60s", "maxRecordsPerCommit": 500000},
        "deadLetter": {"topic": "orders.dlq"},
    })
    assert spec.table.partitioning == "day"
    assert spec.table.deletion_policy == "Retain"
    assert spec.schema_evolution.mode == "additive"
    assert spec.spark.executor.instances == 1
    assert spec.suspend is False


# Every bound of the job config and the spec field it is rendered from, whose CRD schema must
# refuse what the job config refuses: "what the API server accepts, the operator accepts".
# None: no spec field renders it (the operator's own value, or Kubernetes' metadata).
JOB_CONFIG_BOUNDS = {
    ("CommitConfig", "interval_seconds"): "commit.interval",
    ("CommitConfig", "max_records_per_commit"): "commit.maxRecordsPerCommit",
    ("MaintenanceConfig", "target_file_size_bytes"): "maintenance.compaction.targetFileSize",
    ("MaintenanceConfig", "min_input_files"): "maintenance.compaction.minInputFiles",
    ("MaintenanceConfig", "retain_last"): "maintenance.expireSnapshots.retainLast",
    ("MaintenanceConfig", "max_snapshot_age_seconds"): "maintenance.expireSnapshots.maxAge",
    ("MaintenanceConfig", "orphan_older_than_seconds"): "maintenance.removeOrphans.olderThan",
    ("MaintenanceConfig", "max_attempts"): None,  # the operator renders the default
    ("JobConfig", "generation"): None,  # metadata.generation, at least 1 by Kubernetes
}


def _bounds(field):
    import annotated_types

    found = {}
    for item in field.metadata:
        for name, kind in (("ge", annotated_types.Ge), ("gt", annotated_types.Gt),
                           ("le", annotated_types.Le), ("lt", annotated_types.Lt)):
            if isinstance(item, kind):
                found[name] = getattr(item, name)
    return found


def _job_config_models():
    from floe_sparkapp import config

    return {name: model for name, model in vars(config).items()
            if isinstance(model, type) and issubclass(model, config._Model)
            and model is not config._Model}


def test_every_bound_of_the_job_config_is_listed_with_its_spec_field():
    bounded = {(name, field_name) for name, model in _job_config_models().items()
               for field_name, field in model.model_fields.items() if _bounds(field)}
    assert bounded == set(JOB_CONFIG_BOUNDS), (
        "a job config bound without a CRD counterpart: add the bound to the resource model "
        "(a minimum, a maximum or a CEL rule) and list it here")


@pytest.mark.parametrize("model, field_name", [k for k, v in JOB_CONFIG_BOUNDS.items() if v])
def test_the_crd_refuses_what_the_job_config_refuses(model, field_name):
    """An integer field's minimum and maximum are at least as strict as the job config's; a
    duration's or a size's CEL rule compares it, in seconds or bytes, with the same bound."""
    bounds = _bounds(_job_config_models()[model].model_fields[field_name])
    node = yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"]["properties"]["spec"]
    for part in JOB_CONFIG_BOUNDS[(model, field_name)].split("."):
        node = node["properties"][part]
    if node["type"] == "integer":
        if "ge" in bounds:
            assert node["minimum"] >= bounds["ge"]
        if "le" in bounds:
            assert node["maximum"] <= bounds["le"]
        return
    rules = " ".join(r["rule"] for r in node.get("x-kubernetes-validations", []))
    for name, operator in (("ge", ">="), ("le", "<=")):
        if name not in bounds:
            continue
        if name == "ge" and bounds["ge"] <= 1 and "duration" in rules:
            continue  # a duration renders as at least 1 second
        assert f"{operator} {float(bounds[name])}" in rules, (
            f"{JOB_CONFIG_BOUNDS[(model, field_name)]}: no CEL rule for {operator} "
            f"{bounds[name]}")
