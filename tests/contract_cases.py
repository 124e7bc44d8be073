"""Specs that break each rule of the contract (``floe_sparkapp.contract``), with the refusal the
API server gives and the rule's words, which the operator and the job give too.

``tests/unit/test_contract.py`` has the operator and the job refuse each one in the rule's
words, and checks that every rule has a case; ``tests/e2e/test_crd_validation.py`` has the
real API server refuse each one with its message."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from floe_sparkapp.units import DURATION

VALID: dict[str, Any] = {
    "apiVersion": "floe.dev/v1alpha1",
    "kind": "KafkaIcebergTopic",
    "metadata": {"name": "orders"},
    "spec": {
        "kafka": {"bootstrapServers": "kafka:9092", "topic": "orders"},
        "value": {
            "format": "avro",
            "schemaRegistry": {"url": "http://registry:8081", "subject": "orders-value"},
        },
        "table": {
            "catalog": {"uri": "jdbc:postgresql://pg:5432/iceberg", "warehouse": "s3://lake/wh"},
            "identifier": "analytics.orders",
        },
    },
}

NO_REGISTRY = (
    "schemaRegistry is required when format is avro, json or protobuf: the table "
    "schema comes from the registry (use format raw to keep the bytes only; for "
    "plain JSON without a registry, declare columns or set inferSchema)"
)
SKIPPED_RULES = (
    ", <nil>: Invalid value: null: some validation rules were not checked because "
    "the object was invalid; correct the existing errors to complete validation"
)


def changed(path: str, value: Any) -> dict[str, Any]:
    """VALID with the value at ``path`` (dotted) replaced, or removed (``...``)."""
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


def upsert(key_columns: list[str], format_: str = "avro") -> dict[str, Any]:
    body = changed("spec.table.mode", "upsert")
    body["spec"]["table"]["keyColumns"] = key_columns
    body["spec"]["value"]["format"] = format_
    return body


def with_op(op: dict[str, Any], mode: str = "upsert", format_: str = "avro") -> dict[str, Any]:
    body = upsert([], format_) if mode == "upsert" else changed("spec.table.mode", mode)
    body["spec"]["table"]["op"] = op
    return body


def with_coercion(format_: str = "avro", mode: str = "append") -> dict[str, Any]:
    body = changed("spec.value.coerce", [{"field": "price", "to": "decimal(10, 2)"}])
    body["spec"]["value"]["format"] = format_
    body["spec"]["table"]["mode"] = mode
    return body


def cdc_of_raw_values(format_: str = "raw") -> dict[str, Any]:
    body = changed("spec.value.format", format_)
    body["spec"]["table"]["mode"] = "cdc"
    return body


def cdc_of_plain_json() -> dict[str, Any]:
    body = cdc_of_raw_values("json")
    body["spec"]["value"] = {"format": "json", "inferSchema": True}
    return body


def raw_value_decoded_key() -> dict[str, Any]:
    body = changed("spec.key", {"format": "avro", "subject": "orders-key"})
    body["spec"]["value"]["format"] = "raw"
    return body


def routed(*identifiers: str, format_: str = "avro") -> dict[str, Any]:
    body = changed(
        "spec.routes",
        [
            {
                "field": "source.table",
                "values": [name.split(".")[-1]],
                "table": {"identifier": name},
            }
            for name in identifiers
        ],
    )
    body["spec"]["value"]["format"] = format_
    return body


def branch_routed() -> dict[str, Any]:
    body = routed("inventory.orders")
    body["spec"]["table"]["branch"] = "audit"
    return body


def with_volume_mount() -> dict[str, Any]:
    return changed("spec.spark", {"volumeMounts": [{"name": "data", "mountPath": "/srv/lake"}]})


@dataclass(frozen=True)
class Case:
    body: dict[str, Any]
    api: str  # the API server's message, after 'KafkaIcebergTopic.floe.dev "orders" is invalid: '
    rule: str | None = None  # the rule's words (None: a type, pattern or enum refusal)


CASES = [
    Case(
        changed("spec.value.schemaRegistry", ...),
        "spec.value.schemaRegistry: Required value: " + NO_REGISTRY,
        NO_REGISTRY,
    ),
    Case(
        changed("spec.value", {"format": "json", "inferSchema": False}),
        "spec.value.schemaRegistry: Required value: " + NO_REGISTRY,
        NO_REGISTRY,
    ),
    Case(
        changed("spec.value.columns", [{"name": "id", "type": "long"}]),
        "spec.value.columns: Invalid value: columns declare a plain JSON value's fields: they "
        "need format json without a schemaRegistry (whose subject gives the fields otherwise)",
        "columns declare a plain JSON value's fields: they need format json without a "
        "schemaRegistry (whose subject gives the fields otherwise)",
    ),
    Case(
        changed("spec.value.inferSchema", True),
        "spec.value.inferSchema: Invalid value: inferSchema reads the fields of plain JSON "
        "values: it needs format json without a schemaRegistry",
        "inferSchema reads the fields of plain JSON values: it needs format json without a "
        "schemaRegistry",
    ),
    Case(
        changed(
            "spec.value",
            {
                "format": "json",
                "columns": [
                    {"name": "customer", "type": "string"},
                    {"name": "customer.id", "type": "long"},
                ],
            },
        ),
        "spec.value.columns: Invalid value: columns names a field twice, or a field and a "
        "field inside it",
        "columns names a field twice, or a field and a field inside it",
    ),
    Case(
        changed("spec.value", {"format": "json", "columns": [{"name": "id", "type": "int64"}]}),
        'spec.value.columns[0].type: Invalid value: "int64": spec.value.columns[0].type in '
        "body should match '^(boolean|int|long|float|double|date|timestamp|binary|string|"
        "decimal\\(([1-9]|[12][0-9]|3[0-8]), ?([0-9]|[12][0-9]|3[0-8])\\))$'",
    ),
    Case(
        changed("spec.value.message", "shop.Order"),
        "spec.value.message: Invalid value: message names a Protobuf message: it needs format "
        "protobuf",
        "message names a Protobuf message: it needs format protobuf",
    ),
    Case(
        changed("spec.table.catalog.uri", "postgresql://pg/iceberg"),
        "spec.table.catalog.uri: Invalid value: a sql catalog needs uri: "
        "jdbc:postgresql://host:port/db or jdbc:sqlite:/path",
        "a sql catalog needs uri: jdbc:postgresql://host:port/db or jdbc:sqlite:/path",
    ),
    Case(
        changed("spec.table.catalog.warehouse", ...),
        "spec.table.catalog.warehouse: Required value: a sql catalog needs warehouse: "
        "s3://bucket/prefix or file:///path",
        "a sql catalog needs warehouse: s3://bucket/prefix or file:///path",
    ),
    Case(
        changed("spec.table.catalog", {"type": "rest"}),
        "spec.table.catalog.uri: Required value: a rest catalog needs uri",
        "a rest catalog needs uri",
    ),
    Case(
        changed("spec.deadLetter", {"topic": "orders"}),
        "spec.deadLetter.topic: Invalid value: deadLetter.topic must differ from kafka.topic",
        "deadLetter.topic must differ from kafka.topic",
    ),
    Case(
        changed("spec.table.partitioning", "week"),
        '[spec.table.partitioning: Unsupported value: "week": supported values: "hour", "day", '
        '"month", "none"' + SKIPPED_RULES + "]",
    ),
    Case(
        changed("spec.commit", {"interval": "often"}),
        'spec.commit.interval: Invalid value: "often": spec.commit.interval in body should '
        "match '" + DURATION + "'",
    ),
    Case(
        changed("spec.commit", {"interval": "1d30m"}),
        'spec.commit.interval: Invalid value: "1d30m": commit.interval must be between 1s and 1d',
        "commit.interval must be between 1s and 1d",
    ),
    Case(
        changed("spec.commit", {"interval": "0s"}),
        'spec.commit.interval: Invalid value: "0s": commit.interval must be between 1s and 1d',
        "commit.interval must be between 1s and 1d",
    ),
    Case(
        changed("spec.commit", {"interval": "500ms"}),
        'spec.commit.interval: Invalid value: "500ms": commit.interval must be between 1s and 1d',
        "commit.interval must be between 1s and 1d",
    ),
    Case(
        changed("spec.commit", {"minRecords": 1000, "maxRecordsPerCommit": 500}),
        "spec.commit.minRecords: Invalid value: commit.minRecords must not be above "
        "commit.maxRecordsPerCommit: a commit never takes more than maxRecordsPerCommit",
        "commit.minRecords must not be above commit.maxRecordsPerCommit: a commit never "
        "takes more than maxRecordsPerCommit",
    ),
    Case(
        changed("spec.commit", {"maxBytesPerCommit": "1000Ki"}),
        'spec.commit.maxBytesPerCommit: Invalid value: "1000Ki": '
        "commit.maxBytesPerCommit must be at least 1Mi",
        "commit.maxBytesPerCommit must be at least 1Mi",
    ),
    Case(
        changed("spec.fanOut", True),
        "spec.fanOut: Invalid value: fanOut sends a record to every route that matches: it "
        "needs routes",
        "fanOut sends a record to every route that matches: it needs routes",
    ),
    Case(
        changed("spec.table.branch", "floe_audit"),
        "spec.table.branch: Invalid value: table.branch names the branch floe lands in "
        "instead of main: leave it out to land in main, and do not start it with floe_ "
        "(floe's own refs)",
        "table.branch names the branch floe lands in instead of main: leave it out to land in "
        "main, and do not start it with floe_ (floe's own refs)",
    ),
    Case(
        branch_routed(),
        "spec.table.branch: Invalid value: table.branch lands one table in a branch and routes "
        "land several: a branch for routed tables is not supported yet, leave table.branch or "
        "routes out",
        "table.branch lands one table in a branch and routes land several: a branch for routed "
        "tables is not supported yet, leave table.branch or routes out",
    ),
    Case(
        changed("spec.table.partitionBy", ["value.region", "value.region"]),
        "spec.table.partitionBy: Invalid value: partitionBy names a partition field twice",
        "partitionBy names a partition field twice",
    ),
    Case(
        changed("spec.maintenance", {"removeOrphans": {"olderThan": "0.5h"}}),
        'spec.maintenance.removeOrphans.olderThan: Invalid value: "0.5h": '
        "removeOrphans.olderThan must be at least 1h: a younger unreferenced file may belong "
        "to a commit still in flight",
        "removeOrphans.olderThan must be at least 1h: a younger unreferenced file may belong "
        "to a commit still in flight",
    ),
    Case(
        changed("spec.maintenance", {"expireSnapshots": {"maxAge": "30s"}}),
        'spec.maintenance.expireSnapshots.maxAge: Invalid value: "30s": '
        "expireSnapshots.maxAge must be at least 1m",
        "expireSnapshots.maxAge must be at least 1m",
    ),
    Case(
        changed("spec.maintenance", {"compaction": {"targetFileSize": "1023Ki"}}),
        'spec.maintenance.compaction.targetFileSize: Invalid value: "1023Ki": '
        "compaction.targetFileSize must be at least 1Mi",
        "compaction.targetFileSize must be at least 1Mi",
    ),
    Case(
        changed("spec.maintenance", {"compaction": {"targetFileSize": "1M"}}),
        'spec.maintenance.compaction.targetFileSize: Invalid value: "1M": '
        "compaction.targetFileSize must be at least 1Mi",
        "compaction.targetFileSize must be at least 1Mi",
    ),
    Case(
        changed("spec.table.identifier", "orders"),
        'spec.table.identifier: Invalid value: "orders": spec.table.identifier in body should '
        "match '^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)+$'",
    ),
    Case(
        changed("spec.kafka.topic", ...), "[spec.kafka.topic: Required value" + SKIPPED_RULES + "]"
    ),
    Case(
        changed("spec.table.keyColumns", ["id"]),
        "spec.table.keyColumns: Invalid value: keyColumns apply to modes upsert and cdc only",
        "keyColumns apply to modes upsert and cdc only",
    ),
    Case(
        upsert(["id", "id"]),
        "spec.table.keyColumns: Invalid value: keyColumns names a field twice",
        "keyColumns names a field twice",
    ),
    Case(
        upsert(["value.id!"]),
        'spec.table.keyColumns[0]: Invalid value: "value.id!": spec.table.keyColumns[0] in '
        "body should match '^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*$'",
    ),
    Case(
        cdc_of_raw_values(),
        "spec.table.mode: Invalid value: table.mode cdc reads Debezium change events: "
        "value.format must be avro or json",
        "table.mode cdc reads Debezium change events: value.format must be avro or json",
    ),
    Case(
        cdc_of_raw_values("protobuf"),
        "spec.table.mode: Invalid value: table.mode cdc reads Debezium change events: "
        "value.format must be avro or json",
        "table.mode cdc reads Debezium change events: value.format must be avro or json",
    ),
    Case(
        upsert(["id"], format_="raw"),
        "spec.table.keyColumns: Invalid value: table.keyColumns name value fields, and "
        "a raw topic's value has none: leave keyColumns out to key rows by the Kafka key",
        "table.keyColumns name value fields, and a raw topic's value has none: leave "
        "keyColumns out to key rows by the Kafka key",
    ),
    Case(
        with_op({"field": "action", "header": "op"}),
        "spec.table.op.field: Invalid value: op needs field (a value field) or header (a "
        "Kafka header's name), not both",
        "op needs field (a value field) or header (a Kafka header's name), not both",
    ),
    Case(
        with_op({"field": "action", "insert": ["c", "d"]}),
        "spec.table.op.delete: Invalid value: op.insert, op.update and op.delete must not "
        "share a value",
        "op.insert, op.update and op.delete must not share a value",
    ),
    Case(
        with_op({"field": "action", "delete": ["D"]}),
        'spec.table.op.delete[0]: Invalid value: "D": spec.table.op.delete[0] in body should '
        "match '^[^A-Z]+$'",
    ),
    Case(
        with_op({"field": "action"}, mode="append"),
        "spec.table.op: Invalid value: op applies to mode upsert (mode cdc reads Debezium's "
        "own op field)",
        "op applies to mode upsert (mode cdc reads Debezium's own op field)",
    ),
    Case(
        with_op({"field": "action"}, format_="raw"),
        "spec.table.op: Invalid value: table.op.field names a value field, and a raw topic's "
        "value has none: use op.header, or value.format avro, json or protobuf",
        "table.op.field names a value field, and a raw topic's value has none: use op.header, "
        "or value.format avro, json or protobuf",
    ),
    Case(
        changed(
            "spec.value.coerce",
            [{"field": "price", "to": "double"}, {"field": "price", "to": "long"}],
        ),
        "spec.value.coerce: Invalid value: coerce names a field twice",
        "coerce names a field twice",
    ),
    Case(
        changed("spec.value.coerce", [{"field": "price", "to": "number"}]),
        'spec.value.coerce[0].to: Invalid value: "number": spec.value.coerce[0].to in body '
        "should match '^(int|long|float|double|timestamp|binary|string|"
        "decimal\\(([1-9]|[12][0-9]|3[0-8]), ?([0-9]|[12][0-9]|3[0-8])\\))$'",
    ),
    Case(
        with_coercion(format_="raw"),
        "spec.value.coerce: Invalid value: coerce converts fields of the value, and a raw "
        "topic's value has none: value.format must be avro, json or protobuf",
        "coerce converts fields of the value, and a raw topic's value has none: value.format "
        "must be avro, json or protobuf",
    ),
    Case(
        cdc_of_plain_json(),
        "spec.value: Invalid value: value.columns and value.inferSchema read a record's value "
        "as the table's row, and a cdc table's rows are Debezium's after images: give the "
        "envelope's schema in value.schemaRegistry",
        "value.columns and value.inferSchema read a record's value as the table's row, and a "
        "cdc table's rows are Debezium's after images: give the envelope's schema in "
        "value.schemaRegistry",
    ),
    Case(
        with_coercion(mode="cdc"),
        "spec.value.coerce: Invalid value: value.coerce converts fields of a record's value, "
        "and a cdc table's rows are Debezium's before and after images: leave coerce out",
        "value.coerce converts fields of a record's value, and a cdc table's rows are "
        "Debezium's before and after images: leave coerce out",
    ),
    Case(
        changed("spec.key", {"format": "avro"}),
        "spec.key.subject: Required value: key.subject is required when key.format is avro, "
        "json or protobuf: the key_fields column comes from the registry (use format raw to "
        "keep the key's bytes only)",
        "key.subject is required when key.format is avro, json or protobuf: the key_fields "
        "column comes from the registry (use format raw to keep the key's bytes only)",
    ),
    Case(
        changed("spec.key", {"format": "avro", "subject": "orders-key", "message": "a.B"}),
        "spec.key.message: Invalid value: key.message names a Protobuf message: it needs "
        "key.format protobuf",
        "key.message names a Protobuf message: it needs key.format protobuf",
    ),
    Case(
        raw_value_decoded_key(),
        "spec.key.format: Invalid value: key.format avro, json or protobuf reads the key "
        "schema from value.schemaRegistry's registry: value.format must be avro, json or "
        "protobuf too, with a schemaRegistry",
        "key.format avro, json or protobuf reads the key schema from value.schemaRegistry's "
        "registry: value.format must be avro, json or protobuf too, with a schemaRegistry",
    ),
    Case(
        routed("inventory.customers", format_="raw"),
        "spec.routes: Invalid value: routes pick a table by a value field, and a raw topic's "
        "value has none: value.format must be avro, json or protobuf",
        "routes pick a table by a value field, and a raw topic's value has none: value.format "
        "must be avro, json or protobuf",
    ),
    Case(
        routed("inventory.customers", "inventory.customers"),
        "spec.routes: Invalid value: each route needs a table of its own: "
        "routes[].table.identifier must differ from table.identifier and from each other",
        "each route needs a table of its own: routes[].table.identifier must differ from "
        "table.identifier and from each other",
    ),
    Case(
        routed("analytics.orders"),
        "spec.routes: Invalid value: each route needs a table of its own: "
        "routes[].table.identifier must differ from table.identifier and from each other",
        "each route needs a table of its own: routes[].table.identifier must differ from "
        "table.identifier and from each other",
    ),
    Case(
        with_volume_mount(),
        "spec.spark.volumeMounts: Invalid value: every volumeMounts entry must name a volume "
        "in spark.volumes",
        "every volumeMounts entry must name a volume in spark.volumes",
    ),
    Case(
        changed("spec.autoRollback", {"enabled": True, "window": "10s"}),
        'spec.autoRollback.window: Invalid value: "10s": autoRollback.window must be between '
        "30s and 1d",
        "autoRollback.window must be between 30s and 1d",
    ),
]

# The rules only the API server can check (they compare the stored object with the new one);
# tests/e2e/test_crd_validation.py changes each on a stored resource.
TRANSITIONS = {
    "kafka.topic cannot change: create a new resource for another topic": (
        "spec.kafka.topic",
        "payments",
    ),
    "table.identifier cannot change: create a new resource for another table": (
        "spec.table.identifier",
        "analytics.payments",
    ),
    "table.mode cannot change: a table keeps the mode it was made with; create a new resource "
    "with another table.identifier": ("spec.table.mode", "upsert"),
}
