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

The modules: :mod:`.columns`, the columns and the schema a table is made with;
:mod:`.properties`, the properties it is made with; :mod:`.partitioning`, its partition spec
and sort order; :mod:`.checks`, an existing table checked against the layout.  The names are
imported from here.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from pyiceberg.exceptions import (
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.types import StructType

from ..contract import TableLayout
from .checks import LayoutMismatch, check_keys, check_layout
from .columns import (
    INGEST_TIMESTAMP,
    KEY_FIELDS,
    KEY_FIELDS_ID,
    lineage_struct,
    table_schema,
    with_lineage,
)
from .partitioning import (
    evolve_partitioning,
    files_bound_one_partition,
    partition_fields,
    partition_spec,
    sort_order,
)
from .properties import DEFAULT_PROPERTIES, MODE, UPSERT_PROPERTIES, table_properties

__all__ = [
    "DEFAULT_PROPERTIES",
    "INGEST_TIMESTAMP",
    "KEY_FIELDS",
    "KEY_FIELDS_ID",
    "MODE",
    "UPSERT_PROPERTIES",
    "LayoutMismatch",
    "check_layout",
    "ensure_table",
    "evolve_partitioning",
    "files_bound_one_partition",
    "lineage_struct",
    "partition_fields",
    "partition_spec",
    "sort_order",
    "table_properties",
    "table_schema",
    "with_lineage",
]


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
        check_keys(created, table)
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
