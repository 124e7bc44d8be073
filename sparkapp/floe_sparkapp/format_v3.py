"""PyIceberg writing the metadata of a format-version 3 table.

An upsert table is format version 3, whose position deletes are deletion vectors.  Its data and
deletes are written by Iceberg Java in Spark; PyIceberg only changes its metadata: properties,
schema, tags.  PyIceberg 0.12 reads version 3 metadata into a model that keeps what a version 3
table adds (the table's ``next-row-id``, a snapshot's ``first-row-id`` and ``added-rows``, field
defaults) and applies metadata changes to it, but refuses to write the file
(iceberg-python issue 1551, open while its writers of data and manifests learn version 3).
:func:`enable` lets it write the metadata file, the way it writes a version 2 one; a PyIceberg
that can do it itself is left alone.  PyIceberg still cannot write a version 3 snapshot (its
manifest-list writer stops at version 2), and floe never asks it to.
"""

from __future__ import annotations

from typing import Any

_enabled = False


def enable() -> None:
    """Makes PyIceberg's version 3 metadata writable, once per process."""
    global _enabled
    if _enabled:
        return
    from pyiceberg.table.metadata import TableMetadataV3

    if _refuses(TableMetadataV3):

        def model_dump_json(
            self: Any,
            exclude_none: bool = True,
            exclude: Any | None = None,
            by_alias: bool = True,
            **kwargs: Any,
        ) -> str:
            dumped: str = super(TableMetadataV3, self).model_dump_json(
                exclude_none=exclude_none, exclude=exclude, by_alias=by_alias, **kwargs
            )
            return dumped

        TableMetadataV3.model_dump_json = model_dump_json  # type: ignore[method-assign]
    _enabled = True


def _refuses(model: Any) -> bool:
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

    probe = new_table_metadata(
        Schema(),
        UNPARTITIONED_PARTITION_SPEC,
        UNSORTED_SORT_ORDER,
        "file:///probe",
        {"format-version": "3"},
    )
    assert isinstance(probe, model)
    try:
        probe.model_dump_json()
        return False
    except NotImplementedError:
        return True
