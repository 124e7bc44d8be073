"""The benchmark runner: measures floe on the local stack against its baselines, each
comparison inside one run, and records the results.

    python bench/run.py [--records 5000000] [--sections ingest,freshness,operator]
                        [--sections backlog --backlog 100:50000000,1000:10000000]

* ingest:    floe (Avro) against the peer, the Apache Iceberg sink on Kafka Connect, and
             against Spark's Kafka source into ``noop`` and into plain Parquet files, a plain
             Python consumer → pyarrow → Parquet loop, and floe with ``format: raw``, on the
             same topic, for values of about 100 bytes and about 1 KB (8 partitions); peak
             memory of each;
* freshness: produce-to-committed-snapshot p50 and p99 at commit intervals of 10 s and 60 s,
             for floe and for the peer, after a warm-up whose records are not measured, with
             commit time over batch time and snapshots and data files per hour;
* metadata:  the job at commit intervals of 10 s and 2 s for an hour each: metadata.json size,
             snapshots kept and commit time per batch over the run (``--no-expiry``: the same
             with snapshots never expired, what the job did before it expired them itself);
* operator:  10, 100 and 500 resources on the real API server (bench/operator_scale.py);
* backlog:   a backlog as users meet it, 50,000,000 records of ~100 B and 10,000,000 of ~1 KB
             (``--backlog``), caught up by floe, the peer and Spark's Parquet file sink, each
             from its start to its last record committed, their steady rates and peak memory
             beside (``backlog_vs_kafka_connect_*``, ``steady_vs_spark_parquet_100b``); not in
             the default sections (about 45 minutes).

Writes ``bench/results/latest.json`` (sections not run keep their previous figures) and the
table in ``bench/README.md``. Needs the local stack (started when not running).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

import workload  # noqa: E402
from benchkit import consume, log, machine, steady_rate, triggers, versions  # noqa: E402

RESULTS = BENCH / "results" / "latest.json"
README = BENCH / "README.md"
SIZES = (100, 1000)
CONSUMERS = ("noop", "spark-parquet", "floe-avro", "floe-raw", "python", "kafka-connect")
PEER_INTERVAL = 10  # the Kafka Connect sink's commit interval in the ingestion runs, seconds


def peak_mib(run: dict[str, Any]) -> int:
    """A consumer's peak memory: its JVM's and its Python process's, MiB."""
    return round((run.get("peak_rss_jvm", 0) + run["peak_rss_python"]) / 2**20)


def topic_runs(
    env: dict[str, str], work: Path, kind: str, size: int, records: int, consumers: tuple[str, ...]
) -> tuple[list[bytes], float, dict[str, dict]]:
    """A new topic of ``records`` Avro values of about ``size`` bytes, read from the beginning
    by each of ``consumers`` in turn: the values, the seconds producing took, each one's
    result."""
    topic = f"bench-{kind}-{size}-{uuid.uuid4().hex[:6]}"
    workload.create_topic(env["FLOE_KAFKA_BOOTSTRAP"], topic)
    schema_id = workload.register(
        env["FLOE_SCHEMA_REGISTRY_URL"], f"{topic}-value", workload.schema_for(size)
    )
    values = workload.value_pool(schema_id, size)
    log(f"producing {records:,} values of ~{size} bytes to {topic}")
    produce_seconds = workload.produce(env["FLOE_KAFKA_BOOTSTRAP"], topic, values, records)
    runs = {
        mode: consume(
            mode,
            topic,
            work / topic,
            env,
            size=size,
            **({"interval": PEER_INTERVAL} if mode == "kafka-connect" else {}),
        )
        for mode in consumers
    }
    return values, produce_seconds, runs


def ingest(env: dict[str, str], records: int, work: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for size in SIZES:
        values, produce_seconds, runs = topic_runs(env, work, "ingest", size, records, CONSUMERS)
        for mode in ("floe-avro", "floe-raw"):
            assert runs[mode]["rows"] == records, (mode, runs[mode]["rows"], records)
        assert runs["floe-avro"]["undecodable"] == 0, runs["floe-avro"]
        floe = runs["floe-avro"]["rows_per_second"]
        # each batch's (rows, seconds): floe's from its batch lines, the Parquet sink's triggers
        timed = {
            mode: [(b["input_rows"], b["seconds"]) for b in runs[mode]["batch_lines"]]
            for mode in ("floe-avro", "floe-raw")
        }
        timed["spark-parquet"] = runs["spark-parquet"]["batch_rows_seconds"]
        paced = {mode: triggers(runs[mode]["batch_lines"]) for mode in ("floe-avro", "floe-raw")}
        paced["spark-parquet"] = timed["spark-parquet"]
        results[f"value_{size}b"] = {
            "records": records,
            "value_bytes_mean": round(sum(map(len, values)) / len(values)),
            "partitions": workload.PARTITIONS,
            "produce_seconds": round(produce_seconds, 1),
            "rows_per_second": {mode: runs[mode]["rows_per_second"] for mode in CONSUMERS},
            "throughput_vs_noop": round(floe / runs["noop"]["rows_per_second"], 3),
            "throughput_vs_python_loop": round(floe / runs["python"]["rows_per_second"], 3),
            "avro_vs_raw": round(floe / runs["floe-raw"]["rows_per_second"], 3),
            "throughput_vs_kafka_connect": round(
                floe / runs["kafka-connect"]["rows_per_second"], 3
            ),
            "throughput_vs_spark_parquet": round(
                floe / runs["spark-parquet"]["rows_per_second"], 3
            ),
            "kafka_connect_commits": runs["kafka-connect"]["commits"],
            "raw_vs_spark_parquet": round(
                runs["floe-raw"]["rows_per_second"] / runs["spark-parquet"]["rows_per_second"], 3
            ),
            "floe_commit_over_batch": round(
                runs["floe-avro"]["commit_seconds"] / runs["floe-avro"]["batch_seconds"], 3
            ),
            "floe_batches": runs["floe-avro"]["batches"],
            "floe_seconds": {
                part: round(runs["floe-avro"][f"{part}_seconds"], 1)
                for part in ("stats", "write", "commit", "batch")
            },
            "floe_wall_seconds": round(runs["floe-avro"]["seconds"], 1),
            # where a run's time goes: the JVM's start, then each batch (the first ones run
            # cold), and the steady rate (the median trigger's rows/s)
            "session_seconds": {
                mode: round(runs[mode]["session_seconds"], 1)
                for mode in CONSUMERS
                if "session_seconds" in runs[mode]
            },
            "batch_seconds_each": {
                mode: [round(s, 2) for _, s in batches] for mode, batches in timed.items()
            },
            "steady_rows_per_second": {mode: steady_rate(each) for mode, each in paced.items()},
            "driver_peak_rss_mib": {mode: peak_mib(runs[mode]) for mode in CONSUMERS},
        }
    return results


BACKLOG = "100:50000000,1000:10000000"  # value bytes : records
BACKLOG_CONSUMERS = ("floe-avro", "kafka-connect", "spark-parquet", "noop", "noop-decoded")
SPARK_SINKS = ("spark-parquet", "noop", "noop-decoded")  # (their triggers are their batches)


def backlog(env: dict[str, str], shape: dict[int, int], work: Path) -> dict[str, Any]:
    """A topic's backlog caught up, as users meet it: for each value size, a topic of that
    many records read from the beginning by floe, the Kafka Connect sink and Spark's Parquet
    file sink, each from its start (the JVM's included) to its last record committed; their
    steady rates (floe's and the file sink's median trigger, the sink's median commit) and
    peak memory beside.  The ceiling beside them: Spark's Kafka source into the ``noop``
    sink, reading only and with floe's decoding (``noop-decoded``): what is left to floe's
    table write and commit is its steady rate over the decoded ceiling's."""
    results: dict[str, Any] = {}
    for size, records in shape.items():
        values, produce_seconds, runs = topic_runs(
            env, work, "backlog", size, records, BACKLOG_CONSUMERS
        )
        floe = runs["floe-avro"]
        assert floe["rows"] == records and floe["undecodable"] == 0, floe
        steady = {
            "floe-avro": steady_rate(triggers(floe["batch_lines"])),
            **{mode: steady_rate(runs[mode]["batch_rows_seconds"]) for mode in SPARK_SINKS},
            "kafka-connect": runs["kafka-connect"].get("steady_rows_per_second"),
        }
        rates = {mode: runs[mode]["rows_per_second"] for mode in BACKLOG_CONSUMERS}
        results[f"value_{size}b"] = {
            "date": time.strftime("%Y-%m-%d"),
            "records": records,
            "value_bytes_mean": round(sum(map(len, values)) / len(values)),
            "partitions": workload.PARTITIONS,
            "produce_seconds": round(produce_seconds, 1),
            "seconds": {mode: round(runs[mode]["seconds"], 1) for mode in BACKLOG_CONSUMERS},
            "rows_per_second": rates,
            "steady_rows_per_second": steady,
            "backlog_vs_kafka_connect": round(rates["floe-avro"] / rates["kafka-connect"], 3),
            "steady_vs_spark_parquet": (
                round(steady["floe-avro"] / steady["spark-parquet"], 3)
                if steady["floe-avro"] and steady["spark-parquet"]
                else None
            ),
            "steady_vs_noop_decoded": (
                round(steady["floe-avro"] / steady["noop-decoded"], 3)
                if steady["floe-avro"] and steady["noop-decoded"]
                else None
            ),
            "kafka_connect_commits": runs["kafka-connect"]["commits"],
            "floe_batches": floe["batches"],
            "peak_rss_mib": {mode: peak_mib(runs[mode]) for mode in BACKLOG_CONSUMERS},
        }
        log(f"backlog {size} B: {results[f'value_{size}b']}")
    return results


def steady_run(
    env: dict[str, str],
    work: Path,
    kind: str,
    interval: int,
    seconds: int,
    rate: int,
    mode: str = "freshness",
    **options: Any,
) -> dict[str, Any]:
    """The floe job on its trigger (``freshness`` consumer; or ``mode``, the peer) over a topic
    of its own while ``rate`` records of ~100 B arrive per second for ``seconds``."""
    topic = f"bench-{kind}-{interval}-{uuid.uuid4().hex[:6]}"
    workload.create_topic(env["FLOE_KAFKA_BOOTSTRAP"], topic)
    schema_id = workload.register(env["FLOE_SCHEMA_REGISTRY_URL"], f"{topic}-value", workload.SMALL)
    log(f"{kind} at a {interval}s commit interval: {rate} records/s for {seconds}s")
    return consume(
        mode,
        topic,
        work / topic,
        env,
        interval=interval,
        seconds=seconds,
        rate=rate,
        schema_id=schema_id,
        size=100,
        **options,
    )


def freshness(
    env: dict[str, str], work: Path, seconds: dict[int, int], rate: int, warmup: int
) -> dict:
    """floe, then the Kafka Connect sink (under ``kafka_connect``), at each interval; the
    records of the first ``warmup`` seconds of each run flow but are not measured."""
    results: dict[str, Any] = {}
    for interval, produce_for in seconds.items():
        # every commit kept: each record's latency needs the snapshot that first held it
        result = steady_run(
            env, work, "fresh", interval, produce_for, rate, expire=0, warmup=warmup
        )
        peer = steady_run(
            env,
            work,
            "fresh-peer",
            interval,
            produce_for,
            rate,
            mode="kafka-connect-freshness",
            warmup=warmup,
        )
        for entry in (result, peer):
            entry["p99_over_interval"] = round(entry["freshness_p99_seconds"] / interval, 3)
            entry["driver_peak_rss_mib"] = peak_mib(entry)
        results[f"interval_{interval}s"] = {**result, "kafka_connect": peer}
        log(
            f"freshness at {interval}s: p50 {result['freshness_p50_seconds']:.1f}s, "
            f"p99 {result['freshness_p99_seconds']:.1f}s; Kafka Connect p50 "
            f"{peer['freshness_p50_seconds']:.1f}s, p99 {peer['freshness_p99_seconds']:.1f}s"
        )
    return results


def metadata(
    env: dict[str, str],
    work: Path,
    seconds: dict[int, int],
    rate: int,
    expire: bool,
    together: bool = False,
) -> dict:
    """The job on its trigger for a long while at short commit intervals: the metadata.json
    each commit rewrites, the snapshots kept and the commit time per batch over the run
    (``expire``: the job expires snapshots as it commits; ``together``: the intervals' jobs
    run at the same time, each a Spark session of its own, which their light load allows)."""

    def one(interval: int) -> dict[str, Any]:
        return steady_run(
            env, work, "meta", interval, seconds[interval], rate, latency=0, expire=int(expire)
        )

    if together:  # each job on its own topic and table, at the same time
        with ThreadPoolExecutor(len(seconds)) as pool:
            found = dict(zip(seconds, pool.map(one, seconds)))
    else:
        found = {interval: one(interval) for interval in seconds}
    results: dict[str, Any] = {}
    for interval, result in found.items():
        result["side_by_side"] = together
        results[f"interval_{interval}s"] = result
        log(
            f"metadata at {interval}s: {result['commits']} commits, metadata.json "
            f"{result['metadata_json_bytes']:,} B, {result['snapshots_kept']} snapshots, "
            f"commit {result['commit_ms_first_tenth']:.0f} → {result['commit_ms_last_tenth']:.0f}"
            f" ms (slope {result['commit_ms_slope_per_hour']:.0f} ms/h)"
        )
    return results


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """The ratios the goals are stated in (1 KB values where a size must be chosen is not
    flattering: the 100-byte figures are used, the per-record costs show most there)."""
    keys: dict[str, Any] = {}
    small = results.get("ingest", {}).get("value_100b")
    if small:
        keys["throughput_vs_noop"] = small["throughput_vs_noop"]
        keys["throughput_vs_python_loop"] = small["throughput_vs_python_loop"]
        keys["avro_vs_raw"] = small["avro_vs_raw"]
        keys["throughput_vs_spark_parquet"] = small.get("throughput_vs_spark_parquet")
    for section, figure in (
        ("ingest", "throughput_vs_kafka_connect"),
        ("backlog", "backlog_vs_kafka_connect"),
    ):
        for size in SIZES:
            found = results.get(section, {}).get(f"value_{size}b", {})
            if figure in found:
                keys[f"{figure}_{size}b"] = found[figure]
    small_backlog = results.get("backlog", {}).get("value_100b", {})
    if small_backlog.get("steady_vs_spark_parquet") is not None:
        keys["steady_vs_spark_parquet_100b"] = small_backlog["steady_vs_spark_parquet"]
    if small_backlog.get("steady_vs_noop_decoded") is not None:
        keys["steady_vs_noop_decoded"] = small_backlog["steady_vs_noop_decoded"]
    for interval in (10, 60):
        found = results.get("freshness", {}).get(f"interval_{interval}s")
        if found:
            keys[f"freshness_p99_over_interval_{interval}s"] = found["p99_over_interval"]
    operator = results.get("operator", {})
    if operator.get("10", {}).get("reconcile_p99_seconds") and operator.get("500", {}).get(
        "reconcile_p99_seconds"
    ):
        keys["operator_p99_500_over_10"] = round(
            operator["500"]["reconcile_p99_seconds"] / operator["10"]["reconcile_p99_seconds"], 3
        )
    return keys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--sections", default="ingest,freshness,operator")
    parser.add_argument("--rate", type=int, default=2000, help="freshness: records per second")
    parser.add_argument(
        "--freshness-seconds",
        default="10:300,60:600",
        help="interval:measured seconds, for each commit interval",
    )
    parser.add_argument(
        "--warmup-seconds",
        type=int,
        default=30,
        help="freshness: seconds of records before the measured ones (the "
        "first batches of a new JVM run cold), for floe and the peer",
    )
    parser.add_argument(
        "--metadata-seconds",
        default="10:3600,2:3600",
        help="metadata: interval:producing seconds, for each commit interval",
    )
    parser.add_argument(
        "--metadata-together",
        action="store_true",
        help="metadata: run the intervals' jobs at the same time",
    )
    parser.add_argument(
        "--metadata-rate", type=int, default=200, help="metadata: records per second"
    )
    parser.add_argument(
        "--no-expiry",
        action="store_true",
        help="metadata: the job never expires snapshots (the before figures)",
    )
    parser.add_argument(
        "--backlog", default=BACKLOG, help="backlog: value bytes:records, for each value size"
    )
    parser.add_argument("--operator-sizes", default="10,100,500")
    parser.add_argument("--operator-timeout", type=float, default=1200)
    args = parser.parse_args()
    sections = args.sections.split(",")

    from hack import stack as local_stack

    state, _ = local_stack.ensure_up()
    env = local_stack.connection_env(state)
    os.environ.update(env)
    work = Path(tempfile.mkdtemp(prefix="floe-bench-"))
    results: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results.setdefault("runs", {})
    command = "python bench/run.py " + " ".join(sys.argv[1:])
    stamp = {
        "command": command.strip(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "versions": versions(),
    }
    if "ingest" in sections:
        results["ingest"] = ingest(env, args.records, work)
        results["runs"]["ingest"] = stamp
    if "backlog" in sections:
        shape = {int(b): int(r) for b, r in (p.split(":") for p in args.backlog.split(","))}
        # the sizes not run this time keep their figures (each with its date)
        results["backlog"] = {**results.get("backlog", {}), **backlog(env, shape, work)}
        results["runs"]["backlog"] = stamp
    if "freshness" in sections:
        plan = {
            int(i): int(s) for i, s in (p.split(":") for p in args.freshness_seconds.split(","))
        }
        # the intervals not run this time keep their figures (each entry says its warm-up)
        results["freshness"] = {
            **results.get("freshness", {}),
            **freshness(env, work, plan, args.rate, args.warmup_seconds),
        }
        results["runs"]["freshness"] = stamp
    if "metadata" in sections:
        plan = {int(i): int(s) for i, s in (p.split(":") for p in args.metadata_seconds.split(","))}
        key = "metadata_without_expiry" if args.no_expiry else "metadata"
        results[key] = metadata(
            env, work, plan, args.metadata_rate, not args.no_expiry, args.metadata_together
        )
        results["runs"][key] = stamp
    if "operator" in sections:
        import operator_scale

        sizes = [int(s) for s in args.operator_sizes.split(",")]
        results["operator"] = operator_scale.run(sizes, env, work, args.operator_timeout)
        results["runs"]["operator"] = stamp
    results.update(headline(results))
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    write_readme(results)
    log(f"wrote {RESULTS.relative_to(ROOT)} and the table in {README.relative_to(ROOT)}")
    return 0


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _goal(value: float | None, goal: float, lower_is_better: bool = False) -> str:
    if value is None:
        return "not measured"
    met = value <= goal if lower_is_better else value >= goal
    return "met" if met else "missed"


def record_latest(
    figures: dict[str, Any],
    run: str,
    command: str,
    date: str,
    machine_info: dict[str, Any] | None = None,
) -> None:
    """Merges ``figures`` into results/latest.json, stamps them as ``runs[run]`` (the
    command, date, machine and versions), and rewrites the goal table in bench/README.md: what
    a benchmark outside :func:`main` records (job_start, upsert_growth, commit_scale)."""
    from benchkit import machine, versions

    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results.update(figures)
    results.setdefault("runs", {})[run] = {
        "command": command,
        "date": date,
        "machine": machine_info or machine(),
        "versions": versions(),
    }
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    write_readme(results)


def write_readme(results: dict[str, Any]) -> None:
    lines = [
        "<!-- latest:start (written by bench/run.py) -->",
        "",
        "| figure | goal | measured | |",
        "|---|---|---|---|",
    ]
    for key, goal, lower in (
        ("throughput_vs_kafka_connect_100b", 1.5, False),
        ("throughput_vs_kafka_connect_1000b", 1.5, False),
        ("throughput_vs_spark_parquet", 0.9, False),
        ("throughput_vs_noop", 0.7, False),
        ("throughput_vs_python_loop", 1.0, False),
        ("avro_vs_raw", 0.8, False),
        ("freshness_p99_over_interval_60s", 1.5, True),
        ("freshness_p99_over_interval_10s", 1.2, True),
        ("operator_p99_500_over_10", 2.0, True),
        # issue 36's goals (bench/README.md says which command makes each)
        ("backlog_vs_kafka_connect_100b", 1.5, False),
        ("backlog_vs_kafka_connect_1000b", 1.5, False),
        ("steady_vs_spark_parquet_100b", 0.8, False),
        ("restart_to_first_commit_seconds", 15, True),
        ("upsert_vs_append_50m_rows", 0.5, False),
        # issue 56's (bench/commit_scale.py --partitions 8 --record)
        ("batch_fixed_seconds_800", 0.9, True),
    ):
        value = results.get(key)
        sign = "≤" if lower else "≥"
        lines.append(
            f"| `{key}` | {sign} {goal} | {value if value is not None else '-'} | "
            f"{_goal(value, goal, lower)} |"
        )
    ingest = results.get("ingest", {})
    if ingest:
        lines += [
            "",
            "Ingestion, rows/s (8 partitions, records as produced):",
            "",
            "| values | floe (Avro) | Kafka Connect Iceberg sink | Spark Kafka → noop "
            "| Spark Kafka → Parquet files | Python loop | floe (raw) "
            "| floe commit / batch time | peak RSS, floe driver / Connect worker |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for entry in sorted(ingest.values(), key=lambda e: e["value_bytes_mean"]):
            r = entry["rows_per_second"]
            rss = entry["driver_peak_rss_mib"]
            lines.append(
                f"| {entry['records']:,} × ~{entry['value_bytes_mean']} B | "
                f"{r['floe-avro']:,} | {r.get('kafka-connect', 0):,} | {r['noop']:,} | "
                f"{r.get('spark-parquet', 0):,} | {r['python']:,} | "
                f"{r['floe-raw']:,} | {entry['floe_commit_over_batch']} | "
                f"{rss['floe-avro']} / {rss.get('kafka-connect', '-')} MiB |"
            )
        timed = [e for e in ingest.values() if "steady_rows_per_second" in e]
        if timed:
            lines += [
                "",
                "Where an ingestion run's time goes: the JVM's start, then each "
                "batch of 500,000 records (floe's from its batch line, the Parquet sink's "
                "trigger); steady is the median trigger's rows/s, Spark's planning of "
                "each included:",
                "",
                "| values | consumer | whole run | JVM start | batches, s | steady |",
                "|---|---|---|---|---|---|",
            ]
            for entry in sorted(timed, key=lambda e: e["value_bytes_mean"]):
                for mode in ("floe-avro", "floe-raw", "spark-parquet"):
                    each = entry["batch_seconds_each"][mode]
                    lines.append(
                        f"| ~{entry['value_bytes_mean']} B | {mode} | "
                        f"{entry['rows_per_second'][mode]:,} rows/s | "
                        f"{entry['session_seconds'].get(mode, 0):.1f} s | "
                        f"{' '.join(f'{s:.1f}' for s in each)} | "
                        f"{entry['steady_rows_per_second'][mode] or 0:,} rows/s |"
                    )
    fresh = results.get("freshness", {})
    if fresh:
        lines += [
            "",
            "Freshness (produce → visible in a committed snapshot) and commit cost; "
            "the records of a run's warm-up flow but are not measured:",
            "",
            "| commit interval | rate, warm-up | sink | p50 | p99 | p99 / interval | "
            "batch mean | commit / batch time | snapshots/h | data files/h | peak RSS |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for entry in fresh.values():
            lines.append(
                f"| {entry['interval_seconds']} s | {entry['rate']}/s, "
                f"{entry.get('warmup_seconds', 0)} s | floe | "
                f"{entry['freshness_p50_seconds']:.1f} s | {entry['freshness_p99_seconds']:.1f} s "
                f"| {entry['p99_over_interval']} | {entry['batch_seconds_mean']:.1f} s | "
                f"{entry['commit_over_batch']:.2f} | {entry['snapshots_per_hour']:.0f} | "
                f"{entry['data_files_per_hour']:.0f} | {entry['driver_peak_rss_mib']} MiB |"
            )
            peer = entry.get("kafka_connect")
            if peer:
                lines.append(
                    f"| | | Kafka Connect | {peer['freshness_p50_seconds']:.1f} s | "
                    f"{peer['freshness_p99_seconds']:.1f} s | {peer['p99_over_interval']} | - | - "
                    f"| {peer['snapshots_per_hour']:.0f} | "
                    f"{_count(peer.get('data_files_per_hour'))} | "
                    f"{peer['driver_peak_rss_mib']} MiB |"
                )
    runs = [
        (label, entry)
        for key, label in (
            ("metadata_without_expiry", "never expired"),
            ("metadata", "expired as the job commits"),
        )
        for entry in results.get(key, {}).values()
    ]
    if runs:
        lines += [
            "",
            "Metadata at short commit intervals (the job on its trigger, commit time "
            "per batch over the run):",
            "",
            "| commit interval | snapshots | run | commits | metadata.json | snapshots kept"
            " | commit, first tenth | commit, last tenth | slope | expiry per batch |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for label, entry in sorted(runs, key=lambda r: (-r[1]["interval_seconds"], r[0])):
            lines.append(
                f"| {entry['interval_seconds']} s | {label} | "
                f"{entry['producing_seconds'] / 60:.0f} min"
                f"{' (side by side)' if entry.get('side_by_side') else ''} | {entry['commits']} | "
                f"{entry['metadata_json_bytes'] / 1024:,.0f} KiB | {entry['snapshots_kept']} | "
                f"{entry['commit_ms_first_tenth']:.0f} ms | {entry['commit_ms_last_tenth']:.0f} ms"
                f" | {entry['commit_ms_slope_per_hour']:+.0f} ms/h | "
                f"{entry['expire_seconds_mean'] * 1000:.0f} ms |"
            )
    operator = {k: v for k, v in results.get("operator", {}).items() if k.isdigit()}
    if operator:
        lines += [
            "",
            "Operator on the real API server (SparkApplications not executed):",
            "",
            "| resources | all steady | create → steady p99 | reconcile p50 | "
            "reconcile p99 | idle visits /resource/min | idle API requests /resource/min "
            "| operator RSS |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for size, entry in operator.items():

            def seconds(value):
                return "-" if value is None else f"{value:.2f} s"

            lines.append(
                f"| {size} | {seconds(entry['all_steady_seconds'])} "
                f"({entry['steady']}/{entry['resources']}) | "
                f"{seconds(entry['create_to_steady_p99_seconds'])} | "
                f"{seconds(entry['reconcile_p50_seconds'])} | "
                f"{seconds(entry['reconcile_p99_seconds'])} | "
                f"{entry['idle_visits_per_resource_per_minute']} | "
                f"{entry['idle_api_requests_per_resource_per_minute']} | "
                f"{(entry['operator_rss_bytes'] or 0) // 2**20} MiB |"
            )
    backlog_runs = results.get("backlog", {})
    if backlog_runs:
        lines += [
            "",
            "A backlog caught up (8 partitions, from each consumer's start to its last "
            "record committed; steady: the median trigger's or commit's rows/s):",
            "",
            "| values | floe (Avro) | Kafka Connect Iceberg sink | Spark Kafka → Parquet "
            "files | floe / sink | floe steady / Parquet steady | peak RSS, floe / "
            "sink / Parquet |",
            "|---|---|---|---|---|---|---|",
        ]

        def both(entry: dict[str, Any], mode: str) -> str:
            r, st = entry["rows_per_second"], entry["steady_rows_per_second"]
            return (
                f"{r[mode]:,} rows/s ({entry['seconds'][mode]:.0f} s), steady "
                f"{'-' if st.get(mode) is None else f'{st[mode]:,}'}"
            )

        for entry in sorted(backlog_runs.values(), key=lambda e: e["value_bytes_mean"]):
            rss = entry["peak_rss_mib"]
            lines.append(
                f"| {entry['records']:,} × ~{entry['value_bytes_mean']} B | "
                f"{both(entry, 'floe-avro')} | {both(entry, 'kafka-connect')} | "
                f"{both(entry, 'spark-parquet')} | {entry['backlog_vs_kafka_connect']} | "
                f"{entry['steady_vs_spark_parquet']} | {rss['floe-avro']} / "
                f"{rss['kafka-connect']} / {rss['spark-parquet']} MiB |"
            )
    restart = results.get("restart")
    if restart:
        lines += [
            "",
            "A restart on the node, from the SparkApplication's creation to its first "
            "commit (medians; `bench/job_start.py --node`, see Job starts):",
            "",
            "| to first commit | submit | pod | launch | session | tables | first batch "
            "| restarts |",
            "|---|---|---|---|---|---|---|---|",
            f"| {restart['seconds']:.1f} s | {restart['submit']:.1f} s | "
            f"{restart['pod']:.1f} s | {restart['launch']:.1f} s | "
            f"{restart['session']:.1f} s | {restart['tables']:.1f} s | "
            f"{restart['first_batch']:.1f} s | {restart['starts']} |",
        ]
    lines += [""]
    for section, stamp in sorted(results.get("runs", {}).items()):
        m = stamp["machine"]
        lines.append(
            f"- {section}: `{stamp['command']}` on {stamp['date']}, {m['cpus']} × "
            f"{m['cpu']}, {m['memory_gib']} GiB, Python {m['python']}, "
            f"Spark {m['spark']}, Kafka {stamp['versions']['kafka']}, "
            f"Iceberg {stamp['versions']['iceberg']}"
        )
    lines += ["", "<!-- latest:end -->"]
    text = README.read_text()
    block = "\n".join(lines)
    if "<!-- latest:start" in text:
        text = re.sub(r"<!-- latest:start.*?<!-- latest:end -->", lambda _: block, text, flags=re.S)
    else:
        text = text.replace("\n## ", f"\n## Against the baselines\n\n{block}\n\n## ", 1)
    README.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
