"""What the benchmarks share, below every one of them: the log line, the machine and the
versions a result is recorded with, a consumer run in a process of its own, a floe run's
triggers and steady rate, a revision checked out beside the tree.  ``run.py`` (all the
sections), ``ab.py`` and the single benchmarks take these from here, so none imports another
for them."""

from __future__ import annotations

import itertools
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def consume(mode: str, topic: str, work: Path, env: dict[str, str], **options: Any) -> dict:
    """Runs one consumer in a process of its own; its JSON result."""
    command = [
        sys.executable,
        str(BENCH / "consumers.py"),
        mode,
        "--topic",
        topic,
        "--work",
        str(work / mode),
    ]
    for key, value in options.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    (work / mode).mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True)
    (work / f"{mode}.log").write_text(done.stdout + done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{mode} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT ") :])
    if "seconds" in result:
        result["rows_per_second"] = round(result["rows"] / result["seconds"])
        log(
            f"{mode} on {topic}: {result['rows']} rows in {result['seconds']:.1f}s = "
            f"{result['rows_per_second']:,} rows/s"
        )
    return result


def triggers(lines: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """A floe run's triggers from its batch lines: each batch's rows over the time since the
    previous batch ended, Spark's planning of the trigger included (as in its
    ``triggerExecution``, which the other Spark consumers are timed by)."""
    return [
        (line["input_rows"], line["at"] - before["at"])
        for before, line in itertools.pairwise(lines)
    ]


def step_medians(warm: list[dict[str, Any]]) -> dict[str, float]:
    """The median seconds of each driver step over a run's warm batch lines (their ``steps``),
    and of the batch's time outside every step, the longest first; empty when the lines have
    no steps (a job from before they were logged)."""
    import statistics

    names = sorted({name for line in warm for name in line.get("steps", {})})
    if not names:
        return {}
    found = {
        name: round(statistics.median(line.get("steps", {}).get(name, 0.0) for line in warm), 3)
        for name in names
    }
    found["outside_steps"] = round(
        statistics.median(line["seconds"] - sum(line.get("steps", {}).values()) for line in warm), 3
    )
    return dict(sorted(found.items(), key=lambda item: -item[1]))


STEADY_AFTER = 10  # batches a job's JVM runs before its batches are counted as steady


def steady_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's batch lines once its JVM is warm: those after the first :data:`STEADY_AFTER`
    (the JIT compiles the driver's planning and commit paths over the first batches); empty
    when the run has fewer than twice that many."""
    return lines[STEADY_AFTER:] if len(lines) >= 2 * STEADY_AFTER else []


def steady_rate(batches: list[tuple[int, float]]) -> int | None:
    """Rows/s of a batch once the JVM is warm: the median of the batches' rows/s (each
    ``(rows, seconds)``; the first run cold)."""
    rates = sorted(rows / seconds for rows, seconds in batches if rows and seconds > 0)
    return round(rates[len(rates) // 2]) if len(rates) >= 3 else None


def machine() -> dict[str, Any]:
    import pyspark

    memory = Path("/proc/meminfo").read_text().split()[1]
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(int(memory) / 2**20),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "spark": pyspark.__version__,
    }


def versions() -> dict[str, str]:
    from importlib.metadata import version

    from hack.stack import paths

    return {
        "kafka": paths.kafka_version(),
        "iceberg": paths.ICEBERG_VERSION,
        "pyspark": version("pyspark"),
        "pyiceberg": version("pyiceberg"),
        "confluent-kafka": version("confluent-kafka"),
        "kopf": version("kopf"),
        "kubernetes": paths.KUBERNETES_VERSION,
    }


def worktree(revision: str, into: Path, name: str = "") -> Path:
    path = into / (name or revision.replace("/", "_"))
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), revision],
        check=True,
        capture_output=True,
    )
    return path
