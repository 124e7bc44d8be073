"""The table a committer commits to: its name in the catalog, its writer and branch, and the
table itself through Iceberg's Java API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..jvm_udf import java
from ..ledger import MAIN


@dataclass
class CommitterTable:
    """What :class:`~.committer.BranchCommitter`'s parts share: the table's name, the writer,
    the branch commits go to, and the table as the catalog has it."""

    spark: Any
    catalog_name: str
    identifier: str
    writer: str
    ref: str = MAIN  # the branch commits go to: main, or the resource's table.branch

    def _sql(self, statement: str) -> Any:
        return self.spark.sql(statement)

    @property
    def table_ref(self) -> str:
        return f"{self.catalog_name}.{self.identifier}"

    def load(self) -> Any:
        """The table (its ref) through Iceberg's Java API, as the catalog has it now."""
        return self._iceberg_table()

    def spark_schema(self, table: Any) -> Any:
        """The Spark schema of ``table`` (Java), as ``spark.table(...).schema`` gives it."""
        import json

        from pyspark.sql.types import StructType

        converted = java("org.apache.iceberg.spark.SparkSchemaUtil", self.spark._jvm).convert(
            table.schema()
        )
        return StructType.fromJson(json.loads(converted.json()))

    def _iceberg_table(self) -> Any:
        jvm, session = self.spark._jvm, self.spark._jsparkSession
        # The catalogs are the active session's: a thread other than the one that made the
        # session (the job's start, run in a thread) has none until it is made active there.
        java("org.apache.spark.sql.SparkSession", jvm).setActiveSession(session)
        return java("org.apache.iceberg.spark.Spark3Util", jvm).loadIcebergTable(
            session, self.table_ref
        )
