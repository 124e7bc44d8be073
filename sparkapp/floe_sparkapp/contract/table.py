"""Where the records land: the catalog, the table's layout (identifier, partitioning, mode,
keys and an upsert table's operation field), the topic's table (its catalog, deletion policy
and branch) and a route's."""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from ..ledger import MAIN
from .base import FIELD_PATH, IDENTIFIER, FieldPath, Rule, SecretRef, _Model

CATALOG_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
BRANCH = r"^[A-Za-z][A-Za-z0-9_-]*$"
_COLUMN = r"(value|key_fields|kafka)(\.[A-Za-z_][A-Za-z0-9_]*)+"
# A partition field: an Iceberg transform of a column, as Iceberg's Spark DDL writes it.
PARTITION_FIELD = (
    rf"^({_COLUMN}|(identity|year|month|day|hour)\({_COLUMN}\)|"
    rf"(bucket|truncate)\([1-9][0-9]{{0,5}}, ?{_COLUMN}\))$"
)
MAX_PARTITION_FIELDS = 4
MAX_KEY_COLUMNS = 8
ROW_LEVEL = ("upsert", "cdc")  # the modes whose records change rows (delete, then append)


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
