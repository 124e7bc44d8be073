"""A row's value encoded again for Kafka: the registry's wire format with the row's writer
schema id (Avro with the writer schema itself, JSON as JSON); a value kept raw (or with a part
kept raw) as the bytes it came as.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from decimal import Decimal
from typing import Any

from ..registry import Registry
from .refusals import ReplayRefused


def _named(schema: Any, named: dict[str, Any], namespace: str | None = None) -> None:
    """Records the named types ``schema`` defines, by full and short name."""
    if isinstance(schema, list):
        for branch in schema:
            _named(branch, named, namespace)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in ("record", "enum", "fixed") and schema.get("name"):
        space = schema.get("namespace", namespace)
        named.setdefault(schema["name"].rsplit(".", 1)[-1], schema)
        named.setdefault(
            schema["name"] if "." in schema["name"] or not space else f"{space}.{schema['name']}",
            schema,
        )
        namespace = space
    for field in schema.get("fields", ()):
        _named(field["type"], named, namespace)
    for key in ("items", "values"):
        if key in schema:
            _named(schema[key], named, namespace)
    if isinstance(kind, (dict, list)):
        _named(kind, named, namespace)


def _datum(value: Any, schema: Any, named: dict[str, Any]) -> Any:
    """A decoded column's value as fastavro writes it for the writer ``schema`` (the mapping
    of :mod:`.avro_types`, read backwards)."""
    if isinstance(schema, str) and schema in named:
        schema = named[schema]
    if isinstance(schema, list):
        others = [b for b in schema if b != "null"]
        if value is None:
            return None
        if len(others) == 1:
            return _datum(value, others[0], named)
        members = value if isinstance(value, dict) else value.asDict(recursive=True)
        for index, branch in enumerate(others):  # struct<member0, member1, ...>
            if members.get(f"member{index}") is not None:
                return _datum(members[f"member{index}"], branch, named)
        return None
    if value is None:
        return None
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if kind == "record":
        fields = value if isinstance(value, dict) else value.asDict(recursive=True)
        return {
            f["name"]: _datum(fields.get(f["name"]), f["type"], named) for f in schema["fields"]
        }
    if kind == "array":
        return [_datum(item, schema["items"], named) for item in value]
    if kind == "map":
        pairs = value.items() if isinstance(value, dict) else value
        return {k: _datum(v, schema["values"], named) for k, v in pairs}
    if isinstance(kind, (dict, list)):
        return _datum(value, kind, named)
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if (
        logical in ("timestamp-millis", "timestamp-micros")
        and isinstance(value, dt.datetime)
        and value.tzinfo is None
    ):
        return value.astimezone(dt.timezone.utc)  # Spark's naive local time
    if logical == "uuid":
        return str(value)
    if kind in ("bytes", "fixed") and not isinstance(value, Decimal):
        return bytes(value)
    return value


class Encoder:
    """A row's value in the registry's wire format, by its writer schema id."""

    def __init__(self, registry: Registry | None, fmt: str) -> None:
        self.registry, self.fmt = registry, fmt
        self.parsed: dict[int, tuple[Any, dict[str, Any], Any]] = {}

    def _writer(self, schema_id: int) -> tuple[Any, dict[str, Any], Any]:
        import fastavro

        if schema_id not in self.parsed:
            assert self.registry is not None
            found = self.registry.by_id(schema_id)
            if found is None:
                raise ReplayRefused(
                    f"schema id {schema_id} is not in the registry any more: "
                    "its rows cannot be encoded again"
                )
            parsed_names: dict[str, Any] = {}
            raw_names: dict[str, Any] = {}
            for _, text in found.references:
                reference = json.loads(text)
                fastavro.parse_schema(reference, named_schemas=parsed_names)
                _named(reference, raw_names)
            raw = json.loads(found.schema)
            _named(raw, raw_names)
            self.parsed[schema_id] = (
                fastavro.parse_schema(raw, named_schemas=parsed_names),
                raw_names,
                raw,
            )
        return self.parsed[schema_id]

    def value(self, row: Any) -> bytes | None:
        raw = row["value_raw"]
        if raw is not None:  # kept raw (or a part of it): the bytes as they came
            return bytes(raw)
        value = row["value"] if "value" in row.__fields__ else None
        if value is None:
            return None  # a tombstone
        schema_id = row["kafka"]["schema_id"]
        header = b"" if schema_id is None else b"\x00" + struct.pack(">I", schema_id)
        if self.fmt == "json":
            plain = value.asDict(recursive=True) if hasattr(value, "asDict") else value
            return header + json.dumps(plain, default=_json_default, separators=(",", ":")).encode()
        import fastavro

        parsed, named, raw = self._writer(schema_id)
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, _datum(value, raw, named))
        return header + buffer.getvalue()


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    return str(value)
