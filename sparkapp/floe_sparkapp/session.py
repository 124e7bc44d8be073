"""The job's Spark session: its catalog, the S3A settings of a checkpoint in the warehouse,
and shuffles sized to its cores."""

from __future__ import annotations

from pyspark.sql import SparkSession

from . import catalog as catalogs
from .config import JobConfig


def spark_catalog_conf(config: JobConfig) -> dict[str, str]:
    conf = catalogs.spark_conf(config.catalog())
    # The job changes the table through PyIceberg too (creation, evolution): never cache it.
    conf[f"spark.sql.catalog.{config.table.catalog.name}.cache-enabled"] = "false"
    return conf


# Every floe session's settings, beside its catalog's.
SESSION_CONF = {
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    "spark.sql.session.timeZone": "UTC",
    # PySpark records, for each column function called, the Python line that called it (a walk
    # of the stack and four py4j round trips each), for the query context of an error: two
    # thirds of the py4j round trips a batch makes to build its plan, none of it for floe.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


def build_session(
    config: JobConfig, name: str | None = None, conf: dict[str, str] | None = None
) -> SparkSession:
    """The job's session (``name``: the application's, else the writer's), with ``conf``
    beside the job's own settings and ``config``'s catalog."""
    builder = SparkSession.builder.appName(name or f"floe {config.writer}")
    for key, value in {**SESSION_CONF, **(conf or {}), **spark_catalog_conf(config)}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    context = spark.sparkContext
    chosen = shuffle_partitions(dict(context.getConf().getAll()), context.defaultParallelism)
    if chosen is not None:
        spark.conf.set(SHUFFLE_PARTITIONS, chosen)
    return spark


def checkpoint_store(spark: SparkSession, config: JobConfig) -> None:
    """Hadoop's S3A reaches a checkpoint in the warehouse's bucket with the catalog's S3
    settings (before the query first opens it: Hadoop caches a bucket's file system)."""
    context = spark.sparkContext
    given = {key for key, _ in context.getConf().getAll()}  # spec.spark.conf among them
    hadoop = context._jsc.hadoopConfiguration()
    for key, value in catalogs.s3a_conf(
        config.catalog(), config.checkpoint_location, given
    ).items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)


SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def shuffle_partitions(conf: dict[str, str], cores: int) -> str | None:
    """The shuffle partitions of a batch's joins and merges, unless the user set them
    (``spec.spark.conf``): the job's cores. Spark's default of 200 is sized for batch jobs over
    large data: a micro-batch's MERGE would run 200 tasks per stage, seconds of each batch.
    On a cluster the executors the job asked for count (they may not have registered when the
    session starts, when Spark's own figure is 2). A checkpoint keeps the value it was made
    with (Spark's offset log), so a query that ran before goes on with its own."""
    if SHUFFLE_PARTITIONS in conf:
        return None
    try:
        asked = int(conf["spark.executor.instances"]) * int(conf.get("spark.executor.cores", "1"))
    except (KeyError, ValueError):
        asked = 0
    return str(max(1, cores, asked))
