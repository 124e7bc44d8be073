"""What an upsert batch of uniform keys pays in a large table: every key of the table read and
probed against the batch's (issue 36's fourth item, the bound of ``upsert_vs_append_50m_rows``).

An upsert batch deletes its keys' old rows (``upsert.py``): Iceberg keeps the data files whose
key bounds may hold one of the batch's keys, and the tasks read the key of each of their rows
and probe it against the batch's keys, broadcast. With keys spread over the whole table, every
file may hold one: the cost is that of reading and probing every key. This measures it alone,
in an Iceberg table of ``--sizes`` rows shaped as floe's (the key ``id`` in the ``value``
struct, beside the same key as a top-level column), written by Spark in ``--files`` files:

- ``read``: the sum of the key over the table (the column read, nothing probed);
- ``probe``: the rows whose key is one of a batch's ``--batch`` keys, drawn evenly from the
  whole key range (a left semi-join with the keys broadcast, as the DELETE's subquery is).

Each for the key in ``value`` (where floe's tables keep it) and at the top level (where a key
column of its own would keep it: Iceberg reads a top-level long vectorized), warm (the median
of ``--rounds`` after a first round). It also says how many of the batch's keys each file holds
on average: a key index (Parquet bloom filters, a file's key bounds) skips only the files that
hold none.

Usage: python bench/key_scan.py [--sizes 10000000,50000000] [--batch 500000] [--files 53]
                                [--rounds 3]
Spark on ``local[2]`` as the other benchmarks run it (the stack started if not running), a
Hadoop catalog in a temporary directory. Writes bench/results/key_scan.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchkit import log, machine  # noqa: E402
from upsert_bench import local_session  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "key_scan.json"


def session(warehouse: Path):
    """The benchmarks' local session (:func:`upsert_bench.local_session`) with a Hadoop catalog
    ``bench`` in ``warehouse``."""
    _, spark = local_session("floe key scan", "2g", 2)
    for key, value in {
        "": "org.apache.iceberg.spark.SparkCatalog",
        ".type": "hadoop",
        ".warehouse": str(warehouse),
    }.items():
        spark.conf.set(f"spark.sql.catalog.bench{key}", value)
    return spark


def timed(action) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def one(spark, rows: int, batch: int, files: int, rounds: int) -> dict:
    from pyspark.sql import functions as F

    table = f"bench.db.keys_{rows}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (key_top bigint, value struct<id: bigint, customer: string,"
        " amount: double, status: string>) USING iceberg"
    )
    log(f"writing {rows:,} rows in {files} files")
    ids = F.col("id")
    (
        spark.range(rows, numPartitions=files)
        .select(
            ids.alias("key_top"),
            F.struct(
                ids.alias("id"),
                F.concat(F.lit("customer-"), (ids % 10_000).cast("string")).alias("customer"),
                (ids % 100_000 / 100).alias("amount"),
                F.lit("shipped").alias("status"),
            ).alias("value"),
        )
        .writeTo(table)
        .append()
    )
    written = spark.sql(f"SELECT count(*) FROM {table}.files").first()[0]
    keys = spark.range(0, rows, max(1, rows // batch)).select(F.col("id").alias("k")).cache()
    batch_keys = keys.count()
    found: dict[str, dict[str, float]] = {}
    for name, column in (("nested", F.col("value.id")), ("top_level", F.col("key_top"))):

        def read(column: Any = column) -> None:  # the loop's column, bound here
            spark.table(table).select(F.sum(column)).collect()

        def probe(column: Any = column) -> None:
            matched = (
                spark.table(table)
                .join(F.broadcast(keys), column == F.col("k"), "left_semi")
                .count()
            )
            assert matched == batch_keys, (matched, batch_keys)

        each: dict[str, list[float]] = {"read": [], "probe": []}
        for round_ in range(rounds + 1):
            for step, action in (("read", read), ("probe", probe)):
                seconds = timed(action)
                if round_:  # the first round warms the JVM
                    each[step].append(seconds)
        found[name] = {step: round(statistics.median(s), 3) for step, s in each.items()}
        found[name].update(
            {
                f"{step}_ns_a_row": round(found[name][step] / rows * 1e9, 1)
                for step in ("read", "probe")
            }
        )
        log(f"{rows:,} rows, key {name}: {found[name]}")
    keys.unpersist()
    spark.sql(f"DROP TABLE {table} PURGE")
    return {
        "rows": rows,
        "data_files": written,
        "batch_keys": batch_keys,
        "batch_keys_a_file": round(batch_keys / written, 1),
        **found,
        "top_level_over_nested_probe": round(
            found["nested"]["probe"] / found["top_level"]["probe"], 2
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000000,50000000")
    parser.add_argument("--batch", type=int, default=500_000)
    parser.add_argument("--files", type=int, default=53)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="floe-key-scan-") as work:
        spark = session(Path(work))
        try:
            runs = [
                one(spark, int(size), args.batch, args.files, args.rounds)
                for size in args.sizes.split(",")
            ]
        finally:
            spark.stop()
    result = {
        "command": " ".join(["python bench/key_scan.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "runs": runs,
    }
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
