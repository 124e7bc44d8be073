"""PyIceberg's Arrow FileIO, as floe reads and writes tables' files from Python (the operator's
table reads, the job's metadata commits): on S3, Google Cloud Storage and Azure.

PyIceberg's own ``PyArrowFileIO`` reads ``abfs[s]://container@account.dfs.core.windows.net/path``
as a path under a container named ``container@account...``, and reaches GCS only with a token
or Google's default credentials; Iceberg's Java FileIOs (the job's Spark side) take both. Each
location and setting here means what it means to Iceberg (``catalog.pyiceberg_properties``
translates the catalog's properties)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.typedef import EMPTY_DICT, Properties

# Iceberg's GCPProperties: no credentials (a public bucket, an emulator)
GCS_NO_AUTH = "gcs.no-auth"


class ArrowFileIO(PyArrowFileIO):
    @staticmethod
    def parse_location(location: str, properties: Properties = EMPTY_DICT) -> tuple[str, str, str]:
        """As PyIceberg's, but an ADLS location's path starts at its container (its netloc is
        ``container@account-host``)."""
        scheme, netloc, path = PyArrowFileIO.parse_location(location, properties)
        if scheme in ("abfs", "abfss") and "@" in netloc:
            return scheme, netloc, netloc.split("@", 1)[0] + urlparse(location).path
        return scheme, netloc, path

    def _initialize_gcs_fs(self) -> Any:
        if self.properties.get(GCS_NO_AUTH, "").lower() != "true":
            return super()._initialize_gcs_fs()
        from pyarrow.fs import GcsFileSystem

        options: dict[str, Any] = {"anonymous": True}
        if endpoint := self.properties.get("gcs.service.host"):
            parts = urlparse(endpoint)
            options.update(scheme=parts.scheme, endpoint_override=parts.netloc)
        return GcsFileSystem(**options)


def files_under(io: PyArrowFileIO, location: str) -> Iterator[tuple[str, Any]]:
    """Each file under ``location``, as (its location, in ``location``'s form, and its Arrow
    ``FileInfo``), listed through ``io``'s file system for that store."""
    from pyarrow.fs import FileSelector, FileType

    location = location.rstrip("/")
    scheme, netloc, root = io.parse_location(location)
    store = io.fs_by_scheme(scheme, netloc)
    for info in store.get_file_info(FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type == FileType.File:
            yield location + info.path[len(root) :], info
