"""How a record is read: its value (the format, the registry's subject, a plain JSON value's
columns, the fields coerced to their column's type) and its key."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import FieldPath, Rule, _Model
from .kafka import SchemaRegistrySpec

# value.coerce's types (floe_sparkapp.coercion), and value.columns' (those and boolean, date)
_DECIMAL = r"decimal\(([1-9]|[12][0-9]|3[0-8]), ?([0-9]|[12][0-9]|3[0-8])\)"
COERCE_TO = rf"^(int|long|float|double|timestamp|binary|string|{_DECIMAL})$"
COLUMN_TYPE = rf"^(boolean|int|long|float|double|date|timestamp|binary|string|{_DECIMAL})$"


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
