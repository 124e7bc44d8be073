"""The rows a repair selects: kept raw and within the request's filters, in chunks of one
Kafka partition, read back as the Kafka records they were decoded from."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..batch_write import undecodable
from ..contract import RepairSpec
from ..decode import frame, raw_reason


def _timestamp(text: str) -> Any:
    return F.to_timestamp(F.lit(text.replace("Z", "+00:00")))


def selection(rows: DataFrame, spec: RepairSpec) -> DataFrame:
    """The rows the request selects: kept raw (their value undecoded), and within its
    filters."""
    chosen = rows.filter(undecodable(rows) & F.col("value_raw").isNotNull())
    return within(chosen, spec, F.col("value_error"), F.col("kafka.schema_id"), "kafka.")


def within(
    rows: DataFrame, spec: RepairSpec, error: Any = None, schema_id: Any = None, lineage: str = ""
) -> DataFrame:
    """``rows`` within the request's filters: table rows (``lineage`` ``kafka.``) or Kafka
    records (dead letters: their error and schema id found here when not given)."""
    error = F.col("_dead_letter_error") if error is None else error
    if spec.reasons:
        rows = rows.filter(raw_reason(error).isin(*spec.reasons))
    if spec.schema_ids:
        if schema_id is None:
            rows = frame(rows)
            schema_id = F.col("_schema_id")
        rows = rows.filter(schema_id.isin(*spec.schema_ids))
        if "_schema_id" in rows.columns and not lineage:
            rows = rows.drop("_schema_id", "_frame_error")
    if spec.partitions:
        rows = rows.filter(F.col(f"{lineage}partition").isin(*spec.partitions))
    if spec.from_offset is not None:
        rows = rows.filter(F.col(f"{lineage}offset") >= spec.from_offset)
    if spec.to_offset is not None:
        rows = rows.filter(F.col(f"{lineage}offset") < spec.to_offset)
    if spec.from_time is not None:
        rows = rows.filter(F.col(f"{lineage}timestamp") >= _timestamp(spec.from_time))
    if spec.to_time is not None:
        rows = rows.filter(F.col(f"{lineage}timestamp") < _timestamp(spec.to_time))
    return rows


def chunks(selected: DataFrame, size: int) -> list[tuple[int, int, int, int]]:
    """The selected rows in chunks of at most ``size`` rows of one partition, in offset order:
    ``(partition, first offset, last offset, rows)``."""
    order = Window.partitionBy("p").orderBy("o")
    numbered = selected.select(
        F.col("kafka.partition").alias("p"), F.col("kafka.offset").alias("o")
    ).withColumn("chunk", F.floor((F.row_number().over(order) - 1) / size))
    found = (
        numbered.groupBy("p", "chunk")
        .agg(F.min("o").alias("lo"), F.max("o").alias("hi"), F.count(F.lit(1)).alias("n"))
        .orderBy("p", "chunk")
        .collect()
    )
    return [(int(r["p"]), int(r["lo"]), int(r["hi"]), int(r["n"])) for r in found]


def as_records(rows: DataFrame) -> DataFrame:
    """Table rows read back as the Kafka source rows they were decoded from."""
    return rows.select(
        F.col("key"),
        F.col("value_raw").alias("value"),
        F.col("kafka.topic").alias("topic"),
        F.col("kafka.partition").alias("partition"),
        F.col("kafka.offset").alias("offset"),
        F.col("kafka.timestamp").alias("timestamp"),
        F.col("kafka.timestamp_type").alias("timestampType"),
        F.col("kafka.headers").alias("headers"),
    )
