"""The properties a new table is made with, among them the mode it is made for."""

from __future__ import annotations

from ..contract import ROW_LEVEL, TableLayout

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
MODE = "floe.mode"  # the table property recording the mode the table was made for


def table_properties(table: TableLayout) -> dict[str, str]:
    """The properties a new table is made with: floe's, the mode's, then the user's."""
    mode = UPSERT_PROPERTIES if table.mode in ROW_LEVEL else {}
    return {**DEFAULT_PROPERTIES, **mode, MODE: table.mode, **table.properties}
