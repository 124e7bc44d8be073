"""Where the machine's CPU goes while a command runs (the suite side by side, ``make test``).

``python bench/suite_cpu.py --out samples.jsonl -- make test`` runs the command and samples the
whole machine every 15 s from ``/proc``: how busy the cores were (1 - idle - iowait) and the CPU
seconds of each kind of process (a local Spark JVM, a driver or executor pod's, the API server,
Kafka, the test processes, ...: by command line and cgroup).  ``--summary samples.jsonl``
prints the run's mean and its CPU by kind.  A suite whose cores are busy throughout is bound by
the work its tests do, not by their waits: running more groups side by side does not shorten
it.  ``bench/results/suite_cpu.json`` holds what it found.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import threading
import time

HZ = os.sysconf("SC_CLK_TCK")
KINDS = (
    "kube-apiserver",
    "etcd",
    "kubelet",
    "containerd-shim",
    "containerd",
    "kube-controller",
    "kube-scheduler",
    "prometheus",
    "toxiproxy",
    "postgres",
    "fake-gcs",
    "azurite",
    "spark-operator",
    "coredns",
)


def kind(pid: int) -> str | None:
    """What a process is, from its command line and whether it runs in a pod."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/cgroup") as f:
            pod = "kubepods" in f.read()
    except OSError:
        return None
    where = "pod-" if pod else ""
    if "CoarseGrainedExecutorBackend" in command:
        return f"{where}spark-executor"
    if "java" in command:
        if "SparkSubmit" in command or "pyspark" in command or "spark" in command.lower():
            return f"{where}spark-jvm"
        for name in ("kafka", "schema", "iceberg"):
            if name in command.lower():
                return name
        return f"{where}java"
    for name in KINDS:
        if name in command:
            return name
    if "floe_sparkapp" in command or "floe_operator" in command:
        return f"{where}python-floe"
    if "pytest" in command or "exec(eval(sys.stdin.readline()))" in command:
        return "pytest"
    return f"{where}{(command.split(' ')[0].split('/')[-1] or '?')[:30]}"


def _ticks() -> dict[int, int]:
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
                fields = stat[stat.rindex(")") + 2 :].split()
                found[int(name)] = int(fields[11]) + int(fields[12])  # utime + stime
            except (OSError, ValueError):
                pass
    return found


def _cpu() -> tuple[int, int]:
    with open("/proc/stat") as f:
        values = list(map(int, f.readline().split()[1:]))
    return sum(values), values[3] + values[4]


def sample(out: str, stop: threading.Event, every: float = 15) -> None:
    kinds: dict[int, str | None] = {}
    before, (total, idle) = _ticks(), _cpu()
    with open(out, "a") as sink:
        while not stop.wait(every):
            now, (total2, idle2) = _ticks(), _cpu()
            seconds: collections.Counter = collections.Counter()
            for pid, ticks in now.items():
                spent = ticks - before.get(pid, 0)
                if spent > 0:
                    kinds.setdefault(pid, kind(pid))
                    seconds[kinds[pid] or "?"] += spent / HZ
            busy = 1 - (idle2 - idle) / max(1, total2 - total)
            sink.write(
                json.dumps(
                    {
                        "t": round(time.time(), 1),
                        "busy": round(busy, 3),
                        "cpu": {k: round(v, 2) for k, v in seconds.items()},
                    }
                )
                + "\n"
            )
            sink.flush()
            before, total, idle = now, total2, idle2


def summary(path: str) -> dict:
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    seconds: collections.Counter = collections.Counter()
    for row in rows:
        seconds.update(row["cpu"])
    spent = sum(seconds.values()) or 1
    return {
        "minutes": round(len(rows) * 15 / 60, 1),
        "cpu_busy": round(sum(r["busy"] for r in rows) / max(1, len(rows)), 3),
        "share_by_process": {k: round(v / spent, 3) for k, v in seconds.most_common(14)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="append the samples to this JSON-lines file")
    parser.add_argument("--summary", help="print the summary of a samples file")
    parser.add_argument("command", nargs="*", help="the command to run while sampling")
    args = parser.parse_args(argv)
    if args.summary:
        print(json.dumps(summary(args.summary), indent=1))
        return 0
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(args.out, stop), daemon=True)
    sampler.start()
    try:
        return subprocess.call(args.command)
    finally:
        stop.set()
        sampler.join(30)


if __name__ == "__main__":
    sys.exit(main())
