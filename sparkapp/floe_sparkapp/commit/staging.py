"""Step 3 of an append: a batch's data files written without committing them
(:class:`Staged`), and deleted when they will not be."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from ..jvm_udf import java
from ..steps import step
from .table import CommitterTable

log = logging.getLogger("floe.commit")


def _table_cache(spark: Any) -> Any:
    """Iceberg's ``SparkTableCache.get()``, through reflection: py4j cannot call a static
    method that shares its name with an instance method (``get(String)``)."""
    gateway = spark.sparkContext._gateway
    cls = (
        java("java.lang.Thread", spark._jvm)
        .currentThread()
        .getContextClassLoader()
        .loadClass("org.apache.iceberg.spark.SparkTableCache")
    )
    method = cls.getMethod("get", gateway.new_array(java("java.lang.Class", spark._jvm), 0))
    return method.invoke(None, gateway.new_array(java("java.lang.Object", spark._jvm), 0))


def _kafka_order_id(table: Any) -> int | None:
    """The id of the table's sort order when it is floe's own, ``kafka.partition,
    kafka.offset`` ascending (the order records arrive in); None for any other (a user's)."""
    order = table.sortOrder()
    schema = table.schema()
    wanted = [schema.findField(name).fieldId() for name in ("kafka.partition", "kafka.offset")]
    fields = list(order.fields())
    if [f.sourceId() for f in fields] != wanted or not all(
        f.transform().isIdentity() and f.direction().toString() == "ASC" for f in fields
    ):
        return None
    order_id: int = order.orderId()
    return order_id


@dataclass
class Staged:
    """Data files written by :meth:`BranchCommitter.stage` that no snapshot refers to yet."""

    table: Any  # the Iceberg table (Java) they were written for
    files: list[Any]  # its DataFiles

    def newest_by_partition(self) -> dict[int, int] | None:
        """Per Kafka partition, the newest record timestamp (ms) in the files, read off their
        column bounds (no data read); None when a file's bounds do not say: the table keeps
        no bounds of ``kafka.partition`` or ``kafka.timestamp`` (``write.metadata.metrics``),
        or the file holds records of several partitions."""
        types = java("org.apache.iceberg.types.Types")
        read = java("org.apache.iceberg.types.Conversions").fromByteBuffer
        schema = self.table.schema()
        partition_id = schema.findField("kafka.partition").fieldId()
        timestamp_id = schema.findField("kafka.timestamp").fieldId()
        newest: dict[int, int] = {}
        for data_file in self.files:
            lower, upper = data_file.lowerBounds(), data_file.upperBounds()
            if lower is None or upper is None:
                return None
            low, high, latest = (
                lower.get(partition_id),
                upper.get(partition_id),
                upper.get(timestamp_id),
            )
            if low is None or high is None or latest is None:
                return None
            partition = int(read(types.IntegerType.get(), low))
            if partition != int(read(types.IntegerType.get(), high)):
                return None
            millis = int(read(types.TimestampType.withZone(), latest)) // 1000
            newest[partition] = max(newest.get(partition, millis), millis)
        return newest


class Staging(CommitterTable):
    """Writes a batch's data files for :class:`~.committer.BranchCommitter`, committing nothing."""

    def stage(self, rows: Any, tasks: int | None = None, table: Any = None) -> Staged:
        """Step 3 of an append: writes ``rows``' data files (the table's format, sort order and
        file size) and returns them, committing nothing.  Spark writes them the way Iceberg's
        ``rewrite_data_files`` does: to a file set the table cache names, whose files Iceberg's
        file rewrite coordinator holds for the caller instead of committing them.

        ``tasks``: the rows are read and written by that many tasks (each taking several of
        the Kafka source's partitions, which Spark reads one a task) instead of as they come.
        ``table``: the table (Java) as the rows were decoded for, else as the catalog has it."""
        jvm = self.spark._jvm
        if table is None:
            with step("load_spark_table"):
                table = self._iceberg_table()
        cache = _table_cache(self.spark)
        coordinator = java("org.apache.iceberg.spark.FileRewriteCoordinator", jvm).get()
        file_set = f"floe-{uuid.uuid4().hex}"
        if table.operations().current().formatVersion() >= 3:  # row lineage: new rows have none
            from pyspark.sql import functions as F

            rows = rows.select(
                "*",
                *[
                    F.lit(None).cast("long").alias(name)
                    for name in ("_row_id", "_last_updated_sequence_number")
                ],
            )
        order = _kafka_order_id(table)
        if tasks is not None:
            rows = rows.coalesce(tasks)
            if order is not None:  # (a task's Kafka partitions come in no particular order)
                rows = rows.sortWithinPartitions("kafka.partition", "kafka.offset")
        write = rows.write.format("iceberg").mode("append")
        if order is not None:
            # Each task reads one Kafka partition's offsets in order, and decoding keeps that
            # order: the files are in the table's order without Spark sorting them again.
            # (Without an ordering Iceberg writes one file per table partition a task meets.)
            write = write.option("use-table-distribution-and-ordering", "false").option(
                "output-sort-order-id", str(order)
            )
        cache.add(file_set, table)
        try:
            write.save(file_set)
            files = list(coordinator.fetchNewFiles(table, file_set).toArray())
        finally:
            coordinator.clearRewrite(table, file_set)
            cache.remove(file_set)
        return Staged(table, files)

    def discard(self, staged: Staged) -> None:
        """Deletes staged files that will not be committed (best effort: a file left is an
        orphan, which ``remove_orphan_files`` takes)."""
        io = staged.table.io()
        for data_file in staged.files:
            try:
                io.deleteFile(data_file.location())
            except Exception as error:  # noqa: BLE001
                log.warning(
                    "could not delete uncommitted file %s: %s",
                    data_file.location(),
                    str(error).splitlines()[0][:300],
                )
