"""Protobuf values decoded in the JVM, by floe's own decoder (``sparkapp/jvm``).

Spark's ``from_protobuf`` (the ``spark-protobuf`` module) is not published on the package
registry floe builds from, so the job runs ``dev.floe.protobuf.ProtobufDecoder``: a Spark UDF
on protobuf-java's ``DynamicMessage``, made per writer schema from its descriptor set.  It cuts
the header and the message-index array, parses the message, and returns the struct of the
writer's Iceberg type (:mod:`.protobuf_types`) with two more fields: whether the record decoded,
and why its raw bytes are kept too (fields the writer schema does not know).
"""

from __future__ import annotations

from functools import lru_cache

from pyspark.sql import Column
from pyspark.sql import types as T

from .json_schema_types import spark_type
from .jvm_udf import apply, java, make
from .protobuf_types import protobuf_to_iceberg
from .schemas import NOTE_FIELD, OK_FIELD, Writer

DECODER = "dev.floe.protobuf.ProtobufDecoder"


@lru_cache(maxsize=64)
def writer_type(descriptor: bytes, message: str) -> T.StructType:
    """The Spark struct a writer's records decode into (its Iceberg type's, and the two flags)."""
    struct = spark_type(protobuf_to_iceberg(descriptor, message).struct)
    return T.StructType(
        [
            *struct.fields,
            T.StructField(OK_FIELD, T.BooleanType()),
            T.StructField(NOTE_FIELD, T.StringType()),
        ]
    )


def read(framed: Column, writer: Writer) -> Column:
    """``framed`` (header included) decoded with ``writer``."""
    struct = writer_type(writer.descriptor, writer.schema)
    java_type = java("org.apache.spark.sql.types.DataType").fromJson(struct.json())
    decoder = make(
        DECODER,
        bytearray(writer.descriptor),
        writer.schema,
        ",".join(index.hex() for index in writer.indexes),
        java_type,
    )
    return apply(decoder, framed)
