"""Table rows from decoded Kafka source rows: the Kafka lineage, the key's columns, the raw
fallback and why a row is kept raw."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

KEY_FIELDS, KEY_ERROR = "_key_fields", "_key_error"
# The batch's landing time (:meth:`.table_writer.TableWriter` sets it): the lineage's
# ingest_timestamp; without it, the time of the query
INGESTED = "_floe_ingested"


# Why a record is kept raw, in a few words (:data:`.contract.RAW_REASONS`): each is read off
# the start of ``value_error``, as this package's messages, :mod:`.cdc` and the table
# writer's refused schemas word it.


def raw_reason(error: Column) -> Column:
    """The reason (one of :data:`RAW_REASONS`) of a row kept raw with ``value_error``."""
    return (
        F.when(error.rlike(r"^(key[ :]|(Avro|JSON|Protobuf) key )"), F.lit("key"))
        .when(error.contains("Confluent"), F.lit("not_framed"))
        .when(error.startswith("unknown schema id"), F.lit("unknown_schema"))
        .when(
            error.rlike(r"^(schema id \d+[ :]|value is framed with writer schema id)"),
            F.lit("schema_refused"),
        )
        .when(error.contains(" is malformed: "), F.lit("malformed"))
        .when(
            error.contains("could not be decoded") | error.contains("is not a JSON"),
            F.lit("undecodable"),
        )
        .when(
            error.rlike(r"^(not a Debezium|a truncate|op |a change with|a delete)"),
            F.lit("not_a_change"),
        )
        .otherwise(F.lit("other"))
    )


# Plain JSON of a table whose value columns are inferred, none yet (decode_raw's reason)
NO_COLUMNS_YET = (
    "value is not a JSON object with a field: the table's value columns are "
    "inferred from the first one that is"
)


def decode_raw(df: DataFrame, reason: str | None = None) -> DataFrame:
    """The values' bytes in ``value_raw``; ``reason`` (why they are not decoded) on those that
    are not null."""
    error = (
        F.when(F.col("value").isNotNull(), F.lit(reason)) if reason else F.lit(None).cast("string")
    )
    return (
        df.withColumn("value_raw", F.col("value"))
        .withColumn("value_error", error)
        .withColumn("_schema_id", F.lit(None).cast("int"))
    )


def table_rows(
    df: DataFrame,
    has_value: bool,
    cdc: bool = False,
    key_fields: bool = False,
    op: str | None = None,
) -> DataFrame:
    """Selects the table's columns from decoded Kafka source rows (for ``cdc``, from rows
    made by :func:`.cdc.change_rows`, with the before image a delete is keyed by; with
    ``key_fields``, from rows whose key was decoded too: a record whose key could not be is
    kept raw, the key's reason in ``value_error``; ``op``: the column of each record's operation,
    kept for the upsert, :func:`.upsert.operation_rows`)."""
    if key_fields:
        bad_key = F.col(KEY_ERROR).isNotNull()
        df = df.withColumn(
            "value_error", F.coalesce(F.col("value_error"), F.col(KEY_ERROR))
        ).withColumn("value_raw", F.when(bad_key, F.col("value")).otherwise(F.col("value_raw")))
        for name in ("_value", "_cdc", "_floe_before", op):
            if name in df.columns:
                df = df.withColumn(name, F.when(~bad_key, F.col(name)))
    kafka = F.struct(
        F.col("topic").alias("topic"),
        F.col("partition").alias("partition"),
        F.col("offset").alias("offset"),
        F.col("timestamp").alias("timestamp"),
        F.col("timestampType").alias("timestamp_type"),
        F.col("headers").alias("headers"),
        F.col("_schema_id").alias("schema_id"),
        (F.col(INGESTED) if INGESTED in df.columns else F.current_timestamp()).alias(
            "ingest_timestamp"
        ),
    )
    columns = [kafka.alias("kafka")]
    if cdc:
        columns.append(F.col("_cdc").alias("cdc"))
    columns.append(F.col("key"))
    if key_fields:
        columns.append(F.col(KEY_FIELDS).alias("key_fields"))
    if has_value:
        columns.append(F.col("_value").alias("value"))
    columns += [F.col("value_raw"), F.col("value_error")]
    if cdc:
        columns.append(F.col("_floe_before"))
    if op:
        columns.append(F.col(op))
    return df.select(*columns)
