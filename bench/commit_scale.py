"""The driver's commit against the number of data files a commit adds (issue 36, scale-out).

For each partition count (``--partitions 8,64,512``) a topic of that many Kafka partitions
holds ``--per-partition`` × ``--batches`` Avro records of about 100 bytes per partition; the
floe job (``bench/consumers.py floe-avro``, a process of its own on ``local[2]``) lands it with
``maxRecordsPerCommit`` = partitions × ``--per-partition``, so each batch reads about
``--per-partition`` records from every partition and its commit adds one data file per Kafka
partition (the table's one day partition).  Per batch, from the job's batch lines and the
table's snapshots: the data files the commit added, the driver's commit (the one metadata
commit: manifest, manifest list, the compare-and-set), the write (the tasks) and the whole
batch; the first batch (a cold JVM) is left out of the medians.

Each batch's driver time by step (the ``steps`` of its batch line: :mod:`floe_sparkapp.steps`)
is kept as medians too (``steps_median``): what the fixed cost of a batch is made of.  With 20
batches or more, the steady batches' (those after the JVM's tenth, its JIT compiler done with
the driver's hot paths: ``benchkit.steady_lines``) are kept apart (``batch_seconds_steady``,
``steps_steady``): what a running job pays a batch, where the early batches' median is what a
job that has just started pays.

Usage: python bench/commit_scale.py [--partitions 8,64,512] [--per-partition 100]
                                    [--batches 6] [--output PATH] [--record]
Needs the local stack (started if not running).  Writes bench/results/commit_scale.json (or
``--output``); ``--record`` (with ``--batches 20`` or more) also writes
``batch_fixed_seconds_800`` (the steady batches' median of the run of 8 partitions × 100
records: a batch of 800 records), with the early batches' median beside it, to
results/latest.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import workload  # noqa: E402
from benchkit import STEADY_AFTER, consume, log, machine, steady_lines, step_medians  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "commit_scale.json"


def one(env: dict[str, str], work: Path, partitions: int, per_partition: int, batches: int) -> dict:
    topic = f"bench-commits-{partitions}-{uuid.uuid4().hex[:6]}"
    bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
    workload.create_topic(bootstrap, topic, partitions)
    schema_id = workload.register(
        env["FLOE_SCHEMA_REGISTRY_URL"], f"{topic}-value", workload.schema_for(100)
    )
    records = partitions * per_partition * batches
    log(f"producing {records:,} values to {topic} ({partitions} partitions)")
    workload.produce(
        bootstrap, topic, workload.value_pool(schema_id, 100), records, partitions=partitions
    )
    result = consume(
        "floe-avro",
        topic,
        work / topic,
        env,
        size=100,
        interval=1,
        max_records_per_commit=partitions * per_partition,
    )
    assert result["rows"] == records, (result["rows"], records)
    lines = result["batch_lines"]
    files = result["data_files_each"]
    warm = lines[1:]

    def median(key: str) -> float:
        return round(statistics.median(line[key] for line in warm), 3)

    return {
        "partitions": partitions,
        "records": records,
        "batches": len(lines),
        "records_per_batch": partitions * per_partition,
        "steps_median": step_medians(warm),
        "data_files_per_commit": round(statistics.median(files[1:] or files)),
        "commit_seconds_median": median("commit_seconds"),
        "write_seconds_median": median("write_seconds"),
        "batch_seconds_median": median("seconds"),
        **(
            {
                "batch_seconds_steady": round(
                    statistics.median(line["seconds"] for line in steady), 3
                ),
                "steps_steady": step_medians(steady),
            }
            if (steady := steady_lines(lines))
            else {}
        ),
        "commit_seconds_each": [line["commit_seconds"] for line in lines],
        "data_files_each": files,
        "rows_per_second": result["rows_per_second"],
    }


def record(entry: dict) -> None:
    """``batch_fixed_seconds_800`` in results/latest.json (with its steps and command), and
    the goal table in bench/README.md."""
    from run import record_latest

    small = [r for r in entry["runs"] if r["records_per_batch"] == 800]
    if not small:
        return
    keys = (
        "partitions",
        "batches",
        "batch_seconds_steady",
        "steps_steady",
        "batch_seconds_median",
        "write_seconds_median",
        "commit_seconds_median",
        "steps_median",
    )
    record_latest(
        {
            "batch_fixed_seconds_800": small[0]["batch_seconds_steady"],
            "batch_fixed_800": {key: small[0][key] for key in keys},
        },
        "batch_fixed_800",
        entry["command"],
        entry["date"],
        entry["machine"],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="8,64,512")
    parser.add_argument("--per-partition", type=int, default=100)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--record",
        action="store_true",
        help="record batch_fixed_seconds_800 in results/latest.json",
    )
    args = parser.parse_args()
    if args.record and args.batches < 2 * STEADY_AFTER:
        parser.error(f"--record needs --batches {2 * STEADY_AFTER} or more (steady batches)")
    from hack import stack as local_stack

    state, _ = local_stack.ensure_up()
    env = local_stack.connection_env(state)
    runs = []
    with tempfile.TemporaryDirectory(prefix="floe-commit-scale-") as scratch:
        for partitions in (int(p) for p in args.partitions.split(",")):
            run = one(env, Path(scratch), partitions, args.per_partition, args.batches)
            log(
                f"{partitions} partitions: {run['data_files_per_commit']} files a commit, "
                f"commit {run['commit_seconds_median']} s, write {run['write_seconds_median']}"
                f" s, batch {run['batch_seconds_median']} s (medians, warm)"
            )
            runs.append(run)
    entry = {
        "command": "python bench/commit_scale.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "runs": runs,
    }
    args.output.write_text(json.dumps(entry, indent=1) + "\n")
    if args.record:
        record(entry)
    print(f"{'partitions':>10} {'files/commit':>12} {'commit s':>9} {'write s':>8} {'batch s':>8}")
    for run in runs:
        print(
            f"{run['partitions']:>10} {run['data_files_per_commit']:>12} "
            f"{run['commit_seconds_median']:>9} {run['write_seconds_median']:>8} "
            f"{run['batch_seconds_median']:>8}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
