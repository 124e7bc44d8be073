"""Protobuf schemas from the registry: compiled to a descriptor set, mapped to Iceberg types.

A registered Protobuf schema is a ``.proto`` file; the files it imports are registered under
their own subjects (its references).  They are compiled together with protoc (``grpcio-tools``)
into a ``FileDescriptorSet``, which floe's JVM decoder (:mod:`.protobuf_decode`) reads the
records with.  The table and the decoded rows agree on this mapping:

=========================================  ============================================
Protobuf                                   Iceberg
=========================================  ============================================
bool, string, bytes                        boolean, string, binary
int32, sint32, sfixed32                    int
int64, sint64, sfixed64                    long
uint32, fixed32                            long
uint64, fixed64                            long: values above 2^63 - 1 wrap to negative
                                           numbers, as Java's long of the same 64 bits
float, double                              float, double
enum                                       string (the value's name)
message                                    struct
google.protobuf.Timestamp                  timestamptz
repeated T                                 list<T>
map<K, V>                                  map<K, V>
a field whose message encloses it          no column: such values keep their bytes in
(recursion, e.g. google.protobuf.Struct)   value_raw, the rest of the message is decoded
google.protobuf.Duration                   not supported: the writer's records stay raw
=========================================  ============================================

Proto3 fields without presence read as their zero value when absent from the bytes (as the
generated classes give them); a message field that is not set is null.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from .avro_types import MappedValue, SchemaMappingError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from google.protobuf.descriptor import Descriptor, FieldDescriptor
    from google.protobuf.descriptor_pb2 import DescriptorProto, FileDescriptorSet
    from google.protobuf.descriptor_pool import DescriptorPool

WRITER_FILE = "__floe_writer.proto"
WELL_KNOWN = "google/protobuf/"

# FieldDescriptor.TYPE_* numbers
_SCALARS: dict[int, IcebergType] = {
    1: DoubleType(),
    2: FloatType(),
    3: LongType(),
    4: LongType(),
    5: IntegerType(),
    6: LongType(),
    7: LongType(),
    8: BooleanType(),
    9: StringType(),
    12: BinaryType(),
    13: LongType(),
    15: IntegerType(),
    16: LongType(),
    17: IntegerType(),
    18: LongType(),
}
_MESSAGE, _GROUP, _ENUM = 11, 10, 14
_SPECIAL: dict[str, IcebergType] = {"google.protobuf.Timestamp": TimestamptzType()}
_UNSUPPORTED = {
    "google.protobuf.Duration": "a Duration (Spark reads it as an interval, which "
    "Iceberg has no type for)"
}


class ProtobufCompileError(SchemaMappingError):
    """protoc refused the registered schema (or one it imports)."""


def compile_schema(schema: str, references: tuple[tuple[str, str], ...] = ()) -> bytes:
    """The ``FileDescriptorSet`` (imports included) of a registered ``.proto`` file and the
    files it imports, by their import names.  Google's well-known types come with protoc."""
    import grpc_tools

    with tempfile.TemporaryDirectory(prefix="floe-proto-") as folder:
        root = Path(folder)
        for name, text in (*references, (WRITER_FILE, schema)):
            if name.startswith(WELL_KNOWN):
                continue
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        out = root / "__floe.desc"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{root}",
                f"-I{Path(grpc_tools.__file__).parent / '_proto'}",
                "--include_imports",
                f"--descriptor_set_out={out}",
                WRITER_FILE,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip().replace(str(root) + "/", "")
            raise ProtobufCompileError(f"protoc cannot compile the schema: {message[:500]}")
        return out.read_bytes()


@dataclass(frozen=True)
class Message:
    """The message a writer's records are decoded as, and how its records say so."""

    name: str  # full name, package included
    indexes: tuple[bytes, ...]  # the Confluent message-index encodings that name it


def _zigzag_varint(number: int) -> bytes:
    value, out = number << 1, bytearray()  # zigzag of a non-negative number
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _pool(descriptor_set: bytes) -> tuple[DescriptorPool, FileDescriptorSet]:
    from google.protobuf import descriptor_pb2, descriptor_pool

    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return pool, files


def message_of(descriptor_set: bytes, name: str | None = None) -> Message:
    """The writer file's message named ``name`` (its full name), or its first message; with the
    message-index arrays the Confluent serializers frame its records with (``[0]`` also as
    the single byte 0)."""
    _, files = _pool(descriptor_set)
    writer = next(f for f in files.file if f.name == WRITER_FILE)
    package = f"{writer.package}." if writer.package else ""

    def walk(
        messages: Iterable[DescriptorProto], prefix: str, path: tuple[int, ...]
    ) -> Iterator[tuple[str, tuple[int, ...]]]:
        for index, message in enumerate(messages):
            full = f"{prefix}{message.name}"
            yield full, (*path, index)
            yield from walk(message.nested_type, f"{full}.", (*path, index))

    found = list(walk(writer.message_type, package, ()))
    if not found:
        raise SchemaMappingError("the Protobuf schema defines no message")
    if name is None:
        full, path = found[0]
    else:
        match = [(full, path) for full, path in found if full == name.lstrip(".")]
        if not match:
            raise SchemaMappingError(
                f"the Protobuf schema has no message {name}; it has "
                f"{', '.join(full for full, _ in found)}"
            )
        full, path = match[0]
    encoded = _zigzag_varint(len(path)) + b"".join(_zigzag_varint(i) for i in path)
    return Message(full, (b"\x00", encoded) if path == (0,) else (encoded,))


def protobuf_to_iceberg(descriptor_set: bytes, message: str, first_id: int = 1) -> MappedValue:
    """The Iceberg struct of ``message`` (a full name in ``descriptor_set``)."""
    pool, _ = _pool(descriptor_set)
    next_id = first_id
    recursive: list[str] = []

    def new_id() -> int:
        nonlocal next_id
        next_id += 1
        return next_id - 1

    def field_type(field: FieldDescriptor, where: str, path: tuple[str, ...]) -> IcebergType | None:
        if field.type in (_MESSAGE, _GROUP):
            message = field.message_type
            assert message is not None  # a message (or group) field has its message's type
            name = message.full_name
            if name in _SPECIAL:
                return _SPECIAL[name]
            if name in _UNSUPPORTED:
                raise SchemaMappingError(f"field {where} is {_UNSUPPORTED[name]}")
            if name in path:
                recursive.append(where)
                return None
            return struct(message, where, (*path, name))
        if field.type == _ENUM:
            return StringType()
        return _SCALARS[field.type]

    def struct(descriptor: Descriptor, where: str, path: tuple[str, ...]) -> StructType:
        fields = []
        for field in descriptor.fields:
            at = f"{where}.{field.name}" if where else field.name
            field_id = new_id()
            message = field.message_type if field.type == _MESSAGE else None
            if message is not None and message.GetOptions().map_entry:
                key_field, value_field = message.fields
                key_id, value_id = new_id(), new_id()
                value = field_type(value_field, f"{at}.value", path)
                if value is None:
                    continue
                key = field_type(key_field, at, path)
                assert key is not None  # a map's keys are scalars
                kind: IcebergType = MapType(key_id, key, value_id, value, value_required=False)
            elif _repeated(field):
                element_id = new_id()
                element = field_type(field, f"{at}.element", path)
                if element is None:
                    continue
                kind = ListType(element_id, element, element_required=False)
            else:
                found = field_type(field, at, path)
                if found is None:
                    continue
                kind = found
            fields.append(NestedField(field_id, field.name, kind, required=False))
        return StructType(*fields)

    try:
        top = pool.FindMessageTypeByName(message)
    except KeyError:
        raise SchemaMappingError(f"the Protobuf schema has no message {message}") from None
    mapped = struct(top, "", (top.full_name,))
    return MappedValue(mapped, tuple(recursive), next_id - 1)


def _repeated(field: FieldDescriptor) -> bool:
    repeated = getattr(field, "is_repeated", None)  # protobuf >= 5.29
    if repeated is not None:
        return bool(repeated)
    label: int = field.label  # type: ignore[attr-defined]  # protobuf < 5.29: no is_repeated
    return label == 3  # LABEL_REPEATED
