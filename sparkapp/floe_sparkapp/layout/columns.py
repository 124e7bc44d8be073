"""The table's columns: the Kafka lineage, the key and the value (the package's doc), the
schema a new table is made with, and the lineage fields a table made by an older floe lacks."""

from __future__ import annotations

from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from .. import cdc

KEY_FIELDS = "key_fields"  # the decoded Kafka key (key.format avro, json or protobuf)
KEY_FIELDS_ID = 7


def lineage_struct() -> StructType:
    return StructType(
        NestedField(101, "topic", StringType(), required=True),
        NestedField(102, "partition", IntegerType(), required=True),
        NestedField(103, "offset", LongType(), required=True),
        NestedField(104, "timestamp", TimestamptzType(), required=True),
        NestedField(105, "timestamp_type", IntegerType(), required=True),
        NestedField(
            106,
            "headers",
            ListType(
                107,
                StructType(
                    NestedField(108, "key", StringType(), required=True),
                    NestedField(109, "value", BinaryType(), required=False),
                ),
                element_required=True,
            ),
            required=False,
        ),
        NestedField(
            110,
            "schema_id",
            IntegerType(),
            required=False,
            doc="registry id of the value's writer schema, when the value is framed",
        ),
        NestedField(
            111,
            INGEST_TIMESTAMP,
            TimestamptzType(),
            required=False,
            doc="when floe landed the record (its batch's time; never before an "
            "earlier commit's in the partition)",
        ),
    )


INGEST_TIMESTAMP = "ingest_timestamp"


def with_lineage(table: Any) -> Any:
    """``table`` with every optional field of :func:`lineage_struct` its ``kafka`` column
    lacks (a table made by an older floe) added; returns it refreshed when it changed."""
    from pyiceberg.exceptions import CommitFailedException

    for _ in range(3):
        lineage = table.schema().find_field("kafka").field_type
        present = {f.name for f in getattr(lineage, "fields", [])}
        missing = [f for f in lineage_struct().fields if f.name not in present and not f.required]
        if not missing:
            return table
        try:
            with table.update_schema() as update:
                for f in missing:
                    update.add_column(("kafka", f.name), f.field_type, doc=f.doc)
            return table.refresh()
        except CommitFailedException:  # another writer changed it: look again
            table.refresh()
    return table


def table_schema(
    value: StructType | None, mode: str = "append", key: StructType | None = None
) -> Schema:
    """The full table schema; ``value`` is the mapped registry schema, None for raw topics;
    ``key`` the key's, when the key is decoded.

    Field ids here are placeholders: creating the table assigns fresh ones.
    """
    fields = [NestedField(1, "kafka", lineage_struct(), required=True, doc="Kafka lineage")]
    if mode == "cdc":
        fields.append(
            NestedField(
                6,
                "cdc",
                cdc.lineage_struct(),
                required=False,
                doc="the change event a row's last change came from",
            )
        )
    fields.append(
        NestedField(2, "key", BinaryType(), required=False, doc="the record key, untouched")
    )
    if key is not None:
        fields.append(
            NestedField(
                KEY_FIELDS_ID,
                KEY_FIELDS,
                _offset_ids(key, 500_000),
                required=False,
                doc="the decoded record key",
            )
        )
    if value is not None:
        fields.append(
            NestedField(
                3,
                "value",
                _offset_ids(value, 1000),
                required=False,
                doc="the decoded value; null when null or undecodable",
            )
        )
    fields += [
        NestedField(
            4,
            "value_raw",
            BinaryType(),
            required=False,
            doc="the value bytes when they could not be decoded",
        ),
        NestedField(5, "value_error", StringType(), required=False, doc="why decoding failed"),
    ]
    return Schema(*fields)


def _offset_ids(struct: StructType, offset: int) -> StructType:
    """Shifts the value struct's ids clear of the fixed columns' placeholder ids."""
    from pyiceberg.schema import Schema as _Schema
    from pyiceberg.schema import assign_fresh_schema_ids

    counter = iter(range(offset, offset + 1_000_000))
    return assign_fresh_schema_ids(_Schema(*struct.fields), lambda: next(counter)).as_struct()
