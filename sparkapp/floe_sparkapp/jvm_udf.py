"""floe's own Spark UDFs and aggregates, written in Java (``sparkapp/jvm``, built into
``floe-jvm.jar``): made in the driver's JVM through py4j and applied to columns.

Each Java class binds itself to Spark's typed ``UDF1`` overload (``asUdf()``): py4j's choice
among ``functions.udf``'s overloads may land on the untyped Scala one, which Spark refuses.
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

from pyspark.sql import Column
from pyspark.sql import functions as F


def jvm() -> Any:
    """The driver's JVM view (py4j)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    assert context is not None, "no active Spark session"
    return context._jvm


# The Java classes looked up, per JVM view (a gateway made again has a view of its own)
_classes: WeakKeyDictionary[Any, dict[str, Any]] = WeakKeyDictionary()


def java(name: str, view: Any = None) -> Any:
    """The Java class ``name`` (fully qualified, ``org.apache.iceberg.spark.Spark3Util``) in
    the driver's JVM (or in ``view``), looked up once.  py4j resolves ``jvm.org.apache.x.Y``
    one name at a time, and each prefix that is not a class (``org``, ``org.apache``, ...) is
    a class lookup that fails only after searching every jar on Spark's class path: a few
    milliseconds each, every batch.  The full name is one lookup, and then none."""
    view = jvm() if view is None else view
    known = _classes.setdefault(view, {})
    found = known.get(name)
    if found is None:
        found = known[name] = getattr(view, name)
    return found


def make(class_name: str, *args: Any) -> Any:
    """An instance of floe's Java class ``class_name``."""
    found = java(class_name)
    try:
        return found(*args)
    except TypeError:  # py4j: the class is not on the classpath
        raise RuntimeError(
            f"{class_name} is not on Spark's classpath: add floe-jvm.jar (built "
            "from sparkapp/jvm) to spark.jars"
        ) from None


def apply(udf_maker: Any, *columns: Column) -> Column:
    """``udf_maker.asUdf()`` applied to ``columns``."""
    from pyspark import SparkContext
    from pyspark.sql.classic.column import Column as JvmColumn
    from pyspark.sql.classic.column import _to_java_column, _to_seq

    context = SparkContext._active_spark_context
    assert context is not None  # columns are applied in a running session
    return JvmColumn(udf_maker.asUdf().apply(_to_seq(context, list(columns), _to_java_column)))


def avro_check(framed: Column, writer_schema: str) -> Column:
    """``dev.floe.check.AvroCheck`` of ``framed`` (header included): a struct of ``error``
    (why Avro's decoder would read something else than was written) and ``trailing`` (the
    bytes after the value)."""
    return apply(make("dev.floe.check.AvroCheck", writer_schema), framed)


def json_check(value: Column, offset: int) -> Column:
    """``dev.floe.check.JsonCheck`` of ``value`` after ``offset`` bytes of framing: a struct of
    ``error`` (not UTF-8) and ``trailing`` (1 when more follows the document)."""
    return apply(make("dev.floe.check.JsonCheck", offset), value)


def newest_by_partition(partition: Column, millis: Column) -> Column:
    """``dev.floe.count.NewestByPartition``: an aggregate of the newest ``millis`` per
    ``partition``, as the text ``partition:millis,...`` (:func:`parse_newest`)."""
    return apply(make("dev.floe.count.NewestByPartition"), partition, millis)


def ingest_time(micros: int) -> Column:
    """``dev.floe.lineage.IngestTime``: the timestamp ``micros`` (a batch's landing time) as a
    function of no column, so the code Spark generates for a batch's plan is the same from one
    batch to the next (a literal is inlined into it, and each new value compiled anew)."""
    return F.timestamp_micros(apply(make("dev.floe.lineage.IngestTime", micros)))


def parse_newest(text: str | None) -> dict[int, int]:
    """What :func:`newest_by_partition` found: the newest timestamp (ms) per partition."""
    return {
        int(p): int(m) for p, m in (pair.split(":") for pair in (text or "").split(",") if pair)
    }
