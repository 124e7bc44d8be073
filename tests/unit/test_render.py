"""What the operator renders for a KafkaIcebergTopic: the job config and the SparkApplication."""

from __future__ import annotations

import json

import pytest

from floe_operator.render import Topic, config_map, duration_seconds, spark_application
from floe_operator.settings import OperatorSettings
from floe_sparkapp.config import parse_config

pytestmark = pytest.mark.unit

BODY = {
    "metadata": {"name": "orders", "namespace": "data", "uid": "u-1", "generation": 3},
    "spec": {
        "kafka": {"bootstrapServers": "kafka:9092", "topic": "orders",
                  "authSecretRef": {"name": "kafka-auth"}},
        "value": {"format": "avro", "schemaRegistry": {"url": "http://registry:8081",
                                                       "subject": "orders-value",
                                                       "authSecretRef": {"name": "sr"}}},
        "table": {"catalog": {"uri": "jdbc:postgresql://pg:5432/iceberg",
                              "warehouse": "s3://lake/wh", "secretRef": {"name": "lake"},
                              "properties": {"s3.endpoint": "http://minio:9000"}},
                  "identifier": "analytics.orders"},
        "commit": {"interval": "1m30s"},
        "deadLetter": {"topic": "orders.dlq"},
    },
}


def test_durations():
    assert [duration_seconds(d) for d in ("60s", "1m30s", "2h", "500ms")] == [60, 90, 7200, 1]


def test_the_job_config_carries_the_spec_and_names_secrets_only_by_mount_path():
    topic = Topic.from_body(BODY)
    rendered = config_map(topic, OperatorSettings())

    assert rendered["metadata"]["name"] == "floe-orders-job"
    assert rendered["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    config = parse_config(rendered["data"]["job.json"])
    assert config.writer == "data/orders"
    assert config.generation == 3
    assert config.commit.interval_seconds == 90
    assert config.kafka.properties_dir == "/etc/floe/secrets/kafka"
    assert config.table.catalog.properties_dir == "/etc/floe/secrets/catalog"
    assert config.value.schema_registry.basic_auth_file == (
        "/etc/floe/secrets/registry/basic.auth.user.info")
    assert config.checkpoint_location == "s3a://lake/wh/_floe/checkpoints/data/orders"
    assert config.dead_letter.topic == "orders.dlq"


def test_the_spark_application_mounts_config_and_secrets_and_is_owned():
    app = spark_application(Topic.from_body(BODY), OperatorSettings(spark_image="img:1"))

    assert app["metadata"]["name"] == "floe-orders"
    assert app["metadata"]["ownerReferences"][0] == {
        "apiVersion": "floe.dev/v1alpha1", "kind": "KafkaIcebergTopic", "name": "orders",
        "uid": "u-1", "controller": True, "blockOwnerDeletion": True}
    spec = app["spec"]
    assert spec["image"] == "img:1"
    assert spec["arguments"] == ["run", "--config", "/etc/floe/job/job.json"]
    assert spec["driver"]["configMaps"] == [{"name": "floe-orders-job", "path": "/etc/floe/job"}]
    assert {s["name"] for s in spec["driver"]["secrets"]} == {"kafka-auth", "lake", "sr"}
    assert spec["driver"]["serviceAccount"] == "floe-spark"
    assert "secret" not in json.dumps(spec["sparkConf"]).lower()
