"""Before and after a change: the floe job's ingestion of one topic, by two revisions of the
code, in turns, in one run on the same machine.

    python bench/ab.py BEFORE AFTER [--records 5000000] [--size 100] [--rounds 2]
                                    [--partitions 4] [--per-commit N] [--interval S]
                                    [--jvm-before OPTIONS] [--jvm-after OPTIONS]

BEFORE and AFTER are git revisions; each is checked out in a worktree of its own and runs its
own ``bench/consumers.py floe-avro`` (its own job, its own config format) on the same topic, one
after the other, ``--rounds`` times each, alternating, so that a machine getting busier or a
warmer page cache does not favour one. Each run reads the whole topic from the beginning into a
new table (``available_now``), as ``bench/run.py``'s ingestion does. Rows/s is over the run
(the JVM's start included); the steady rate is the median of its triggers', as
``bench/run.py`` counts it; the CPU a row is the CPU seconds the run's processes used (its
Python and JVM, sampled while they run) over its rows, which a busy neighbour on a shared machine
moves less than either rate. The result goes to
``bench/results/ab.jsonl`` (one line per comparison) with the command and the machine.

Each run also keeps its batches' median time and their driver time by step (the ``steps`` of the
job's batch lines, the first batch, a cold JVM's, left out): with ``--per-commit 800
--partitions 8 --interval 1``, the fixed cost of a small batch, as ``bench/commit_scale.py``
measures it.

``--jvm-before`` / ``--jvm-after`` add JVM options to that side's driver (``SPARK_SUBMIT_OPTS``,
after the stack's class-data-sharing archive): a JVM setting measured alone, BEFORE and AFTER
then being the same revision.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import workload  # noqa: E402
from benchkit import (  # noqa: E402
    log,
    machine,
    steady_lines,
    steady_rate,
    step_medians,
    triggers,
    worktree,
)
from consumers import cpu_seconds  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "ab.jsonl"


def _descendants(pid: int) -> set[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            parents.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found.update(children)
        todo.extend(children)
    return found


def batch_medians(lines: list[dict]) -> dict[str, Any]:
    """The warm batches' median seconds and driver seconds by step (the first batch left out),
    and those of the steady batches (:func:`benchkit.steady_lines`) when the run has them."""
    warm = lines[1:] or lines
    if not warm:
        return {}
    steps = step_medians(warm)
    steady = steady_lines(lines)
    return {
        "batches": len(lines),
        "batch_seconds_median": round(statistics.median(line["seconds"] for line in warm), 3),
        **({"steps_median": steps} if steps else {}),
        **(
            {
                "batch_seconds_steady": round(
                    statistics.median(line["seconds"] for line in steady), 3
                ),
                "steps_steady": step_medians(steady),
            }
            if steady
            else {}
        ),
    }


def run_floe(
    tree: Path,
    topic: str,
    work: Path,
    env: dict[str, str],
    size: int,
    options: dict[str, Any] | None = None,
) -> dict:
    """One run of ``tree``'s floe job over the topic; its result, as bench/consumers.py says,
    with the CPU seconds its processes used (the driver's Python and JVM, sampled every half
    second while they run: a figure that noisy neighbours on a shared machine move less than
    the wall clock)."""
    work.mkdir(parents=True)
    command = [
        sys.executable,
        str(tree / "bench" / "consumers.py"),
        "floe-avro",
        "--topic",
        topic,
        "--work",
        str(work),
        "--size",
        str(size),
    ]
    for key, value in (options or {}).items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    path = os.pathsep.join(str(tree / part) for part in ("operator", "sparkapp", "."))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=err,
            text=True,
            cwd=tree,
            env={**os.environ, **env, "PYTHONPATH": path},
        )
        used: dict[int, float] = {}
        while process.poll() is None:
            for pid in {process.pid} | _descendants(process.pid):
                seconds = cpu_seconds(pid)
                if seconds is not None:
                    used[pid] = seconds
            time.sleep(0.5)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    (work / "run.log").write_text(stdout + stderr)
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"{tree.name} failed ({process.returncode}):\n{stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT ") :])
    return {
        "rows": result["rows"],
        "seconds": round(result["seconds"], 2),
        "rows_per_second": round(result["rows"] / result["seconds"]),
        "steady_rows_per_second": steady_rate(triggers(result["batch_lines"])),
        "cpu_seconds": round(sum(used.values()), 1),
        "cpu_microseconds_per_row": round(sum(used.values()) / result["rows"] * 1e6, 2),
        **batch_medians(result["batch_lines"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--size", type=int, default=100, help="value size, bytes")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=workload.PARTITIONS)
    parser.add_argument("--per-commit", type=int, help="maxRecordsPerCommit (the job's default)")
    parser.add_argument("--interval", type=int, help="commit interval, seconds")
    parser.add_argument("--jvm-before", default="")
    parser.add_argument("--jvm-after", default="")
    args = parser.parse_args()

    from hack import stack

    state, _ = stack.ensure_up()
    env = stack.connection_env(state)
    revisions = {
        name: subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", rev],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        for name, rev in (("before", args.before), ("after", args.after))
    }
    scratch = Path(tempfile.mkdtemp(prefix="floe-ab-"))
    trees = {name: worktree(rev, scratch, name) for name, rev in revisions.items()}
    jvm = {
        name: {"SPARK_SUBMIT_OPTS": f"{env.get('SPARK_SUBMIT_OPTS', '')} {options}".strip()}
        for name, options in (("before", args.jvm_before), ("after", args.jvm_after))
    }
    try:
        topic = f"bench-ab-{args.size}-{uuid.uuid4().hex[:6]}"
        workload.create_topic(env["FLOE_KAFKA_BOOTSTRAP"], topic, args.partitions)
        schema_id = workload.register(
            env["FLOE_SCHEMA_REGISTRY_URL"], f"{topic}-value", workload.schema_for(args.size)
        )
        log(f"producing {args.records:,} values of ~{args.size} bytes to {topic}")
        workload.produce(
            env["FLOE_KAFKA_BOOTSTRAP"],
            topic,
            workload.value_pool(schema_id, args.size),
            args.records,
            partitions=args.partitions,
        )
        job_options = {
            key: value
            for key, value in (
                ("max_records_per_commit", args.per_commit),
                ("interval", args.interval),
            )
            if value
        }
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        for turn in range(args.rounds):
            order = ("before", "after") if turn % 2 == 0 else ("after", "before")
            for name in order:
                result = run_floe(
                    trees[name],
                    topic,
                    scratch / f"{name}-{turn}",
                    {**env, **jvm[name]},
                    args.size,
                    job_options,
                )
                assert result["rows"] == args.records, (name, result)
                runs[name].append(result)
                log(
                    f"{name} ({revisions[name]}), round {turn + 1}: "
                    f"{result['rows_per_second']:,} rows/s, steady "
                    f"{result['steady_rows_per_second']:,}, "
                    f"{result['cpu_microseconds_per_row']} CPU µs a row, batch "
                    f"{result.get('batch_seconds_median')} s (median), "
                    f"{result.get('batch_seconds_steady')} s (steady)"
                )
    finally:
        for tree in trees.values():
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                capture_output=True,
            )
    summary = {
        name: {
            "revision": revisions[name],
            **({"jvm": options} if (options := getattr(args, f"jvm_{name}")) else {}),
            "rows_per_second": round(statistics.median(r["rows_per_second"] for r in results)),
            "steady_rows_per_second": round(
                statistics.median(
                    [r["steady_rows_per_second"] for r in results if r["steady_rows_per_second"]]
                    or [0]
                )
            ),
            "cpu_microseconds_per_row": statistics.median(
                r["cpu_microseconds_per_row"] for r in results
            ),
            "batch_seconds_median": statistics.median(r["batch_seconds_median"] for r in results),
            **(
                {"batch_seconds_steady": statistics.median(steady)}
                if (
                    steady := [
                        r["batch_seconds_steady"] for r in results if "batch_seconds_steady" in r
                    ]
                )
                else {}
            ),
            "runs": results,
        }
        for name, results in runs.items()
    }
    ratio = summary["after"]["rows_per_second"] / summary["before"]["rows_per_second"]
    steady = summary["after"]["steady_rows_per_second"] / (
        summary["before"]["steady_rows_per_second"] or float("nan")
    )
    entry = {
        "command": "python bench/ab.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "records": args.records,
        "size": args.size,
        **summary,
        "after_over_before": round(ratio, 3),
        "steady_after_over_before": round(steady, 3),
        "cpu_after_over_before": round(
            summary["after"]["cpu_microseconds_per_row"]
            / summary["before"]["cpu_microseconds_per_row"],
            3,
        ),
        "batch_after_over_before": round(
            summary["after"]["batch_seconds_median"] / summary["before"]["batch_seconds_median"], 3
        ),
        **(
            {
                "batch_steady_after_over_before": round(
                    summary["after"]["batch_seconds_steady"]
                    / summary["before"]["batch_seconds_steady"],
                    3,
                )
            }
            if all("batch_seconds_steady" in summary[name] for name in summary)
            else {}
        ),
        **({"partitions": args.partitions} if args.partitions != workload.PARTITIONS else {}),
        **job_options,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    with RESULTS.open("a") as out:
        out.write(json.dumps(entry) + "\n")
    log(
        f"after/before: {ratio:.3f} over the run, {steady:.3f} steady, "
        f"{entry['cpu_after_over_before']:.3f} in CPU a row, "
        f"{entry['batch_after_over_before']:.3f} a batch (median), "
        f"{entry.get('batch_steady_after_over_before')} a steady batch"
    )
    print(json.dumps(entry, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
