"""The contract: the KafkaIcebergTopic's spec as the user writes it, and every rule it obeys,
each written once.

The same models are read three ways:

- the CRD's OpenAPI schema is generated from them (``floe_operator.crd``): structure, enums,
  patterns, bounds and defaults, and each cross-field :class:`Rule` as CEL
  (``x-kubernetes-validations``), so ``kubectl apply`` refuses a bad spec;
- the operator validates a resource with them (``floe_operator.resource`` adds the pods'
  settings, ``spec.spark``);
- the job's config is these models too (:class:`floe_sparkapp.config.JobConfig` extends
  :class:`TopicSpec`), so the job validates the spec it runs on with the same rules.

A rule's CEL and its Python check sit side by side, with the one message a user reads,
whichever of the three refused the spec. ``tests/e2e/test_crd_validation.py`` walks every rule
against the API server, the operator and the job.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from .ledger import MAIN
from .units import (
    DURATION,
    DURATION_MAX_LENGTH,
    QUANTITY,
    cel_bytes,
    cel_seconds,
    duration_seconds,
    seconds,
    size_bytes,
)

CRON = (
    r"^(@(yearly|annually|monthly|weekly|daily|hourly)|"
    r"[-0-9*/,A-Za-z?]+(\s+[-0-9*/,A-Za-z?]+){4})$"
)
KAFKA_TOPIC = r"^[a-zA-Z0-9._-]{1,249}$"
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$"
FIELD_PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
CATALOG_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
BRANCH = r"^[A-Za-z][A-Za-z0-9_-]*$"
# value.coerce's types (floe_sparkapp.coercion), and value.columns' (those and boolean, date)
_DECIMAL = r"decimal\(([1-9]|[12][0-9]|3[0-8]), ?([0-9]|[12][0-9]|3[0-8])\)"
COERCE_TO = rf"^(int|long|float|double|timestamp|binary|string|{_DECIMAL})$"
COLUMN_TYPE = rf"^(boolean|int|long|float|double|date|timestamp|binary|string|{_DECIMAL})$"
_COLUMN = r"(value|key_fields|kafka)(\.[A-Za-z_][A-Za-z0-9_]*)+"
# A partition field: an Iceberg transform of a column, as Iceberg's Spark DDL writes it.
PARTITION_FIELD = (
    rf"^({_COLUMN}|(identity|year|month|day|hour)\({_COLUMN}\)|"
    rf"(bucket|truncate)\([1-9][0-9]{{0,5}}, ?{_COLUMN}\))$"
)
MAX_PARTITION_FIELDS = 4
MAX_KEY_COLUMNS = 8
MAX_ROUTES = 16
ROW_LEVEL = ("upsert", "cdc")  # the modes whose records change rows (delete, then append)
# Why a record is kept raw, in a few words: the job's metrics count records kept raw by these
# (a metric's label, never the message itself), and a repair selects raw rows by them.
RAW_REASONS = (
    "key",
    "not_framed",
    "unknown_schema",
    "schema_refused",
    "malformed",
    "undecodable",
    "not_a_change",
    "other",
)
# The default retention keeps snapshots at least this long (seconds), for readers' scans.
MIN_DEFAULT_SNAPSHOT_AGE_SECONDS = 300


@dataclass(frozen=True)
class Rule:
    """A rule of one object: ``cel`` for the API server (``self`` is the object, ``oldSelf``
    the stored one; with ``on``, ``self`` is that property's value), ``holds`` the same check
    on the model for the operator and the job (None: a transition rule, which only the API
    server can check), one ``message``; ``field`` points the API server's error at the field
    to change."""

    cel: str
    message: str
    field: str = ""
    reason: str | None = None
    holds: Callable[[Any], bool] | None = None
    on: str = ""


def _cel(schema: dict[str, Any], model: type[_Model]) -> None:
    """The model's rules in its JSON schema, as the CRD's ``x-kubernetes-validations``."""
    for rule in model.RULES:
        entry = {"rule": rule.cel, "message": rule.message}
        if rule.field:
            entry["fieldPath"] = rule.field
        if rule.reason:
            entry["reason"] = rule.reason
        target = schema["properties"][rule.on] if rule.on else schema
        target.setdefault("x-kubernetes-validations", []).append(entry)


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        json_schema_extra=_cel,
    )

    RULES: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _rules_hold(self) -> Any:
        for rule in type(self).RULES:
            if rule.holds is not None and not rule.holds(self):
                raise ValueError(rule.message)
        return self


def _snake(alias: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), alias)


def _matches(pattern: str) -> str:
    """CEL: the property matches its pattern (a bound is not checked on a value the pattern
    refused: CEL runs either way)."""
    return "self.matches('" + pattern.replace("\\", "\\\\") + "')"


def duration_rule(
    field: str,
    name: str,
    *,
    at_least: float | None = None,
    at_most: float | None = None,
    words: str = "",
) -> Rule:
    """A duration property's bounds, in seconds, checked on the property."""
    bounds = " && ".join(
        part
        for part in (
            f"{cel_seconds()} >= {float(at_least)}" if at_least is not None else "",
            f"{cel_seconds()} <= {float(at_most)}" if at_most is not None else "",
        )
        if part
    )

    def holds(model: Any) -> bool:
        value = getattr(model, _snake(field))
        if value is None:
            return True
        within = seconds(value)
        return (at_least is None or within >= at_least) and (at_most is None or within <= at_most)

    return Rule(f"!{_matches(DURATION)} || ({bounds})", f"{name} {words}", holds=holds, on=field)


def size_rule(field: str, name: str, at_least: int, words: str) -> Rule:
    """A size property's lower bound, in bytes, checked on the property."""
    return Rule(
        f"!{_matches(QUANTITY)} || {cel_bytes()} >= {float(at_least)}",
        f"{name} {words}",
        holds=lambda model: size_bytes(getattr(model, _snake(field))) >= at_least,
        on=field,
    )


def _duration(default: str | None, description: str) -> Any:
    return Field(
        default,
        pattern=DURATION,
        min_length=1,
        max_length=DURATION_MAX_LENGTH,
        description=description,
    )


class SecretRef(_Model):
    name: str = Field(
        min_length=1, max_length=253, description="Name of a Secret in the resource's namespace."
    )


class KafkaSpec(_Model):
    bootstrap_servers: str = Field(min_length=1, description="host:port[,host:port...]")
    topic: str = Field(pattern=KAFKA_TOPIC, description="The topic to land.")
    starting_offsets: Literal["earliest", "latest"] = Field(
        "earliest",
        description="Where the very first start reads from; later starts continue "
        "from the offsets committed in the table.",
    )
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    consumer_group: str | None = Field(
        None,
        description="Consumer group the committed offsets are reported to "
        "(default: floe.<namespace>.<name>).",
    )
    properties: dict[str, str] = Field(
        default_factory=dict, description="Extra Kafka client settings, without secrets."
    )
    auth_secret_ref: SecretRef | None = Field(
        None,
        description="Secret whose keys are Kafka client settings with secret values "
        "(for example sasl.jaas.config).",
    )


class SchemaRegistrySpec(_Model):
    url: str = Field(pattern=r"^https?://", description="Confluent-compatible registry URL.")
    subject: str = Field(min_length=1, description="Subject of the value schema.")
    auth_secret_ref: SecretRef | None = Field(
        None, description="Secret with key basic.auth.user.info (user:password)."
    )


FieldPath = Annotated[str, Field(pattern=FIELD_PATH, max_length=253)]


class Coercion(_Model):
    field: FieldPath = Field(
        description="A field of the value (dotted), e.g. price or order.created_at."
    )
    to: str = Field(
        pattern=COERCE_TO,
        max_length=16,
        description=(
            "The column's type: int, long, float, double, decimal(P, S), timestamp (from epoch "
            "milliseconds or ISO 8601 text), binary (from base64 text) or string."
        ),
    )


class ColumnSpec(_Model):
    name: FieldPath = Field(
        description="A field of the JSON value (dotted for a field of a "
        "nested object, e.g. customer.id)."
    )
    type: str = Field(
        pattern=COLUMN_TYPE,
        max_length=16,
        description=(
            "boolean, int, long, float, double, decimal(P, S), date, timestamp (from epoch "
            "milliseconds or ISO 8601 text), binary (from base64 text) or string."
        ),
    )


class ValueSpec(_Model):
    RULES = (
        Rule(
            "!has(self.columns) || size(self.columns) == 0 || (self.format == 'json' && "
            "!has(self.schemaRegistry))",
            "columns declare a plain JSON value's fields: they need format json without a "
            "schemaRegistry (whose subject gives the fields otherwise)",
            ".columns",
            None,
            lambda v: not v.columns or (v.format == "json" and v.schema_registry is None),
        ),
        Rule(
            "!has(self.inferSchema) || !self.inferSchema || (self.format == 'json' && "
            "!has(self.schemaRegistry))",
            "inferSchema reads the fields of plain JSON values: it needs format json without a "
            "schemaRegistry",
            ".inferSchema",
            None,
            lambda v: not v.infer_schema or (v.format == "json" and v.schema_registry is None),
        ),
        Rule(
            "!has(self.columns) || self.columns.all(c, self.columns.exists_one(d, "
            "d.name == c.name) && !self.columns.exists(d, d.name.startsWith(c.name + '.')))",
            "columns names a field twice, or a field and a field inside it",
            ".columns",
            None,
            lambda v: (
                len({c.name for c in v.columns}) == len(v.columns)
                and not any(d.name.startswith(c.name + ".") for c in v.columns for d in v.columns)
            ),
        ),
        Rule(
            "self.format != 'raw' || !has(self.coerce) || size(self.coerce) == 0",
            "coerce converts fields of the value, and a raw topic's value has none: "
            "value.format must be avro, json or protobuf",
            ".coerce",
            None,
            lambda v: v.format != "raw" or not v.coerce,
        ),
        Rule(
            "!has(self.coerce) || self.coerce.all(c, self.coerce.exists_one(d, "
            "d.field == c.field))",
            "coerce names a field twice",
            ".coerce",
            None,
            lambda v: len({c.field for c in v.coerce}) == len(v.coerce),
        ),
        Rule(
            "self.format == 'raw' || has(self.schemaRegistry) || (self.format == 'json' && "
            "((has(self.columns) && size(self.columns) > 0) || (has(self.inferSchema) && "
            "self.inferSchema)))",
            "schemaRegistry is required when format is avro, json or protobuf: the table schema "
            "comes from the registry (use format raw to keep the bytes only; for plain JSON "
            "without a registry, declare columns or set inferSchema)",
            ".schemaRegistry",
            "FieldValueRequired",
            lambda v: (
                v.format == "raw"
                or v.schema_registry is not None
                or (v.format == "json" and (bool(v.columns) or v.infer_schema))
            ),
        ),
        Rule(
            "!has(self.message) || self.format == 'protobuf'",
            "message names a Protobuf message: it needs format protobuf",
            ".message",
            "FieldValueInvalid",
            lambda v: v.message is None or v.format == "protobuf",
        ),
    )

    format: Literal["avro", "json", "protobuf", "raw"] = Field(
        "avro",
        description=(
            "avro, protobuf: the Confluent wire format, each record decoded with its writer schema "
            "from the registry. json: plain JSON, or JSON Schema in the Confluent wire format. "
            "raw: the bytes only."
        ),
    )
    schema_registry: SchemaRegistrySpec | None = None
    message: str | None = Field(
        None,
        min_length=1,
        max_length=512,
        description=(
            "protobuf: the full name (package included) of the message the values are; by default "
            "the first message of the subject's schema."
        ),
    )
    columns: tuple[ColumnSpec, ...] = Field(
        default_factory=tuple,
        max_length=64,
        description=(
            "json without a schemaRegistry: the value's fields and their column types. Each "
            "record's field is converted as value.coerce converts (one that cannot be is null, "
            "the row noting why); other fields are left out unless inferSchema."
        ),
    )
    infer_schema: bool = Field(
        False,
        description=(
            "json without a schemaRegistry: the table's value columns are inferred from the "
            "records (the first batch makes them, later batches add new fields; a record whose "
            "field has another type than its column is kept raw with the reason)."
        ),
    )
    coerce: tuple[Coercion, ...] = Field(
        default_factory=tuple,
        max_length=64,
        description=(
            "Fields whose column has another type than their writer schema's: each record's field "
            "is converted as it lands (text to a number, epoch milliseconds or ISO 8601 text to a "
            "timestamp, base64 text to binary); one that cannot be is null, and the row notes "
            "which field and why in value_error, its bytes in value_raw."
        ),
    )

    @property
    def conversions(self) -> dict[str, str]:
        """The fields converted to their column's type (floe_sparkapp.coercion), by column path
        (``value.a.b``): the declared columns, and coerce's (which wins)."""
        return {
            **{f"value.{c.name}": c.type for c in self.columns},
            **{f"value.{c.field}": c.to for c in self.coerce},
        }


class KeySpec(_Model):
    RULES = (
        Rule(
            "!has(self.format) || self.format == 'raw' || has(self.subject)",
            "key.subject is required when key.format is avro, json or protobuf: the key_fields "
            "column comes from the registry (use format raw to keep the key's bytes only)",
            ".subject",
            "FieldValueRequired",
            lambda k: k.format == "raw" or bool(k.subject),
        ),
        Rule(
            "!has(self.message) || self.format == 'protobuf'",
            "key.message names a Protobuf message: it needs key.format protobuf",
            ".message",
            None,
            lambda k: k.message is None or k.format == "protobuf",
        ),
    )

    format: Literal["avro", "json", "protobuf", "raw"] = Field(
        "raw",
        description="raw: the key's bytes only. avro, json, protobuf: also decoded, by "
        "its own registry subject, into the key_fields column, which "
        "identifies an upsert or cdc table's rows when keyColumns are empty.",
    )
    subject: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        description=("Subject of the key schema, in value.schemaRegistry's registry."),
    )
    message: str | None = Field(
        None,
        min_length=1,
        max_length=512,
        description=(
            "protobuf: the full name (package included) of the message the keys are; by default "
            "the first message of the subject's schema."
        ),
    )

    @property
    def decoded(self) -> bool:
        return self.format != "raw"

    @property
    def framed(self) -> bool:
        """Keys in the Confluent wire format, each decoded by the schema id it carries."""
        return self.format in ("avro", "protobuf")


class CatalogSpec(_Model):
    RULES = (
        Rule(
            "self.type != 'sql' || (has(self.uri) && self.uri.startsWith('jdbc:'))",
            "a sql catalog needs uri: jdbc:postgresql://host:port/db or jdbc:sqlite:/path",
            ".uri",
            None,
            lambda c: c.type != "sql" or (c.uri or "").startswith("jdbc:"),
        ),
        Rule(
            "self.type != 'sql' || has(self.warehouse)",
            "a sql catalog needs warehouse: s3://bucket/prefix or file:///path",
            ".warehouse",
            "FieldValueRequired",
            lambda c: c.type != "sql" or bool(c.warehouse),
        ),
        Rule(
            "self.type != 'rest' || has(self.uri)",
            "a rest catalog needs uri",
            ".uri",
            "FieldValueRequired",
            lambda c: c.type != "rest" or bool(c.uri),
        ),
    )

    # Any other catalog is reached through its Iceberg REST endpoint (docs/resource.md#catalogs).
    type: Literal["sql", "rest"] = Field(
        "sql",
        description=(
            "sql: a JDBC catalog (PostgreSQL, SQLite); rest: any Iceberg REST catalog, which is "
            "also how AWS Glue, S3 Tables, Nessie, Polaris and Unity Catalog are reached"
        ),
    )
    name: str = Field(
        "floe",
        pattern=CATALOG_NAME,
        description="Catalog name; every engine must use the same one.",
    )
    uri: str | None = None
    warehouse: str | None = None
    properties: dict[str, str] = Field(
        default_factory=dict, description="Iceberg catalog properties, without secrets."
    )
    secret_ref: SecretRef | None = Field(
        None,
        description="Secret whose keys are catalog properties with secret values "
        "(jdbc.password, s3.secret-access-key, token, ...).",
    )

    def with_secrets(self, values: dict[str, str]) -> CatalogSpec:
        """This catalog with its Secret's values among its properties, as it is opened."""
        if not values:
            return self
        return self.model_copy(update={"properties": {**self.properties, **values}})


OpValue = Annotated[str, Field(pattern=r"^[^A-Z]+$", min_length=1, max_length=64)]


class OpSpec(_Model):
    """An upsert table's operation field: which of a record's values insert, update or delete
    its key's row (for producers that are not Debezium, whose envelopes mode cdc reads)."""

    RULES = (
        Rule(
            "has(self.field) != has(self.header)",
            "op needs field (a value field) or header (a Kafka header's name), not both",
            ".field",
            None,
            lambda o: (o.field is None) != (o.header is None),
        ),
        Rule(
            "!self.insert.exists(v, v in self.update || v in self.delete) && "
            "!self.update.exists(v, v in self.delete)",
            "op.insert, op.update and op.delete must not share a value",
            ".delete",
            None,
            lambda o: (
                not (
                    set(o.insert) & set(o.update)
                    or set(o.insert) & set(o.delete)
                    or set(o.update) & set(o.delete)
                )
            ),
        ),
    )

    field: FieldPath | None = Field(
        None,
        description=("The value field (dotted) that holds the operation, e.g. action or meta.op."),
    )
    header: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        description=(
            "The Kafka header that holds the operation (its last value, as text), instead of a "
            "field."
        ),
    )
    insert: tuple[OpValue, ...] = Field(
        ("c", "r", "i", "create", "insert", "index"),
        min_length=1,
        max_length=32,
        description="The values (lower case; a record's is compared lower-cased) that insert "
        "a row, replacing the key's row if it has one.",
    )
    update: tuple[OpValue, ...] = Field(
        ("u", "update", "upsert"),
        min_length=1,
        max_length=32,
        description="The values that update the key's row (inserting it if it has none).",
    )
    delete: tuple[OpValue, ...] = Field(
        ("d", "delete"),
        min_length=1,
        max_length=32,
        description="The values that delete the key's row. Any other value, or none, keeps "
        "the record raw with the reason (and sends it to the dead-letter topic).",
    )

    def action(self) -> str:
        """Where the operation is, in words."""
        return f"field {self.field}" if self.field else f"header {self.header}"


class TableLayout(_Model):
    """A table the topic lands in, as the spec's ``table`` and each route's ``table`` write
    it (the spec's adds the catalog, which every route's table is in)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.mode != 'append' || !has(self.keyColumns) || size(self.keyColumns) == 0",
            "keyColumns apply to modes upsert and cdc only",
            ".keyColumns",
            None,
            lambda t: t.mode in ROW_LEVEL or not t.key_columns,
        ),
        Rule(
            "!has(self.keyColumns) || self.keyColumns.all(c, "
            "self.keyColumns.exists_one(d, d == c))",
            "keyColumns names a field twice",
            ".keyColumns",
            None,
            lambda t: len(set(t.key_columns)) == len(t.key_columns),
        ),
        Rule(
            "!has(self.op) || self.mode == 'upsert'",
            "op applies to mode upsert (mode cdc reads Debezium's own op field)",
            ".op",
            None,
            lambda t: t.op is None or t.mode == "upsert",
        ),
        Rule(
            "!has(self.partitionBy) || self.partitionBy.all(c, "
            "self.partitionBy.exists_one(d, d == c))",
            "partitionBy names a partition field twice",
            ".partitionBy",
            None,
            lambda t: len(set(t.partition_by)) == len(t.partition_by),
        ),
    )

    identifier: str = Field(pattern=IDENTIFIER, max_length=253, description="namespace.table")
    partitioning: Literal["hour", "day", "month", "none"] = Field(
        "day", description="Time partitioning on kafka.timestamp."
    )
    partition_by: tuple[Annotated[str, Field(pattern=PARTITION_FIELD, max_length=300)], ...] = (
        Field(
            default_factory=tuple,
            max_length=MAX_PARTITION_FIELDS,
            description=(
                "More partition fields after partitioning's (set partitioning none for these "
                "alone), each an Iceberg transform of a column of the value, the decoded key or "
                "the lineage: value.region (identity), year(f), month(f), day(f), hour(f), "
                "bucket(16, value.customer_id), truncate(4, value.sku). A change evolves the "
                "table's partition spec; files written before keep theirs."
            ),
        )
    )
    properties: dict[str, str] = Field(
        default_factory=dict, description="Iceberg table properties."
    )
    mode: Literal["append", "upsert", "cdc"] = Field(
        "append",
        description="append: a row per record. upsert: a row per key, each record "
        "replacing its key's row and a tombstone (null value) deleting "
        "it. cdc: Debezium change events (Avro or JSON envelopes); the "
        "table holds the source's rows, op d deleting one. upsert and "
        "cdc write deletion vectors (format v3, merge-on-read), never "
        "equality deletes. A table keeps the mode it was made with.",
    )
    key_columns: tuple[FieldPath, ...] = Field(
        default_factory=tuple,
        max_length=MAX_KEY_COLUMNS,
        description="upsert, cdc: the value fields (dotted paths, e.g. id or customer.id; for "
        "cdc, fields of the row) that identify a row; empty: the record's Kafka "
        "key does.",
    )
    op: OpSpec | None = Field(
        None,
        description=(
            "upsert: the value field or header whose value says whether a record inserts, updates "
            "or deletes its key's row (without it, every record replaces its key's row and only a "
            "tombstone deletes it)."
        ),
    )

    @property
    def namespace(self) -> str:
        return self.identifier.rsplit(".", 1)[0]

    @property
    def name(self) -> str:
        return self.identifier.rsplit(".", 1)[1]


def partition_field(text: str) -> tuple[str, str, int | None]:
    """A ``partitionBy`` entry as (column path, transform name, its width or bucket count)."""
    found = re.match(r"^(\w+)\((?:(\d+), ?)?([\w.]+)\)$", text)
    if found is None:
        return text, "identity", None
    name, width, column = found.groups()
    return column, name, int(width) if width else None


class TableSpec(TableLayout):
    RULES = (
        *TableLayout.RULES,
        Rule(
            "!has(self.branch) || (self.branch != 'main' && !self.branch.startsWith('floe_'))",
            "table.branch names the branch floe lands in instead of main: leave it out to land "
            "in main, and do not start it with floe_ (floe's own refs)",
            ".branch",
            None,
            lambda t: t.branch is None or (t.branch != MAIN and not t.branch.startswith("floe_")),
        ),
    )

    catalog: CatalogSpec
    deletion_policy: Literal["Retain", "Delete"] = Field(
        "Retain",
        description="What deleting the resource does to the table (and the routes' tables).",
    )
    branch: str | None = Field(
        None,
        pattern=BRANCH,
        max_length=100,
        description=(
            "Write, audit, publish: the job commits to this branch of the table (made from main "
            "when absent) and main moves only when it is published, by the annotation "
            "floe.dev/publish (a snapshot id of the branch, or any other value for its head) or "
            "kubectl floe publish. Readers of main see only what was published."
        ),
    )

    @property
    def ref(self) -> str:
        """The branch the job commits to and reads its offsets from."""
        return self.branch or MAIN


class RouteSpec(_Model):
    field: str = Field(
        pattern=FIELD_PATH,
        max_length=253,
        description=(
            "A field of the value as its writer wrote it, dotted: source.table for Debezium "
            "envelopes, or a field of the record such as region."
        ),
    )
    values: tuple[Annotated[str, Field(max_length=253)], ...] = Field(
        min_length=1, max_length=256, description="The field's values (as text) this route takes."
    )
    table: TableLayout = Field(description="The route's table, in table's catalog.")
    key_subject: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        description=(
            "Registry subject of this table's keys, when key.format decodes them (default: "
            "key.subject)."
        ),
    )
    subject: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        description=(
            "Registry subject this table is made and evolved from (default: the value's "
            "subject). Set it when routes carry records of different schemas, such as "
            "Debezium's <topic>-<record name> subjects."
        ),
    )


class CommitSpec(_Model):
    RULES = (
        duration_rule(
            "interval",
            "commit.interval",
            at_least=1,
            at_most=86_400,
            words="must be between 1s and 1d",
        ),
        Rule(
            "!has(self.minRecords) || self.minRecords <= self.maxRecordsPerCommit",
            "commit.minRecords must not be above commit.maxRecordsPerCommit: a commit "
            "never takes more than maxRecordsPerCommit",
            ".minRecords",
            None,
            lambda c: c.min_records is None or c.min_records <= c.max_records_per_commit,
        ),
        size_rule(
            "maxBytesPerCommit", "commit.maxBytesPerCommit", 1024 * 1024, "must be at least 1Mi"
        ),
    )

    interval: str = _duration(
        "60s",
        "How often a snapshot is committed, e.g. 10s, 1m "
        "(from 1s to 1d); with minRecords, the longest a record "
        "waits for its commit.",
    )
    max_records_per_commit: int = Field(
        2_000_000,
        ge=1,
        le=100_000_000,
        description=(
            "At most this many records in a commit: a backlog lands in commits of this size."
        ),
    )
    max_bytes_per_commit: str = Field(
        "512Mi",
        pattern=QUANTITY,
        max_length=32,
        description=(
            "At most about this many bytes of records (keys and values) in a commit, at least 1Mi: "
            "turned into a number of records from the records' size, sampled at start and "
            "measured on every batch (lower-case units are binary, as in Spark)."
        ),
    )
    min_records: int | None = Field(
        None,
        ge=1,
        le=100_000_000,
        description=(
            "Commit as soon as this many records have arrived (checked every second), or when "
            "interval has passed since the last commit, whichever comes first: a burst lands "
            "early, a trickle still lands every interval."
        ),
    )

    @property
    def interval_seconds(self) -> int:
        return duration_seconds(self.interval)

    @property
    def max_bytes_per_commit_bytes(self) -> int:
        return size_bytes(self.max_bytes_per_commit)


class SchemaEvolutionSpec(_Model):
    mode: Literal["additive", "none"] = Field(
        "additive",
        description="additive: new optional fields and wider types evolve the "
        "table; breaking changes wait for approval. none: never evolve.",
    )


class DeadLetterSpec(_Model):
    topic: str = Field(pattern=KAFKA_TOPIC)


class ResourcesSpec(_Model):
    cores: int = Field(1, ge=1, le=64)
    memory: str = Field("1g", pattern=QUANTITY)


class _MaintenanceAction(_Model):
    enabled: bool = Field(True, description="Run this action on its schedule.")


class CompactionSpec(_MaintenanceAction):
    RULES = (
        size_rule(
            "targetFileSize", "compaction.targetFileSize", 1024 * 1024, "must be at least 1Mi"
        ),
    )

    schedule: str = Field("17 * * * *", pattern=CRON, description="Cron schedule (UTC).")
    target_file_size: str = Field(
        "256Mi",
        pattern=QUANTITY,
        max_length=32,
        description=(
            "Size of the files compaction writes (at least 1Mi; lower-case units are binary, as in "
            "Spark)."
        ),
    )
    min_input_files: int = Field(
        5,
        ge=2,
        le=10_000,
        description=("Rewrite a partition's files only when there are at least this many."),
    )

    @property
    def target_file_size_bytes(self) -> int:
        return size_bytes(self.target_file_size)


class ExpireSnapshotsSpec(_MaintenanceAction):
    RULES = (
        duration_rule("maxAge", "expireSnapshots.maxAge", at_least=60, words="must be at least 1m"),
    )

    schedule: str = Field("43 3 * * *", pattern=CRON, description="Cron schedule (UTC).")
    retain_last: int = Field(100, ge=1, le=100_000, description="Snapshots always kept.")
    max_age: str | None = _duration(
        None,
        "Older snapshots expire (never the newest one floe wrote, which holds the "
        "offsets); at least 1m. Default: retainLast commit intervals, so that the table "
        "keeps about retainLast commits and its metadata stays small at any interval, "
        "but at least 5m, so that readers keep their snapshots at a short interval.",
    )


class RemoveOrphansSpec(_MaintenanceAction):
    RULES = (
        duration_rule(
            "olderThan",
            "removeOrphans.olderThan",
            at_least=3600,
            words="must be at least 1h: a younger unreferenced file may belong "
            "to a commit still in flight",
        ),
    )

    schedule: str = Field("13 4 * * 0", pattern=CRON, description="Cron schedule (UTC).")
    older_than: str = _duration(
        "3d",
        "Only unreferenced files older than this are deleted "
        "(at least 1h: younger ones may belong to a commit in "
        "flight).",
    )

    @property
    def older_than_seconds(self) -> int:
        return duration_seconds(self.older_than)


class RewriteManifestsSpec(_MaintenanceAction):
    schedule: str = Field("29 5 * * *", pattern=CRON, description="Cron schedule (UTC).")


class MaintenanceSpec(_Model):
    compaction: CompactionSpec = CompactionSpec()
    expire_snapshots: ExpireSnapshotsSpec = ExpireSnapshotsSpec()
    remove_orphans: RemoveOrphansSpec = RemoveOrphansSpec()
    rewrite_manifests: RewriteManifestsSpec = RewriteManifestsSpec()
    resources: ResourcesSpec = Field(
        ResourcesSpec(memory="2g"),
        description=(
            "CPU cores and memory of each maintenance run (Spark in local mode in one pod)."
        ),
    )


def _route_tables_apart(topic: TopicSpec) -> bool:
    identifiers = [topic.table.identifier, *(route.table.identifier for route in topic.routes)]
    return len(set(identifiers)) == len(identifiers)


class TopicSpec(_Model):
    """The KafkaIcebergTopic's spec, but for the pods' settings (``spec.spark``, the
    operator's): what the job runs on."""

    RULES = (
        Rule(
            "!has(self.deadLetter) || self.deadLetter.topic != self.kafka.topic",
            "deadLetter.topic must differ from kafka.topic",
            ".deadLetter.topic",
            None,
            lambda s: s.dead_letter is None or s.dead_letter.topic != s.kafka.topic,
        ),
        Rule(
            "self.kafka.topic == oldSelf.kafka.topic",
            "kafka.topic cannot change: create a new resource for another topic",
            ".kafka.topic",
        ),
        Rule(
            "self.table.identifier == oldSelf.table.identifier",
            "table.identifier cannot change: create a new resource for another table",
            ".table.identifier",
        ),
        Rule(
            "self.table.mode == oldSelf.table.mode",
            "table.mode cannot change: a table keeps the mode it was made with; create a new "
            "resource with another table.identifier",
            ".table.mode",
        ),
        Rule(
            "self.value.format in ['avro', 'json'] || self.table.mode != 'cdc'",
            "table.mode cdc reads Debezium change events: value.format must be avro or json",
            ".table.mode",
            None,
            lambda s: s.value.format in ("avro", "json") or s.table.mode != "cdc",
        ),
        Rule(
            "self.value.format != 'raw' || !has(self.table.keyColumns) "
            "|| size(self.table.keyColumns) == 0",
            "table.keyColumns name value fields, and a raw topic's value has none: leave "
            "keyColumns out to key rows by the Kafka key",
            ".table.keyColumns",
            None,
            lambda s: s.value.format != "raw" or not s.table.key_columns,
        ),
        Rule(
            "self.table.mode != 'cdc' || !has(self.value.coerce) || size(self.value.coerce) == 0",
            "value.coerce converts fields of a record's value, and a cdc table's rows are "
            "Debezium's before and after images: leave coerce out",
            ".value.coerce",
            None,
            lambda s: s.table.mode != "cdc" or not s.value.coerce,
        ),
        Rule(
            "self.table.mode != 'cdc' || ((!has(self.value.columns) || "
            "size(self.value.columns) == 0) && (!has(self.value.inferSchema) || "
            "!self.value.inferSchema))",
            "value.columns and value.inferSchema read a record's value as the table's row, and "
            "a cdc table's rows are Debezium's after images: give the envelope's schema in "
            "value.schemaRegistry",
            ".value",
            None,
            lambda s: s.table.mode != "cdc" or not (s.value.columns or s.value.infer_schema),
        ),
        Rule(
            "self.value.format != 'raw' || !has(self.table.op) || has(self.table.op.header)",
            "table.op.field names a value field, and a raw topic's value has none: use "
            "op.header, or value.format avro, json or protobuf",
            ".table.op",
            None,
            lambda s: (
                s.value.format != "raw" or s.table.op is None or s.table.op.header is not None
            ),
        ),
        Rule(
            "!has(self.key) || !has(self.key.format) || self.key.format == 'raw' "
            "|| (self.value.format != 'raw' && has(self.value.schemaRegistry))",
            "key.format avro, json or protobuf reads the key schema from value.schemaRegistry's "
            "registry: value.format must be avro, json or protobuf too, with a schemaRegistry",
            ".key.format",
            None,
            lambda s: (
                s.key.format == "raw"
                or (s.value.format != "raw" and s.value.schema_registry is not None)
            ),
        ),
        Rule(
            "!has(self.fanOut) || !self.fanOut || (has(self.routes) && size(self.routes) > 0)",
            "fanOut sends a record to every route that matches: it needs routes",
            ".fanOut",
            None,
            lambda s: not s.fan_out or bool(s.routes),
        ),
        Rule(
            "self.value.format != 'raw' || !has(self.routes) || size(self.routes) == 0",
            "routes pick a table by a value field, and a raw topic's value has none: "
            "value.format must be avro, json or protobuf",
            ".routes",
            None,
            lambda s: s.value.format != "raw" or not s.routes,
        ),
        Rule(
            "!has(self.routes) || self.routes.all(r, r.table.identifier != "
            "self.table.identifier && self.routes.exists_one(o, o.table.identifier == "
            "r.table.identifier))",
            "each route needs a table of its own: routes[].table.identifier must differ from "
            "table.identifier and from each other",
            ".routes",
            None,
            _route_tables_apart,
        ),
        Rule(
            "!has(self.table.branch) || !has(self.routes) || size(self.routes) == 0",
            "table.branch lands one table in a branch and routes land several: a branch for "
            "routed tables is not supported yet, leave table.branch or routes out",
            ".table.branch",
            None,
            lambda s: s.table.branch is None or not s.routes,
        ),
    )

    kafka: KafkaSpec
    value: ValueSpec
    key: KeySpec = Field(KeySpec(), description="How the Kafka key is read.")
    table: TableSpec
    routes: tuple[RouteSpec, ...] = Field(
        default_factory=tuple,
        max_length=MAX_ROUTES,
        description=(
            "Other tables, each taking the records whose field has one of its values (the "
            "first route that matches wins, or every one with fanOut); table takes the records "
            "no route matches. Each table has its own mode, keys and committed offsets, in "
            "table's catalog."
        ),
    )
    fan_out: bool = Field(
        False,
        description=(
            "routes: a record goes to every route whose field has one of its values, not only the "
            "first; table still takes the records no route matches."
        ),
    )
    commit: CommitSpec = CommitSpec()
    schema_evolution: SchemaEvolutionSpec = SchemaEvolutionSpec()
    dead_letter: DeadLetterSpec | None = None
    maintenance: MaintenanceSpec = Field(
        MaintenanceSpec(), description=("Table maintenance, one CronJob per enabled action.")
    )
    suspend: bool = Field(
        False, description="Stop the job and its maintenance, keep the table and checkpoint."
    )

    def tables(self) -> list[TableSpec]:
        """The tables the topic lands in: ``table`` first (the records no route matches), then
        each route's, in ``table``'s catalog. Everyone who lists a resource's tables asks
        this."""
        return [
            self.table,
            *(
                TableSpec(
                    catalog=self.table.catalog,
                    deletion_policy=self.table.deletion_policy,
                    **route.table.model_dump(),
                )
                for route in self.routes
            ),
        ]

    @property
    def snapshot_max_age_seconds(self) -> int:
        """Snapshots older than this may expire: ``expireSnapshots.maxAge``, or by default
        ``retainLast`` commit intervals, so that a table keeps about ``retainLast`` commits
        whatever its interval (and its metadata the same size), but never less than
        :data:`MIN_DEFAULT_SNAPSHOT_AGE_SECONDS`: at a 1 s interval a reader still has its
        snapshot for minutes.  (Maintenance holds what it works from: :mod:`.maintenance`.)"""
        expire = self.maintenance.expire_snapshots
        if expire.max_age:
            return duration_seconds(expire.max_age)
        return max(
            expire.retain_last * self.commit.interval_seconds, MIN_DEFAULT_SNAPSHOT_AGE_SECONDS
        )


# --- the operations the job runs (a KafkaIcebergOperation's spec, the operator's) ------------

_TIME: JsonDict = {"format": "date-time"}


def rfc3339_seconds(text: str) -> float:
    """An RFC 3339 time (``Z`` or an offset) as seconds since the epoch."""
    import datetime as dt

    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _offset_rule(section: str) -> Rule:
    """An operation's ``fromOffset`` is below its ``toOffset``."""
    return Rule(
        "!has(self.fromOffset) || !has(self.toOffset) || self.fromOffset < self.toOffset",
        f"{section}.fromOffset must be below {section}.toOffset",
        ".toOffset",
        None,
        lambda r: r.from_offset is None or r.to_offset is None or r.from_offset < r.to_offset,
    )


def _time_rule(section: str) -> Rule:
    """An operation's ``fromTime`` is before its ``toTime``."""
    return Rule(
        "!has(self.fromTime) || !has(self.toTime) || "
        "timestamp(self.fromTime) < timestamp(self.toTime)",
        f"{section}.fromTime must be before {section}.toTime",
        ".toTime",
        None,
        lambda r: (
            r.from_time is None
            or r.to_time is None
            or rfc3339_seconds(r.from_time) < rfc3339_seconds(r.to_time)
        ),
    )


class RepairSpec(_Model):
    """Which of the table's raw rows to decode again, and how."""

    RULES = (_offset_rule("repair"), _time_rule("repair"))

    table: str | None = Field(
        None,
        pattern=IDENTIFIER,
        description="Which of the topic's tables (a routed topic has "
        "several); default: its table.identifier.",
    )
    reasons: tuple[Literal[RAW_REASONS], ...] = Field(  # type: ignore[valid-type]
        default_factory=tuple,
        max_length=len(RAW_REASONS),
        description="Only rows kept raw for these reasons (the reason label of the job's "
        "floe_job_records_raw_total metric); default: any reason.",
    )
    schema_ids: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        default_factory=tuple,
        max_length=100,
        description="Only rows whose value is framed with one of these writer schema ids "
        "(kafka.schema_id).",
    )
    partitions: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        default_factory=tuple, max_length=10_000, description="Only these Kafka partitions."
    )
    from_offset: int | None = Field(None, ge=0, description="Only offsets at or above this.")
    to_offset: int | None = Field(None, ge=1, description="Only offsets below this.")
    from_time: str | None = Field(
        None,
        description="Only records whose Kafka timestamp is at or after this (RFC 3339).",
        json_schema_extra=_TIME,
    )
    to_time: str | None = Field(
        None,
        description="Only records whose Kafka timestamp is before this (RFC 3339).",
        json_schema_extra=_TIME,
    )
    dry_run: bool = Field(
        False,
        description="Change nothing: count the rows that would be "
        "decoded, and why the others would stay raw.",
    )
    dead_letters: bool = Field(
        True,
        description="With a deadLetter topic: also land its records of this table that "
        "the table has no row for (their raw rows deleted, or lost while "
        "Kafka no longer has them) and that now decode.",
    )
    rows_per_commit: int = Field(
        100_000,
        ge=1,
        le=100_000_000,
        description="At most this many rows of one Kafka partition are replaced per commit "
        "(a run stopped midway goes on from the rows still raw).",
    )

    def refused(self, topic: TopicSpec, table: TableLayout) -> str | None:
        """Why ``table``, one of ``topic``'s, cannot be repaired (what to change), or None."""
        if topic.value.format == "raw" and not topic.key.decoded:
            return (
                "the topic's value.format is raw and its key is not decoded: no row is "
                "kept raw for a reason a repair could fix"
            )
        if table.mode in ROW_LEVEL:
            return (
                f"table {table.identifier} is an {table.mode} table: repairing its raw "
                "rows would replay them against later changes of the same keys, which "
                "floe does not do yet; only append tables are repaired"
            )
        return None


class BackfillSpec(_Model):
    """Which records of the topic to land (again) in the table."""

    RULES = (_offset_rule("backfill"), _time_rule("backfill"))

    table: str | None = Field(
        None,
        pattern=IDENTIFIER,
        description="Which of the topic's tables (a routed topic has "
        "several: each takes its routed records); "
        "default: its table.identifier.",
    )
    into: str | None = Field(
        None,
        pattern=IDENTIFIER,
        max_length=253,
        description="Land in this new table instead (namespace.table, in the topic's catalog), "
        "made with the layout of the table above: its offsets are the "
        "backfill's, so a KafkaIcebergTopic made for it afterwards goes on from "
        "where the backfill ended. Default: the table above, beside its job.",
    )
    partitions: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        default_factory=tuple,
        max_length=10_000,
        description="Only these Kafka partitions; default: all.",
    )
    from_offset: int | None = Field(
        None, ge=0, description="From this offset of each partition; default: Kafka's earliest."
    )
    to_offset: int | None = Field(
        None,
        ge=1,
        description="Below this offset of each partition; "
        "default and at most: where the "
        "table's offsets are (the job lands "
        "the rest; into a new table: "
        "Kafka's end when it starts).",
    )
    from_time: str | None = Field(
        None,
        description="From the first record with a Kafka timestamp at or after this (RFC 3339).",
        json_schema_extra=_TIME,
    )
    to_time: str | None = Field(
        None,
        description="Below the first record with a Kafka timestamp at or after this (RFC 3339).",
        json_schema_extra=_TIME,
    )
    records_per_commit: int = Field(
        1_000_000,
        ge=1,
        le=100_000_000,
        description="At most this many offsets of one partition are landed per commit (a run "
        "stopped midway goes on from what is not in the table).",
    )

    def refused(self, topic: TopicSpec, table: TableLayout) -> str | None:
        """Why ``table``, one of ``topic``'s, cannot be backfilled (what to change), or None."""
        if self.into is not None and self.into in {t.identifier for t in topic.tables()}:
            return (
                f"backfill.into names {self.into}, one of the topic's tables: leave into "
                "out (and name it in backfill.table) to backfill it beside its job"
            )
        if table.mode in ROW_LEVEL:
            return (
                f"table {table.identifier} is an {table.mode} table: older records landed "
                "after newer ones would undo their changes; only append tables are "
                "backfilled"
            )
        return None


class ReplaySpec(_Model):
    """Which of the table's rows to produce to which topic."""

    RULES = (_offset_rule("replay"),)

    topic: str = Field(
        pattern=KAFKA_TOPIC,
        description=(
            "The topic to produce to, on the KafkaIcebergTopic's Kafka cluster (with its client "
            "settings); it must exist, with at least as many partitions as the rows came from "
            "(each row goes to the partition it came from), and must not be the topic itself."
        ),
    )
    table: str | None = Field(
        None,
        pattern=IDENTIFIER,
        description="Which of the topic's tables; default: its table.identifier.",
    )
    snapshot_id: str | None = Field(
        None,
        pattern=r"^[0-9]{1,19}$",
        description="Produce the table as of this snapshot; "
        "default: as it is when the replay starts.",
    )
    partitions: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        default_factory=tuple, max_length=10_000, description="Only rows of these Kafka partitions."
    )
    from_offset: int | None = Field(None, ge=0, description="Only rows at or above this offset.")
    to_offset: int | None = Field(None, ge=1, description="Only rows below this offset.")
    records_per_transaction: int = Field(
        10_000,
        ge=1,
        le=10_000_000,
        description="Records per Kafka transaction: each commits the partition's progress with "
        "it, so a run stopped midway goes on after the last committed one.",
    )
    timestamps: Literal["original", "now"] = Field(
        "original",
        description="original: each record keeps its row's Kafka timestamp (the replay is "
        "refused where the topic's time-based retention would delete some); now: "
        "each record is stamped when produced, the original kept in header "
        "floe.original-timestamp (epoch milliseconds, as text).",
    )

    def refused(self, topic: TopicSpec, table: TableLayout) -> str | None:
        """Why ``table``, one of ``topic``'s, cannot be replayed (what to change), or None."""
        if self.topic == topic.kafka.topic:
            return "replay.topic is the topic the table lands: produce to another topic"
        if table.mode == "cdc":
            return (
                f"table {table.identifier} is a cdc table: its rows are the changes "
                "applied, not the change events; only append and upsert tables are "
                "replayed"
            )
        if topic.value.format == "protobuf":
            return (
                "the topic's values are protobuf: replay re-encodes Avro and JSON values "
                "(and raw ones as their bytes) only"
            )
        return None


class OperationRequest(_Model):
    """What the operator asks the job to do (``python -m floe_sparkapp operate``): one
    operation of a KafkaIcebergOperation, recorded on the table under its ``uid``."""

    uid: str = Field(min_length=1)
    name: str = Field(min_length=1)
    type: Literal["Repair", "Backfill", "Replay"]
    repair: RepairSpec | None = None
    backfill: BackfillSpec | None = None
    replay: ReplaySpec | None = None

    @property
    def section(self) -> RepairSpec | BackfillSpec | ReplaySpec:
        """The spec of its type."""
        found = {"Repair": self.repair, "Backfill": self.backfill, "Replay": self.replay}[self.type]
        assert found is not None, f"type {self.type} needs its section"
        return found
