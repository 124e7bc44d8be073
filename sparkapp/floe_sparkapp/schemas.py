"""A registered writer schema, whatever its format: the Iceberg struct it maps to, and how the
records written with it are read (:class:`Writer`).

Avro, Protobuf and JSON Schema subjects are all read the same way afterwards: decoded once per
writer schema id, projected by field name onto the table, evolved additively, refused and kept
raw on a breaking change until it is approved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache

from . import cdc
from .avro_types import MappedValue, SchemaMappingError
from .coercion import as_text, coerced_struct
from .json_schema_types import json_schema_to_iceberg
from .protobuf_types import Message, compile_schema, message_of, protobuf_to_iceberg
from .registry import RegisteredSchema

FORMATS = {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}  # value.format: schema type
# Two more fields of every writer's decoded struct: whether the record decoded, and (the
# Protobuf decoder's) why its raw value is kept as well.
OK_FIELD = "__floe_decoded"
NOTE_FIELD = "__floe_note"


@dataclass(frozen=True)
class Writer:
    """How the bytes after the header of one writer schema id are read into a struct.

    ``schema`` is, by ``format``: AVRO, the writer schema's text; JSON, the Spark type (as
    JSON) its values parse into; PROTOBUF, the full name of the message, found in
    ``descriptor`` (a FileDescriptorSet) and framed with one of ``indexes`` (the message-index
    array's encodings)."""

    format: str
    schema: str
    descriptor: bytes = b""
    indexes: tuple[bytes, ...] = ()
    recursive: bool = False  # has recursive fields, which are left out


@lru_cache(maxsize=256)
def _compiled(schema: str, references: tuple[tuple[str, str], ...]) -> bytes:
    return compile_schema(schema, references)


def _mapped(
    found: RegisteredSchema, mode: str, message: str | None
) -> tuple[MappedValue, Message | None, bytes]:
    kind = found.schema_type.upper()
    if kind == "AVRO":
        return cdc.table_value(found.schema, mode), None, b""
    if mode == "cdc":
        raise SchemaMappingError(
            f"a cdc table reads Debezium envelopes in Avro or JSON, not {kind}"
        )
    if kind == "JSON":
        return json_schema_to_iceberg(found.schema, found.references), None, b""
    if kind == "PROTOBUF":
        descriptor = _compiled(found.schema, found.references)
        chosen = message_of(descriptor, message)
        return protobuf_to_iceberg(descriptor, chosen.name), chosen, descriptor
    raise SchemaMappingError(f"schema type {kind} is not one floe reads")


def table_struct(
    found: RegisteredSchema,
    mode: str = "append",
    message: str | None = None,
    coerce: Mapping[str, str] | None = None,
) -> MappedValue:
    """The table struct of a writer schema (for ``cdc``, of the rows in its envelopes);
    ``message`` picks a Protobuf schema's message (else its first); ``coerce`` (by
    :attr:`.contract.ValueSpec.conversions`) gives fields the types ``value.coerce`` declares."""
    value = _mapped(found, mode, message)[0]
    if coerce:
        value = replace(value, struct=coerced_struct(value.struct, coerce))
    return value


def mapped(
    found: RegisteredSchema,
    mode: str = "append",
    message: str | None = None,
    coerce: Mapping[str, str] | None = None,
) -> tuple[MappedValue, Writer]:
    """:func:`table_struct`, and how the records written with the schema are read (a coerced
    field as the writer wrote it: JSON's as text)."""
    value, chosen, descriptor = _mapped(found, mode, message)
    recursive = bool(value.recursive_fields)
    kind = found.schema_type.upper()
    table = replace(value, struct=coerced_struct(value.struct, coerce)) if coerce else value
    if kind == "JSON":
        from .json_schema_types import spark_type

        read = as_text(spark_type(value.struct), coerce) if coerce else spark_type(value.struct)
        return table, Writer(kind, read.json(), recursive=recursive)
    if chosen is not None:
        return table, Writer(kind, chosen.name, descriptor, chosen.indexes, recursive)
    return table, Writer(kind, found.schema, recursive=recursive)
