"""The KafkaIcebergTopic CRD on the real API server: defaults, and specs it refuses."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from floe_operator.render import Topic, job_config
from floe_operator.settings import OperatorSettings
from floe_operator.units import DURATION

from .kube import FLOE_CRD, admin_client, install_crd

pytestmark = pytest.mark.e2e

ARGS = ("floe.dev", "v1alpha1")

VALID = {
    "apiVersion": "floe.dev/v1alpha1",
    "kind": "KafkaIcebergTopic",
    "metadata": {"name": "orders"},
    "spec": {
        "kafka": {"bootstrapServers": "kafka:9092", "topic": "orders"},
        "value": {"format": "avro", "schemaRegistry": {"url": "http://registry:8081",
                                                       "subject": "orders-value"}},
        "table": {"catalog": {"uri": "jdbc:postgresql://pg:5432/iceberg",
                              "warehouse": "s3://lake/wh"},
                  "identifier": "analytics.orders"},
    },
}


@pytest.fixture(scope="module")
def api(stack):
    admin = admin_client(stack)
    install_crd(admin, FLOE_CRD)
    return client.CustomObjectsApi(admin)




def create(api, namespace, body):
    return api.create_namespaced_custom_object(*ARGS, namespace, "kafkaicebergtopics", body)


def refusal(api, namespace, body) -> str:
    with pytest.raises(ApiException) as refused:
        create(api, namespace, body)
    assert refused.value.status == 422
    return json.loads(refused.value.body)["message"]


def changed(path: str, value):
    body = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node = body
    for part in parents:
        node = node.setdefault(part, {})
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return body


def test_a_valid_resource_is_accepted_with_defaults(api, namespace):
    created = create(api, namespace, VALID)
    spec = created["spec"]
    assert spec["table"]["partitioning"] == "day"
    assert spec["table"]["deletionPolicy"] == "Retain"
    assert spec["table"]["catalog"]["type"] == "sql"
    assert spec["commit"] == {"interval": "60s", "maxRecordsPerCommit": 500000}
    assert spec["kafka"]["isolationLevel"] == "read_committed"
    assert spec["spark"]["executor"] == {"cores": 1, "instances": 1, "memory": "1g"}
    assert spec["suspend"] is False


PREFIX = 'KafkaIcebergTopic.floe.dev "orders" is invalid: '


SKIPPED_RULES = (", <nil>: Invalid value: null: some validation rules were not checked because "
                 "the object was invalid; correct the existing errors to complete validation")


def upsert(key_columns: list[str], format_: str = "avro") -> dict:
    body = changed("spec.table.mode", "upsert")
    body["spec"]["table"]["keyColumns"] = key_columns
    body["spec"]["value"]["format"] = format_
    return body


def cdc_of_raw_values(format_: str = "raw") -> dict:
    body = changed("spec.value.format", format_)
    body["spec"]["table"]["mode"] = "cdc"
    return body


def raw_value_decoded_key() -> dict:
    body = changed("spec.key", {"format": "avro", "subject": "orders-key"})
    body["spec"]["value"]["format"] = "raw"
    return body


def routed(*identifiers: str, format_: str = "avro") -> dict:
    body = changed("spec.routes", [{"field": "source.table", "values": [name.split(".")[-1]],
                                    "table": {"identifier": name}} for name in identifiers])
    body["spec"]["value"]["format"] = format_
    return body


@pytest.mark.parametrize("body, message", [
    (changed("spec.value.schemaRegistry", ...),
     "spec.value.schemaRegistry: Required value: schemaRegistry is required when format is avro, "
     "json or protobuf: the table schema comes from the registry (use format raw to keep the "
     "bytes only)"),
    (changed("spec.value.message", "shop.Order"),
     "spec.value.message: Invalid value: message names a Protobuf message: it needs format "
     "protobuf"),
    (changed("spec.table.catalog.uri", "postgresql://pg/iceberg"),
     "spec.table.catalog.uri: Invalid value: a sql catalog needs uri: "
     "jdbc:postgresql://host:port/db or jdbc:sqlite:/path"),
    (changed("spec.table.catalog.warehouse", ...),
     "spec.table.catalog.warehouse: Required value: a sql catalog needs warehouse: "
     "s3://bucket/prefix or file:///path"),
    (changed("spec.table.catalog", {"type": "rest"}),
     "spec.table.catalog.uri: Required value: a rest catalog needs uri"),
    (changed("spec.deadLetter", {"topic": "orders"}),
     "spec.deadLetter.topic: Invalid value: deadLetter.topic must differ from kafka.topic"),
    (changed("spec.table.partitioning", "week"),
     '[spec.table.partitioning: Unsupported value: "week": supported values: "hour", "day", '
     '"month", "none"' + SKIPPED_RULES + "]"),
    (changed("spec.commit", {"interval": "often"}),
     'spec.commit.interval: Invalid value: "often": spec.commit.interval in body should match '
     "'" + DURATION + "'"),
    (changed("spec.commit", {"interval": "1d30m"}),
     'spec.commit.interval: Invalid value: "1d30m": commit.interval must be at most 1d'),
    (changed("spec.maintenance", {"removeOrphans": {"olderThan": "0.5h"}}),
     'spec.maintenance.removeOrphans.olderThan: Invalid value: "0.5h": removeOrphans.olderThan '
     "must be at least 1h: a younger unreferenced file may belong to a commit still in flight"),
    (changed("spec.maintenance", {"expireSnapshots": {"maxAge": "30s"}}),
     'spec.maintenance.expireSnapshots.maxAge: Invalid value: "30s": expireSnapshots.maxAge '
     "must be at least 1m"),
    (changed("spec.maintenance", {"compaction": {"targetFileSize": "1023Ki"}}),
     'spec.maintenance.compaction.targetFileSize: Invalid value: "1023Ki": '
     "compaction.targetFileSize must be at least 1Mi"),
    (changed("spec.maintenance", {"compaction": {"targetFileSize": "1M"}}),
     'spec.maintenance.compaction.targetFileSize: Invalid value: "1M": '
     "compaction.targetFileSize must be at least 1Mi"),
    (changed("spec.table.identifier", "orders"),
     'spec.table.identifier: Invalid value: "orders": spec.table.identifier in body should '
     "match '^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)+$'"),
    (changed("spec.kafka.topic", ...), "[spec.kafka.topic: Required value" + SKIPPED_RULES + "]"),
    (changed("spec.table.keyColumns", ["id"]),
     "spec.table.keyColumns: Invalid value: keyColumns apply to modes upsert and cdc only"),
    (upsert(["id", "id"]),
     'spec.table.keyColumns[1]: Duplicate value: "id"'),
    (upsert(["value.id!"]),
     'spec.table.keyColumns[0]: Invalid value: "value.id!": spec.table.keyColumns[0] in body '
     "should match '^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*$'"),
    (cdc_of_raw_values(),
     "spec.table.mode: Invalid value: table.mode cdc reads Debezium change events: "
     "value.format must be avro or json"),
    (cdc_of_raw_values("protobuf"),
     "spec.table.mode: Invalid value: table.mode cdc reads Debezium change events: "
     "value.format must be avro or json"),
    (upsert(["id"], format_="raw"),
     "spec.table.keyColumns: Invalid value: table.keyColumns name value fields, and "
     "a raw topic's value has none: leave keyColumns out to key rows by the Kafka key"),
    (changed("spec.key", {"format": "avro"}),
     "spec.key.subject: Required value: key.subject is required when key.format is avro or "
     "json: the key_fields column comes from the registry (use format raw to keep the key's "
     "bytes only)"),
    (raw_value_decoded_key(),
     "spec.key.format: Invalid value: key.format avro or json reads the key schema from "
     "value.schemaRegistry's registry: value.format must be avro, json or protobuf too"),
    (routed("inventory.customers", format_="raw"),
     "spec.routes: Invalid value: routes pick a table by a value field, and a raw topic's value "
     "has none: value.format must be avro, json or protobuf"),
    (routed("inventory.customers", "inventory.customers"),
     "spec.routes: Invalid value: each route needs a table of its own: "
     "routes[].table.identifier must differ from table.identifier and from each other"),
    (routed("analytics.orders"),
     "spec.routes: Invalid value: each route needs a table of its own: "
     "routes[].table.identifier must differ from table.identifier and from each other"),
])
def test_invalid_specs_are_refused_with_a_message_that_says_what_to_change(
        api, namespace, body, message):
    assert refusal(api, namespace, body) == PREFIX + message


@pytest.mark.parametrize("path, value, rendered, seconds", [
    ("spec.maintenance", {"compaction": {"targetFileSize": "1Mi"}},
     "maintenance.target_file_size_bytes", 1_048_576),
    ("spec.maintenance", {"compaction": {"targetFileSize": "1m"}},  # Spark's way: 1 MiB
     "maintenance.target_file_size_bytes", 1_048_576),
    ("spec.maintenance", {"compaction": {"targetFileSize": "1048576"}},
     "maintenance.target_file_size_bytes", 1_048_576),
    ("spec.maintenance", {"compaction": {"targetFileSize": "1.5G"}},
     "maintenance.target_file_size_bytes", 1_500_000_000),
    ("spec.commit", {"interval": "1d"}, "commit.interval_seconds", 86_400),
    ("spec.commit", {"interval": "23h59m59s"}, "commit.interval_seconds", 86_399),
    ("spec.commit", {"interval": "500ms"}, "commit.interval_seconds", 1),
    ("spec.maintenance", {"removeOrphans": {"olderThan": "1h"}},
     "maintenance.orphan_older_than_seconds", 3_600),
    ("spec.maintenance", {"removeOrphans": {"olderThan": "0.5d"}},
     "maintenance.orphan_older_than_seconds", 43_200),
    ("spec.maintenance", {"expireSnapshots": {"maxAge": "1m"}},
     "maintenance.max_snapshot_age_seconds", 60),
    ("spec.maintenance", {"expireSnapshots": {"maxAge": "1d12h"}},
     "maintenance.max_snapshot_age_seconds", 129_600),
])
def test_durations_and_sizes_at_their_bounds_are_accepted_and_the_operator_renders_them(
        api, namespace, path, value, rendered, seconds):
    created = create(api, namespace, changed(path, value))
    config = job_config(Topic.from_body(created), OperatorSettings())  # no InvalidSpec either
    section, name = rendered.split(".")
    assert getattr(getattr(config, section), name) == seconds


def test_an_upsert_resource_is_accepted_and_rendered_with_its_keys(api, namespace):
    created = create(api, namespace, upsert(["id", "customer.id"]))
    config = job_config(Topic.from_body(created), OperatorSettings())
    assert (config.table.mode, config.table.key_columns) == ("upsert", ("id", "customer.id"))


def test_a_cdc_resource_is_accepted_and_rendered_with_its_keys(api, namespace):
    body = upsert(["id"], format_="json")
    body["spec"]["table"]["mode"] = "cdc"
    config = job_config(Topic.from_body(create(api, namespace, body)), OperatorSettings())
    assert (config.table.mode, config.table.key_columns, config.value.format) == \
        ("cdc", ("id",), "json")


def test_a_routed_resource_is_accepted_and_rendered_with_each_tables_config(api, namespace):
    body = routed("inventory.customers", "inventory.orders")
    body["spec"]["routes"][0]["table"].update(mode="cdc", keyColumns=["id"])
    body["spec"]["routes"][0]["subject"] = "inventory-customers"
    config = job_config(Topic.from_body(create(api, namespace, body)), OperatorSettings())
    tables = [(d.table.identifier, d.table.mode, d.table.key_columns,
               d.value.schema_registry.subject) for d in config.destinations()]
    assert tables == [("analytics.orders", "append", (), "orders-value"),
                      ("inventory.customers", "cdc", ("id",), "inventory-customers"),
                      ("inventory.orders", "append", (), "orders-value")]
    assert [(r.field, r.values) for r in config.routes] == [
        ("source.table", ("customers",)), ("source.table", ("orders",))]


def test_a_decoded_key_is_accepted_and_rendered_with_the_values_registry(api, namespace):
    body = upsert([])
    body["spec"]["key"] = {"format": "avro", "subject": "orders-key"}
    config = job_config(Topic.from_body(create(api, namespace, body)), OperatorSettings())
    assert (config.key.format, config.key.schema_registry.subject,
            config.key.schema_registry.url) == ("avro", "orders-key",
                                                config.value.schema_registry.url)
    assert config.table.key_columns == ()  # rows keyed by the key's fields


def test_the_topic_and_the_table_cannot_change(api, namespace):
    create(api, namespace, VALID)
    for path, value, message in [
        ("spec.kafka.topic", "payments",
         "spec.kafka.topic: Invalid value: kafka.topic cannot change: create a new resource "
         "for another topic"),
        ("spec.table.identifier", "analytics.payments",
         "spec.table.identifier: Invalid value: table.identifier cannot change: create a new "
         "resource for another table"),
        ("spec.table.mode", "upsert",
         "spec.table.mode: Invalid value: table.mode cannot change: a table keeps the mode it "
         "was made with; create a new resource with another table.identifier"),
    ]:
        with pytest.raises(ApiException) as refused:
            api.patch_namespaced_custom_object(*ARGS, namespace, "kafkaicebergtopics", "orders",
                                               changed(path, value))
        assert refused.value.status == 422
        assert json.loads(refused.value.body)["message"] == PREFIX + message
