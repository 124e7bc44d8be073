"""Protobuf values decoded per Arrow batch in Python, with the ``protobuf`` package.

Spark's own ``from_protobuf`` (the ``spark-protobuf`` module) is not published on the package
registry floe builds from, so values are decoded by an Arrow UDF: each writer's message class is
made once per Python worker from its descriptor set, and each record is parsed by protobuf's C
implementation (upb) and turned into the Arrow struct of the writer's Iceberg type
(:mod:`.protobuf_types`).  The struct carries two more fields: whether the record decoded, and
why its raw bytes are kept too (fields the writer schema does not know).
"""

from __future__ import annotations

import datetime as dt
from functools import lru_cache
from typing import Any, Callable

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import types as T

from .decode import HEADER_BYTES
from .decode import NOTE_FIELD as NOTE
from .decode import OK_FIELD as OK
from .json_schema_types import spark_type
from .protobuf_types import _ENUM, _GROUP, _MESSAGE, _pool, _repeated, protobuf_to_iceberg
from .schemas import Writer

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_UINT64, _FIXED64 = 4, 6


@lru_cache(maxsize=64)
def writer_type(descriptor: bytes, message: str) -> T.StructType:
    """The Spark struct a writer's records decode into (its Iceberg type's, and the two flags)."""
    struct = spark_type(protobuf_to_iceberg(descriptor, message).struct)
    return T.StructType([*struct.fields, T.StructField(OK, T.BooleanType()),
                         T.StructField(NOTE, T.StringType())])


def _value(field, path: tuple[str, ...]) -> Callable[[Any], Any] | None:
    """How one (non-repeated) value of ``field`` becomes an Arrow-ready Python value; None for
    a message that encloses the field (recursion: no column)."""
    if field.type in (_MESSAGE, _GROUP):
        name = field.message_type.full_name
        if name == "google.protobuf.Timestamp":
            return lambda ts: _EPOCH + dt.timedelta(seconds=ts.seconds,
                                                    microseconds=ts.nanos // 1000)
        if name in path:
            return None
        return _message(field.message_type, (*path, name))
    if field.type == _ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda number: names.get(number, str(number))
    if field.type in (_UINT64, _FIXED64):  # the same 64 bits as a signed long
        return lambda n: n - 2**64 if n >= 2**63 else n
    return lambda v: v


def _message(descriptor, path: tuple[str, ...]) -> Callable[[Any], dict[str, Any]]:
    """A message as a dict of its columns: unset fields with presence are None, others their
    value (proto3's zero value when absent, as the generated classes give it)."""
    fields: list[tuple[str, str, Callable[[Any], Any], bool]] = []
    for field in descriptor.fields:
        is_map = field.type == _MESSAGE and field.message_type.GetOptions().map_entry
        if is_map:
            key_field, value_field = field.message_type.fields
            convert = _value(value_field, path)
            if convert is None:
                continue
            key = _value(key_field, path)
            fields.append((field.name, "map",
                           lambda m, k=key, c=convert: [(k(a), c(b)) for a, b in m.items()],
                           False))
        elif _repeated(field):
            convert = _value(field, path)
            if convert is None:
                continue
            fields.append((field.name, "list", lambda items, c=convert: [c(x) for x in items],
                           False))
        else:
            convert = _value(field, path)
            if convert is None:
                continue
            fields.append((field.name, "one", convert, field.has_presence))

    def to_dict(message: Any) -> dict[str, Any]:
        out = {}
        for name, _, convert, presence in fields:
            if presence and not message.HasField(name):
                out[name] = None
            else:
                out[name] = convert(getattr(message, name))
        return out

    return to_dict


@lru_cache(maxsize=64)
def _reader(descriptor: bytes, message: str):
    from google.protobuf import message_factory

    pool, _ = _pool(descriptor)
    found = pool.FindMessageTypeByName(message)
    return message_factory.GetMessageClass(found), _message(found, (found.full_name,))


def decode(framed: list[bytes | None], descriptor: bytes, message: str,
           indexes: tuple[bytes, ...]) -> list[dict[str, Any] | None]:
    """Each framed value as its struct (None for a null value)."""
    from google.protobuf.message import DecodeError

    cls, to_dict = _reader(descriptor, message)
    out: list[dict[str, Any] | None] = []
    for value in framed:
        if value is None:
            out.append(None)
            continue
        body = next((value[HEADER_BYTES + len(index):] for index in indexes
                     if value.startswith(index, HEADER_BYTES)), None)
        if body is None:
            out.append({OK: False})
            continue
        try:
            parsed = cls.FromString(body)
            row = to_dict(parsed)
        except (DecodeError, RuntimeError, ValueError, OverflowError):
            out.append({OK: False})
            continue
        whole = parsed.ByteSize()
        parsed.DiscardUnknownFields()
        if parsed.ByteSize() != whole:
            row[NOTE] = (f"the value has fields its writer schema's {message} does not "
                         "define; the full value is in value_raw")
        row[OK] = True
        out.append(row)
    return out


def read(framed: Column, writer: Writer) -> Column:
    """``framed`` (header included) decoded with ``writer`` by an Arrow UDF."""
    from pyspark.sql.functions import arrow_udf
    from pyspark.sql.pandas.types import to_arrow_type

    struct = writer_type(writer.descriptor, writer.schema)
    arrow_type = to_arrow_type(struct)
    descriptor, message, indexes = writer.descriptor, writer.schema, writer.indexes

    def decode_batch(values: pa.Array) -> pa.Array:
        rows = decode(values.to_pylist(), descriptor, message, indexes)
        return pa.array(rows, type=arrow_type)

    return arrow_udf(decode_batch, struct)(framed)
