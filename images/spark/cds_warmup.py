"""Loads the classes a floe job loads, for the JVM's class-data-sharing archive.

Run by spark-submit with ``-XX:ArchiveClassesAtExit=FILE``: every class this run loads from
Spark's jars is written to FILE, and a JVM started with ``-XX:SharedArchiveFile=FILE`` (and the
same class path) maps them instead of reading, parsing and verifying each again.  A job's
driver and executors, spark-operator's spark-submit and a maintenance run start seconds sooner.

What it runs is what a job does, short of a broker: an Iceberg table in a JDBC (SQLite)
catalog, the Kafka source's classes, records decoded from Avro and JSON, appended by a
streaming query's foreachBatch, merged by key (format version 3: deletion vectors), and read
back.  Then it loads every class named in ``cds_classes.txt`` beside it: what a job's driver and
executor on a cluster load beyond that (the Kubernetes client that makes the executor pods, the
executor's backend, the Kafka consumer, TLS), recorded from their class-loading logs on a node
(``python bench/job_start.py --classes images/spark/cds_classes.txt``); a name a jar no longer
has is skipped.  Usage: ``spark-submit cds_warmup.py DIRECTORY`` (scratch, removed after).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro

AVRO = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "item", "type": "string"},
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
            },
        ],
    }
)


def main(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    spark = (
        SparkSession.builder.appName("floe class-data-sharing warm-up")
        .config(
            "spark.sql.extensions",
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        )
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.catalog.warm", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.warm.catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog")
        .config("spark.sql.catalog.warm.jdbc.schema-version", "V1")
        .config("spark.sql.catalog.warm.cache-enabled", "false")
        .config("spark.sql.catalog.warm.uri", f"jdbc:sqlite:{directory / 'catalog.db'}")
        .config("spark.sql.catalog.warm.warehouse", f"file://{directory / 'warehouse'}")
        .getOrCreate()
    )
    try:
        (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", "127.0.0.1:9")
            .option("subscribe", "warm-up")
            .load()
        )  # the source's classes; never started
        spark.sql("CREATE NAMESPACE IF NOT EXISTS warm.db")
        spark.sql(
            "CREATE TABLE warm.db.orders (id BIGINT, item STRING, price DECIMAL(9,2), "
            "kafka STRUCT<partition: INT, offset: BIGINT, timestamp: TIMESTAMP>, "
            "value_raw BINARY, value_error STRING) USING iceberg "
            "PARTITIONED BY (days(kafka.timestamp)) "
            "TBLPROPERTIES ('format-version'='3', 'write.delete.mode'='merge-on-read', "
            "'write.merge.mode'='merge-on-read', 'write.update.mode'='merge-on-read')"
        )
        records = spark.range(400).select(
            F.col("id").cast("string").cast("binary").alias("key"),
            to_avro(
                F.struct(
                    F.col("id"),
                    F.concat(F.lit("item-"), F.col("id")).alias("item"),
                    (F.col("id") / 100).cast("decimal(9,2)").alias("price"),
                ),
                AVRO,
            ).alias("value"),
            F.to_json(F.struct(F.col("id"), F.lit("x").alias("item"))).alias("json"),
            (F.col("id") % 2).cast("int").alias("partition"),
            F.col("id").alias("offset"),
            F.current_timestamp().alias("timestamp"),
        )
        source = directory / "records"
        records.write.parquet(str(source))

        def land(batch, batch_id: int) -> None:
            decoded = batch.select(
                from_avro("value", AVRO, {"mode": "PERMISSIVE"}).alias("v"),
                F.from_json("json", "id BIGINT, item STRING").alias("j"),
                F.struct("partition", "offset", "timestamp").alias("kafka"),
                "value",
            )
            decoded.select(
                "v.id",
                "v.item",
                "v.price",
                "kafka",
                F.when(F.col("v").isNull(), F.col("value")).alias("value_raw"),
                F.when(F.col("j").isNull(), F.lit("json")).alias("value_error"),
            ).writeTo("warm.db.orders").append()

        query = (
            spark.readStream.schema(records.schema)
            .parquet(str(source))
            .writeStream.foreachBatch(land)
            .trigger(availableNow=True)
            .option("checkpointLocation", str(directory / "checkpoint"))
            .start()
        )
        query.awaitTermination()
        spark.sql(
            "MERGE INTO warm.db.orders t USING (SELECT id, 'changed' AS item FROM "
            "range(50)) s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET t.item = s.item"
        )
        spark.sql("DELETE FROM warm.db.orders WHERE id >= 390")
        spark.table("warm.db.orders").groupBy("item").count().collect()
        spark.sql("SELECT * FROM warm.db.orders.snapshots").collect()
        spark.sql("CALL warm.system.rewrite_data_files(table => 'warm.db.orders')").collect()
        load_listed(spark, Path(__file__).with_name("cds_classes.txt"))
    finally:
        spark.stop()
        shutil.rmtree(directory, ignore_errors=True)


def load_listed(spark: SparkSession, listed: Path) -> None:
    """Loads (without initialising) each class named in ``listed``, one name a line."""
    if not listed.exists():
        return
    jvm = spark.sparkContext._jvm
    loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    names = listed.read_text().split()
    missing = 0
    for name in names:
        try:
            jvm.java.lang.Class.forName(name, False, loader)
        except Exception:  # noqa: BLE001 - not in this class path (another release's jars)
            missing += 1
    print(f"cds warm-up: {len(names) - missing} of {len(names)} listed classes loaded")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
