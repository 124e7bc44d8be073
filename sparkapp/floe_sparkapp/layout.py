"""The table layout: one row per Kafka record, with its lineage, key and value.

=============  ==============================================================================
column         contents
=============  ==============================================================================
kafka          struct: topic, partition, offset, timestamp (timestamptz), timestamp_type,
               headers (list of key/value), schema_id (the value's registry id, if framed),
               ingest_timestamp (when floe landed the record: its batch's time, later
               than the partition's earlier commits)
cdc            (mode cdc) struct: op, ts, source: the change event a row comes from
key            the key bytes, untouched
value          struct from the registry schema; null when the value is null or undecodable
               (absent when the format is ``raw``)
value_raw      the value bytes when they could not be decoded, or always for ``raw``
value_error    why decoding failed
=============  ==============================================================================

Partitioned by ``hour|day|month(kafka.timestamp)`` or not at all; data files sorted by
``kafka.partition, kafka.offset``.  The operator and the job create the table through the same
function, :func:`ensure_table`.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from pyiceberg.exceptions import (
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortDirection, SortField, SortOrder
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    VoidTransform,
    YearTransform,
)
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

from . import cdc
from .contract import ROW_LEVEL, TableLayout, partition_field

DEFAULT_PROPERTIES = {
    "format-version": "2",
    "write.parquet.compression-codec": "zstd",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
    "write.distribution-mode": "none",
}

# An upsert or cdc table changes rows by deletion vectors (merge-on-read, format version 3), never
# equality deletes, which several engines cannot read. It is made at version 2, like every table
# (PyIceberg cannot write a version 3 snapshot, and a new table gets an empty root snapshot);
# the job upgrades it before its first change (upsert.with_deletion_vectors).
UPSERT_PROPERTIES = {
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}
KEY_FIELDS = "key_fields"  # the decoded Kafka key (key.format avro, json or protobuf)
KEY_FIELDS_ID = 7
MODE = "floe.mode"  # the table property recording the mode the table was made for

_TRANSFORMS: dict[str, Transform[Any, Any]] = {
    "hour": HourTransform(),
    "day": DayTransform(),
    "month": MonthTransform(),
    "year": YearTransform(),
    "identity": IdentityTransform(),
}


def table_properties(table: TableLayout) -> dict[str, str]:
    """The properties a new table is made with: floe's, the mode's, then the user's."""
    mode = UPSERT_PROPERTIES if table.mode in ROW_LEVEL else {}
    return {**DEFAULT_PROPERTIES, **mode, MODE: table.mode, **table.properties}


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


def partition_fields(table: TableLayout) -> list[tuple[str, Transform[Any, Any], str]]:
    """The table's partition fields, as (column path, transform, field name): ``partitioning``
    on ``kafka.timestamp`` first, then ``partitionBy``'s."""
    fields = []
    if table.partitioning != "none":
        fields.append(
            (
                "kafka.timestamp",
                _TRANSFORMS[table.partitioning],
                f"kafka_timestamp_{table.partitioning}",
            )
        )
    for text in table.partition_by:
        column, name, width = partition_field(text)
        transform: Transform[Any, Any]
        if name in ("bucket", "truncate"):
            assert width is not None  # the spec's pattern gives bucket and truncate a width
            transform = BucketTransform(width) if name == "bucket" else TruncateTransform(width)
        else:
            transform = _TRANSFORMS[name]
        suffix = "" if name == "identity" else f"_{name}" + (f"_{width}" if width else "")
        fields.append((column, transform, column.replace(".", "_") + suffix))
    return fields


def _source_id(schema: Schema, table: TableLayout, column: str) -> int:
    try:
        return schema.find_field(column).field_id
    except ValueError:
        raise LayoutMismatch(
            f"table.partitionBy: table {table.identifier} has no column {column} to partition "
            "by. Name a field of the value (value.<field>), of the decoded key "
            "(key_fields.<field>) or of the lineage (kafka.<field>)."
        ) from None


def partition_spec(schema: Schema, table: TableLayout) -> PartitionSpec:
    fields = partition_fields(table)
    if not fields:
        return UNPARTITIONED_PARTITION_SPEC
    return PartitionSpec(
        *[
            PartitionField(
                source_id=_source_id(schema, table, column),
                field_id=1000 + index,
                transform=transform,
                name=name,
            )
            for index, (column, transform, name) in enumerate(fields)
        ]
    )


def evolve_partitioning(existing: Any, table: TableLayout) -> list[str]:
    """Evolves the table's partition spec to the one the spec asks for (a new spec: the files
    written before keep theirs); what changed, in words (nothing: the same fields)."""
    schema = existing.schema()
    wanted = {
        (_source_id(schema, table, column), str(transform)): (column, transform, name)
        for column, transform, name in partition_fields(table)
    }
    current = {
        (field.source_id, str(field.transform)): field.name
        for field in existing.spec().fields
        if not isinstance(field.transform, VoidTransform)
    }
    if wanted.keys() == current.keys():
        return []
    changes = []
    with existing.update_spec() as update:
        for key, name in current.items():
            if key not in wanted:
                update.remove_field(name)
                changes.append(f"partition field {name} removed")
        for key, (column, transform, name) in wanted.items():
            if key not in current:
                update.add_field(column, transform, name)
                changes.append(f"partitioned by {transform}({column}) as {name}")
    return changes


def sort_order(schema: Schema) -> SortOrder:
    return SortOrder(
        SortField(
            source_id=schema.find_field("kafka.partition").field_id, transform=IdentityTransform()
        ),
        SortField(
            source_id=schema.find_field("kafka.offset").field_id, transform=IdentityTransform()
        ),
    )


def files_bound_one_partition(table: Any) -> bool:
    """Whether an append's data files each hold one Kafka partition's records and say their
    newest timestamp: the table is in floe's sort order (each task writes the one partition
    it reads, as it reads it; under a user's order Iceberg shuffles the rows) and keeps the
    bounds of ``kafka.partition`` and ``kafka.timestamp`` (``write.metadata.metrics``)."""
    floe = [f.source_id for f in sort_order(table.schema()).fields]
    found = table.sort_order().fields
    if [f.source_id for f in found] != floe or not all(
        isinstance(f.transform, IdentityTransform) and f.direction == SortDirection.ASC
        for f in found
    ):
        return False
    properties = table.properties
    default = properties.get("write.metadata.metrics.default", "truncate(16)")
    return all(
        properties.get(f"write.metadata.metrics.column.{name}", default).lower()
        not in ("none", "counts")
        for name in ("kafka.partition", "kafka.timestamp")
    )


class LayoutMismatch(ValueError):
    """The table exists but is not laid out the way floe writes it."""


def check_layout(
    existing: Any, table: TableLayout, value: StructType | None, key: StructType | None = None
) -> None:
    """Refuses an existing table that lacks floe's columns (it was made by something else)."""
    names = {f.name for f in existing.schema().fields}
    wanted = {"kafka", "key", "value_raw", "value_error"} | (
        {"value"} if value is not None else set()
    )
    if key is not None and KEY_FIELDS not in names:
        raise LayoutMismatch(
            f"table {table.identifier} was made without a {KEY_FIELDS} column, and key.format "
            "says the key is decoded: a table keeps the columns it was made with. Point "
            "table.identifier at a new table, or set key.format back to raw."
        )
    if table.mode == "cdc":
        wanted.add("cdc")
    missing = sorted(wanted - names)
    if missing:
        raise LayoutMismatch(
            f"table {table.identifier} exists but is not a floe table: it has no column(s) "
            f"{', '.join(missing)}. Point table.identifier at a new table, or drop this one."
        )
    _check_keys(existing, table)
    made_for = existing.properties.get(MODE, "append")
    if made_for != table.mode:
        raise LayoutMismatch(
            f"table {table.identifier} was made for mode {made_for}, the spec says "
            f"{table.mode}: a table keeps the mode it was made with. Point table.identifier at "
            "a new table, or set the mode back."
        )
    lineage = existing.schema().find_field("kafka").field_type
    lineage_names = {f.name for f in getattr(lineage, "fields", [])}
    missing = sorted({"topic", "partition", "offset", "timestamp"} - lineage_names)
    if missing:
        raise LayoutMismatch(
            f"table {table.identifier} exists but its kafka column lacks {', '.join(missing)}"
        )


def _check_keys(existing: Any, table: TableLayout) -> None:
    """An upsert's key columns, and its operation field, are primitive fields of the value."""
    if table.mode not in ROW_LEVEL:
        return
    named = [("keyColumns", column) for column in table.key_columns]
    if table.op is not None and table.op.field:
        named.append(("op.field", table.op.field))
    if not named:
        return
    schema = existing.schema()
    problems = []
    for setting, column in named:
        try:
            found = schema.find_field(f"value.{column}")
        except ValueError:
            problems.append((setting, f"the value has no field {column}"))
            continue
        if not found.field_type.is_primitive:
            problems.append((setting, f"{column} is a {found.field_type}, not a single value"))
    if problems:
        value = (
            schema.find_field("value").field_type
            if "value" in {f.name for f in schema.fields}
            else None
        )
        fields = ", ".join(f.name for f in getattr(value, "fields", []))
        settings = sorted({setting for setting, _ in problems})
        raise LayoutMismatch(
            f"table.{' and table.'.join(settings)}: "
            f"{'; '.join(problem for _, problem in problems)} (the value's "
            f"fields: {fields or 'none'}). Name single-valued fields of "
            "the value."
        )


def ensure_table(
    catalog: Any, table: TableLayout, value: StructType | None, key: StructType | None = None
) -> tuple[Any, bool]:
    """Loads the table, creating it (and its namespace) when absent.

    Returns the table and whether it was created by this call.  Safe to call concurrently:
    losing a creation race to another writer is not an error.  A new table gets an empty root
    snapshot on ``main``, so every commit of the job has a snapshot to build on.
    """
    try:
        existing = catalog.load_table(table.identifier)
        check_layout(existing, table, value, key)
        return with_lineage(_with_root_snapshot(existing)), False
    except NoSuchTableError:
        pass
    with suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(table.namespace)
    schema = table_schema(value, table.mode, key)
    try:
        created = catalog.create_table(
            table.identifier,
            schema=schema,
            partition_spec=partition_spec(schema, table),
            sort_order=sort_order(schema),
            properties=table_properties(table),
        )
        _check_keys(created, table)
        return _with_root_snapshot(created), True
    except TableAlreadyExistsError:
        return _with_root_snapshot(catalog.load_table(table.identifier)), False


def _with_root_snapshot(table: Any) -> Any:
    if table.current_snapshot() is None:
        from pyiceberg.exceptions import CommitFailedException

        try:
            with (
                table.transaction() as transaction,
                transaction.update_snapshot().fast_append(),
            ):
                pass  # no files: an empty snapshot for the first commit to build on
        except CommitFailedException:  # someone else made it first
            table.refresh()
    return table
