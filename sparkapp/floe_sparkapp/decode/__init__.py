"""Spark transforms from Kafka source rows to table rows: lineage, decoding, raw fallback.

Values in the Confluent wire format are decoded in the JVM, once per writer schema id present
in the batch: Avro with ``from_avro``, Protobuf with ``from_protobuf`` (the message-index array
after the header checked and cut per record), JSON Schema with ``from_json``.  Each is then
projected by name onto the table's current value struct (missing fields null, widened types
cast).  Plain JSON values (no header) are parsed against the table's struct directly.  A value
that cannot be decoded keeps its bytes in ``value_raw`` with the reason in ``value_error``; no
record is dropped.  A null value (tombstone) is a row with a null
value and no error.

The modules: :mod:`.framing`, the Confluent header read; :mod:`.writers`, the values read with
each writer schema (:class:`WriterPlan`); :mod:`.checks`, why one is kept raw;
:mod:`.framed`, framed values and keys decoded onto the table's type; :mod:`.json_values`, JSON
ones, framed or plain; :mod:`.projection`, a value reshaped onto the table's type;
:mod:`.rows`, the table's rows with their lineage and the raw fallback.  The names are imported
from here.
"""

from __future__ import annotations

from .framed import decode_framed, decode_framed_key
from .framing import HEADER_BYTES, frame, framed_ids
from .json_values import decode_json, decode_json_key
from .projection import project, scalar_at
from .rows import (
    INGESTED,
    KEY_ERROR,
    KEY_FIELDS,
    NO_COLUMNS_YET,
    decode_raw,
    raw_reason,
    table_rows,
)
from .writers import CORRUPT, JSON_OPTIONS, WriterPlan, decode_writers, decoded_field

__all__ = [
    "CORRUPT",
    "HEADER_BYTES",
    "INGESTED",
    "JSON_OPTIONS",
    "KEY_ERROR",
    "KEY_FIELDS",
    "NO_COLUMNS_YET",
    "WriterPlan",
    "decode_framed",
    "decode_framed_key",
    "decode_json",
    "decode_json_key",
    "decode_raw",
    "decode_writers",
    "decoded_field",
    "frame",
    "framed_ids",
    "project",
    "raw_reason",
    "scalar_at",
    "table_rows",
]
