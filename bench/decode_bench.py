"""Decoding the value formats: Avro inside the JVM (floe's ``from_avro`` path) against a Python
decoder, and floe's Protobuf path.

Each decodes the same order records (one writer schema), framed in the Confluent wire format
and held in a DataFrame, on local[2], and writes the decoded struct to Spark's ``noop`` sink:

* jvm_from_avro:   floe_sparkapp.decode.frame + decode_framed (from_avro, projection onto the
                   table type)
* jvm_from_avro_unchecked: the same without floe's check of the Avro bytes (AvroCheck, a second
                   walk of each value): what a decoder that checks as it reads could save
* jvm_frame_only:  floe_sparkapp.decode.frame alone (the header read), the cached rows read
                   and written to ``noop``: what every path pays before it decodes
* python_fastavro: mapInArrow with fastavro's schemaless_reader, building the same struct in
                   Arrow
* jvm_protobuf:    floe_sparkapp.decode.frame + decode_framed with the writer's Protobuf plan
                   (floe's JVM decoder on protobuf-java, then the same projection); the same
                   records as Protobuf messages
* python_protobuf: mapInArrow parsing with protobuf's C implementation (upb) in the Python
                   workers, building the same struct in Arrow (the path floe took before its
                   JVM decoder)

Usage: python bench/decode_bench.py [--records N] [--repeat R]
Writes bench/results/decode.json.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from workload import SMALL as SCHEMA  # noqa: E402 - the benchmarks' ~100-byte order records

SCHEMA_ID = 1


def make_values(count: int) -> list[bytes]:
    import fastavro

    parsed = fastavro.parse_schema(SCHEMA)
    header = b"\x00" + SCHEMA_ID.to_bytes(4, "big")
    values = []
    for i in range(count):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(
            buffer,
            parsed,
            {
                "id": i,
                "customer": f"customer-{i % 977}",
                "item": f"item-{i % 131}",
                "quantity": i % 50,
                "price": (i % 10_000) / 100,
                "status": ("NEW", "PAID", "SHIPPED")[i % 3],
                "at": 1_795_000_000_000 + i,
                "note": None if i % 4 else "gift wrap please",
            },
        )
        values.append(header + buffer.getvalue())
    return values


PROTO = """syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";
message Order {
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; }
  int64 id = 1; string customer = 2; string item = 3; int32 quantity = 4; double price = 5;
  Status status = 6; google.protobuf.Timestamp at = 7; optional string note = 8;
}
"""


def protobuf_writer():
    from floe_sparkapp.protobuf_types import compile_schema, message_of
    from floe_sparkapp.schemas import Writer

    descriptor = compile_schema(PROTO)
    message = message_of(descriptor)
    return Writer("PROTOBUF", message.name, descriptor, message.indexes)


def make_protobuf_values(count: int) -> list[bytes]:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    writer = protobuf_writer()
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(writer.descriptor).file:
        pool.Add(file)
    order = message_factory.GetMessageClass(pool.FindMessageTypeByName(writer.schema))
    header = b"\x00" + SCHEMA_ID.to_bytes(4, "big") + b"\x00"
    values = []
    for i in range(count):
        message = order(
            id=i,
            customer=f"customer-{i % 977}",
            item=f"item-{i % 131}",
            quantity=i % 50,
            price=(i % 10_000) / 100,
            status=i % 3,
        )
        message.at.FromMilliseconds(1_795_000_000_000 + i)
        if i % 4 == 0:
            message.note = "gift wrap please"
        values.append(header + message.SerializeToString())
    return values


def jvm_decode(df, value_type):
    from floe_sparkapp.decode import WriterPlan, decode_framed, frame
    from floe_sparkapp.schemas import Writer

    plans = {SCHEMA_ID: WriterPlan(SCHEMA_ID, writer=Writer("AVRO", json.dumps(SCHEMA)))}
    return decode_framed(frame(df), plans, value_type).select("_value", "value_error")


def unchecked_decode(df, value_type):
    """:func:`jvm_decode` without floe's walk of each Avro value (``decode.writers._check``)."""
    from unittest import mock

    from floe_sparkapp.decode import writers

    with mock.patch.object(writers, "_check", lambda framed, writer: None):
        return jvm_decode(df, value_type)


def frame_only(df, value_type):
    from floe_sparkapp.decode import frame

    return frame(df).select("_schema_id", "_frame_error")


def protobuf_decode(df, value_type):
    from floe_sparkapp.decode import WriterPlan, decode_framed, frame

    plans = {SCHEMA_ID: WriterPlan(SCHEMA_ID, writer=protobuf_writer())}
    return decode_framed(frame(df), plans, value_type).select("_value", "value_error")


def in_python(df, value_type, reader):
    """``mapInArrow`` decoding each value in the Python workers with ``reader()`` (made once per
    worker), into the same struct as the JVM paths, the error's text beside it."""
    import pyarrow as pa
    from pyspark.sql import types as T

    out_type = T.StructType(
        [T.StructField("_value", value_type), T.StructField("value_error", T.StringType())]
    )
    arrow_type = pa.schema(
        [
            pa.field(
                "_value",
                pa.struct(
                    [
                        ("id", pa.int64()),
                        ("customer", pa.string()),
                        ("item", pa.string()),
                        ("quantity", pa.int32()),
                        ("price", pa.float64()),
                        ("status", pa.string()),
                        ("at", pa.timestamp("us", tz="UTC")),
                        ("note", pa.string()),
                    ]
                ),
            ),
            pa.field("value_error", pa.string()),
        ]
    )

    def decode(batches):
        read = reader()
        for batch in batches:
            decoded, errors = [], []
            for raw in batch.column("value").to_pylist():
                try:
                    decoded.append(read(raw))
                    errors.append(None)
                except Exception as error:  # noqa: BLE001 - the reason goes to value_error
                    decoded.append(None)
                    errors.append(str(error))
            yield pa.RecordBatch.from_pydict(
                {"_value": decoded, "value_error": errors}, schema=arrow_type
            )

    return df.select("value").mapInArrow(decode, out_type)


def python_protobuf_decode(df, value_type):
    writer = protobuf_writer()
    descriptor, name = writer.descriptor, writer.schema

    def reader():
        import datetime as dt

        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        pool = descriptor_pool.DescriptorPool()
        for file in descriptor_pb2.FileDescriptorSet.FromString(descriptor).file:
            pool.Add(file)
        order = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
        statuses = {v.number: v.name for v in order.DESCRIPTOR.enum_types_by_name["Status"].values}
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

        def read(raw: bytes) -> dict:
            m = order.FromString(raw[6:])
            return {
                "id": m.id,
                "customer": m.customer,
                "item": m.item,
                "quantity": m.quantity,
                "price": m.price,
                "status": statuses[m.status],
                "at": epoch + dt.timedelta(seconds=m.at.seconds, microseconds=m.at.nanos // 1000),
                "note": m.note if m.HasField("note") else None,
            }

        return read

    return in_python(df, value_type, reader)


def python_decode(df, value_type):
    schema_text = json.dumps(SCHEMA)

    def reader():
        import fastavro

        parsed = fastavro.parse_schema(json.loads(schema_text))
        return lambda raw: fastavro.schemaless_reader(io.BytesIO(raw[5:]), parsed)

    return in_python(df, value_type, reader)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql import types as T

    from hack.stack import provision

    jars = provision.spark_jar_list()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this venv's pyarrow
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("floe-decode-bench")
        .config("spark.jars", ",".join(jars))
        .config("spark.driver.memory", "2g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    values = make_values(args.records)
    average = statistics.mean(len(v) for v in values)
    df = spark.createDataFrame([(v,) for v in values], "value binary").repartition(2).cache()
    df.count()
    proto_values = make_protobuf_values(args.records)
    proto_average = statistics.mean(len(v) for v in proto_values)
    proto_df = (
        spark.createDataFrame([(v,) for v in proto_values], "value binary").repartition(2).cache()
    )
    proto_df.count()
    del values, proto_values
    value_type = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("customer", T.StringType()),
            T.StructField("item", T.StringType()),
            T.StructField("quantity", T.IntegerType()),
            T.StructField("price", T.DoubleType()),
            T.StructField("status", T.StringType()),
            T.StructField("at", T.TimestampType()),
            T.StructField("note", T.StringType()),
        ]
    )

    results = {}
    for name, decode, source, kind in (
        ("jvm_from_avro", jvm_decode, df, value_type),
        ("jvm_from_avro_unchecked", unchecked_decode, df, value_type),
        ("jvm_frame_only", frame_only, df, value_type),
        ("python_fastavro", python_decode, df, value_type),
        ("jvm_protobuf", protobuf_decode, proto_df, value_type),
        ("python_protobuf", python_protobuf_decode, proto_df, value_type),
    ):
        decoded = decode(source, kind)
        decoded.write.format("noop").mode("overwrite").save()  # warm-up
        seconds = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            decoded.write.format("noop").mode("overwrite").save()
            seconds.append(time.perf_counter() - started)
        best = min(seconds)
        results[name] = {
            "seconds": [round(s, 3) for s in seconds],
            "rows_per_second": round(args.records / best),
        }
        print(f"{name:24} best {best:6.2f}s  {args.records / best:12,.0f} rows/s")
    spark.stop()

    results["jvm_over_python"] = round(
        results["jvm_from_avro"]["rows_per_second"] / results["python_fastavro"]["rows_per_second"],
        2,
    )

    # Microseconds a row (wall clock on the session's cores): decoding, and floe's check in it.
    def us_a_row(slower: str, faster: str) -> float:
        return round(
            1e6 / results[slower]["rows_per_second"] - 1e6 / results[faster]["rows_per_second"], 3
        )

    results["avro_decode_us_a_row"] = us_a_row("jvm_from_avro", "jvm_frame_only")
    results["avro_check_us_a_row"] = us_a_row("jvm_from_avro", "jvm_from_avro_unchecked")
    results["avro_over_protobuf"] = round(
        results["jvm_from_avro"]["rows_per_second"] / results["jvm_protobuf"]["rows_per_second"], 2
    )
    results["protobuf_jvm_over_python"] = round(
        results["jvm_protobuf"]["rows_per_second"] / results["python_protobuf"]["rows_per_second"],
        2,
    )
    record = {
        "benchmark": "value decode: Avro in the JVM (from_avro) vs Python fastavro; Protobuf "
        "in the JVM (floe's decoder) vs Python (protobuf's C parser)",
        "command": f"python bench/decode_bench.py --records {args.records} --repeat {args.repeat}",
        "records": args.records,
        "average_value_bytes": round(average, 1),
        "average_protobuf_value_bytes": round(proto_average, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "spark": __import__("pyspark").__version__,
        "date": time.strftime("%Y-%m-%d"),
        "results": results,
    }
    out = ROOT / "bench" / "results" / "decode.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(
        f"Avro JVM / Python: {results['jvm_over_python']}x, Protobuf JVM / Python: "
        f"{results['protobuf_jvm_over_python']}x, Avro / Protobuf (JVM): "
        f"{results['avro_over_protobuf']}x  -> {out.relative_to(ROOT)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
