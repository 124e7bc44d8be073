"""The Confluent wire format: a magic byte 0, then the writer schema id, 4 bytes big-endian;
the columns that say each row's id, or why it is not framed."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

HEADER_BYTES = 5  # Confluent wire format: magic byte 0, then a 4-byte big-endian schema id


def framing_columns(column: str) -> tuple[str, str]:
    """The framing columns of ``column``: its writer schema id, and why it is not framed."""
    prefix = "" if column == "value" else f"_{column}"
    return f"{prefix}_schema_id", f"{prefix}_frame_error"


def frame(df: DataFrame, column: str = "value") -> DataFrame:
    """Adds ``_schema_id`` (the framed writer schema id) and ``_frame_error`` (for the key:
    ``_key_schema_id``, ``_key_frame_error``)."""
    value = F.col(column)
    magic = F.substring(value, 1, 1)
    error = (
        F.when(value.isNull(), F.lit(None))
        .when(
            F.length(value) < HEADER_BYTES,
            F.format_string(
                f"{column} is %d bytes, shorter than the 5-byte Confluent header", F.length(value)
            ),
        )
        .when(
            magic != F.lit(bytearray(b"\x00")),
            F.concat(
                F.lit(
                    ("" if column == "value" else f"{column} ")
                    + "not in the Confluent wire format: first byte 0x"
                ),
                F.hex(magic),
                F.lit(", expected 0x00"),
            ),
        )
    )
    # A signed 32-bit big-endian integer, as the registry's own deserializers read it: ids
    # with the high bit set (``ff ff ff ff``) are negative, never a cast error that wedges
    # the batch; no registry has them, so their records are kept raw with that reason.
    unsigned = F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long")
    signed = F.when(unsigned >= F.lit(2**31), unsigned - F.lit(2**32)).otherwise(unsigned)
    schema_id = F.when(value.isNotNull() & error.isNull(), signed.cast("int"))
    id_name, error_name = framing_columns(column)
    return df.withColumn(error_name, error).withColumn(id_name, schema_id)


def framed_ids(df: DataFrame, column: str = "value") -> list[int]:
    """The writer schema ids ``column``'s framed values carry (one pass over ``df``)."""
    name = "_schema_id" if column == "value" else "_key_schema_id"
    return sorted(
        int(r[0]) for r in frame(df, column).select(name).distinct().collect() if r[0] is not None
    )
