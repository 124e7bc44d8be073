"""How the table's data files are laid out: its partition spec, made and evolved, and floe's
sort order."""

from __future__ import annotations

from typing import Any

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

from ..contract import TableLayout, partition_field
from .checks import LayoutMismatch

_TRANSFORMS: dict[str, Transform[Any, Any]] = {
    "hour": HourTransform(),
    "day": DayTransform(),
    "month": MonthTransform(),
    "year": YearTransform(),
    "identity": IdentityTransform(),
}


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
