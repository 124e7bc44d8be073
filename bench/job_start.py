"""A job start to its first commit: how long, and in which steps, for a local job process.

Each start is the job as a process of its own (``python -m floe_sparkapp run``, Spark in local
mode with two cores and a 768 MiB heap, the connector jars on the driver's class path, as the
tests run it), with 200 new Avro records waiting in its topic: the time from the process's
start to its first commit, split as the job's ``floe.started`` line splits it (``launch``:
spark-submit's JVM to Python's entry point, ``session``, ``tables``: the tables loaded and the
query started, ``first_batch``: the first batch read, decoded, written and committed). The job
is stopped (SIGTERM) after its first commit and started again, ``--starts`` times per variant.

A variant adds JVM options to the driver's JVM (``SPARK_SUBMIT_OPTS``) and Spark settings:
``--variant "name=-XX:... spark.key=value"`` (repeatable); ``default`` is what the stack hands
out (its class-data-sharing archive), ``no-cds`` the same without the archive. ``--mode
upsert`` lands the records with a MERGE per batch (100 keys updated in turn) instead of
appending them.

``--node N`` times N restarts on the stack's node, as users meet them: the operator (a process)
serves a KafkaIcebergTopic whose job runs as a SparkApplication with the JVM's default
compilers; each restart is a spec change (a ``spark.conf`` entry), with 200 new records
waiting (produced once the new driver pod is made), from the new SparkApplication's creation
to its first commit, split as the suite splits a driver pod's start (``submit``:
spark-operator's spark-submit up to the driver pod, ``pod``: the pod to its container started,
then the job's own steps). ``--node-variant "name=spark.key=value 'spark.key=a value' ..."``
adds Spark settings to the resource's ``spark.conf`` (``image=REF``: its ``spark.image``;
``kafka.NAME=VALUE``: a Kafka client property, ``kafka.properties``); ``default`` is the
resource as it comes.  ``--node-rounds R`` runs the
variants in turns R times (every other round in the reverse order), N restarts each time.
Without variants (or with ``--record``) the default's median is recorded as
``restart_to_first_commit_seconds`` in ``results/latest.json`` and bench/README.md's table.

``--classes images/spark/cds_classes.txt`` adds to that file the classes a restart's driver and
executor on the node loaded from the image's jars and the JDK's modules rather than from its
class-data-sharing archive (their ``-Xlog:class+load``): the image's warm-up loads every class
listed there, so the next image's archive holds them (images/spark/cds_warmup.py).

``--suite reports/job-starts.json`` adds the medians of the starts a test run recorded (driver
pods on the node, from the SparkApplication's creation, and local job processes); with
``--starts 0`` only those. Each mode's local figures and the suite's are kept beside each other
in the results file.

Usage: python bench/job_start.py [--starts N] [--mode append|upsert] [--variant name=OPTIONS ...]
                                [--node N [--node-variant name=SETTINGS ...] [--node-rounds R]]
                                [--classes FILE]
                                [--suite FILE]
Needs the local stack (started if not running). Writes bench/results/job-start.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
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

from hack.stack.procs import stop_group  # noqa: E402
from workload import SMALL as SCHEMA  # noqa: E402 - ~100-byte order records
from workload import job_spec  # noqa: E402

STEPS = ("launch", "session", "tables", "first_batch")


def produce(env: dict[str, str], topic: str, start_at: int, count: int, keys: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = AvroSerializer(
        SchemaRegistryClient({"url": env["FLOE_SCHEMA_REGISTRY_URL"]}), json.dumps(SCHEMA)
    )
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": env["FLOE_KAFKA_BOOTSTRAP"]})
    now = int(time.time() * 1000)
    for i in range(start_at, start_at + count):
        producer.produce(
            topic,
            key=str(i % keys).encode(),
            value=serialize(
                {
                    "id": i,
                    "customer": f"customer-{i % 977}",
                    "item": f"item-{i % 131}",
                    "quantity": i % 50,
                    "price": (i % 10_000) / 100,
                    "status": "NEW",
                    "at": now,
                    "note": None,
                },
                context,
            ),
        )
    producer.flush()


def job_config(env: dict[str, str], work: Path, topic: str, mode: str) -> Path:
    from floe_sparkapp.config import parse_config

    config = parse_config(job_spec(env, work, topic, "start", mode=mode, commit={"interval": "2s"}))
    path = work / "job.json"
    path.write_text(config.to_json())
    return path


def one_start(command: list[str], env: dict[str, str], log: Path) -> dict | None:
    """Starts the job, waits for its first commit, stops it; its floe.started line."""
    with log.open("w") as out:
        job = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 300
        line = None
        while line is None and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            for text in log.read_text(errors="replace").splitlines():
                if '"event": "floe.started"' in text:
                    line = json.loads(text[text.index("{") :])
        stop_group(job, timeout=60)
    return line


def medians(lines: list[dict]) -> dict:
    return {
        "starts": len(lines),
        "seconds": round(statistics.median(s["seconds"] for s in lines), 2),
        **{
            step: round(statistics.median(s[f"{step}_seconds"] for s in lines), 2) for step in STEPS
        },
    }


def variant(env: dict[str, str], options: str, starts: int, mode: str) -> dict:
    work = Path(tempfile.mkdtemp(prefix="floe-job-start-"))
    topic = f"bench-start-{uuid.uuid4().hex[:8]}"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": env["FLOE_KAFKA_BOOTSTRAP"]})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result()
    command = [
        sys.executable,
        "-m",
        "floe_sparkapp",
        "run",
        "--config",
        str(job_config(env, work, topic, mode)),
    ]
    jvm = " ".join(o for o in options.split() if o.startswith("-"))
    confs = " ".join(f"--conf {o}" for o in options.split() if not o.startswith("-"))
    job_env = {
        **os.environ,
        "SPARK_SUBMIT_OPTS": jvm,
        "PYSPARK_SUBMIT_ARGS": (
            f"--master local[2] --driver-memory 768m --conf spark.ui.enabled=false {confs} "
            f"--driver-class-path {env['FLOE_SPARK_CLASSPATH']} pyspark-shell"
        ),
    }
    lines = []
    for n in range(starts + 1):  # the first start makes the table: not counted
        produce(env, topic, n * 200, 200, 100 if mode == "upsert" else 10**9)
        line = one_start(command, job_env, work / f"job-{n}.log")
        if line is None:
            raise SystemExit(f"start {n} reached no commit: {work / f'job-{n}.log'}")
        if n:
            lines.append(line)
    return {"options": options, **medians(lines)}


def node(
    env: dict[str, str], variants: dict[str, str], starts: int, rounds: int = 1
) -> tuple[dict[str, Any], Path]:
    """Each variant's restarts on the node (see the module's doc): their medians and each, and
    the directory of their logs.  With ``rounds``, the variants take turns, in the reverse
    order every other round, so that a node getting busier or a cache getting warmer favours
    none."""
    work = Path(tempfile.mkdtemp(prefix="floe-node-start-"))
    names = list(variants)
    starts_of: dict[str, list[dict]] = {name: [] for name in names}
    for turn in range(rounds):
        for name in names if turn % 2 == 0 else names[::-1]:
            starts_of[name] += _restarts(env, work, name, variants[name], starts)
    out = {
        name: {
            "settings": variants[name],
            **medians_of(each)["node"],
            "each": [s["seconds"] for s in each],
        }
        for name, each in starts_of.items()
    }
    return out, work


def _restarts(env: dict[str, str], work: Path, name: str, settings: str, starts: int) -> list[dict]:
    """One variant's resource on the node, restarted ``starts`` times: each restart's start."""
    from hack.stack.cluster import JOB_NAMESPACES
    from operator_scale import node_topic
    from tests.jobstarts import Recorder

    namespace = JOB_NAMESPACES[-1]  # served by the node's spark-operator
    conf = dict(item.split("=", 1) for item in shlex.split(settings))
    image = conf.pop("image", None)
    properties = {
        key.removeprefix("kafka."): conf.pop(key)
        for key in [k for k in conf if k.startswith("kafka.")]
    }
    recorder = Recorder()
    with node_topic(ROOT, env, work, namespace, "2s", conf) as topic:
        if image:
            topic.patch_spec({"spark": {"image": image}})
        if properties:
            topic.patch_spec({"kafka": {"properties": properties}})
        recorder.test = "first"  # the start that makes the table: not counted
        recorder.watch(topic.api_client)
        if not topic.wait_until(topic.landed, timeout=600, interval=1):
            raise SystemExit(f"{name}: the resource never landed its first records")
        for n in range(starts):
            recorder.test = name

            def committed() -> list[dict]:
                with recorder.lock:
                    return [
                        s for s in recorder.starts if s["test"] == name and s["seconds"] is not None
                    ]

            before, pods = len(committed()), len(recorder.pods)
            topic.patch_spec({"spark": {"conf": {"spark.floe.benchRestart": str(n)}}})
            # the records go once the old driver is gone (the new one has its name), so that
            # they wait for the new job's first batch
            if not topic.wait_until(
                lambda: len(recorder.pods) > pods,  # noqa: B023 - called within this iteration
                timeout=300,
                interval=0.5,
            ):
                raise SystemExit(f"{name}: restart {n} made no driver pod ({work})")
            topic.produce(10 + n * 200, 200)
            if not topic.wait_until(
                lambda: len(committed()) > before and topic.landed(),  # noqa: B023 - called within this iteration
                timeout=600,
                interval=1,
            ):
                raise SystemExit(f"{name}: restart {n} reached no commit ({work})")
            print(f"[bench] {name} restart {n}: {committed()[-1]}", file=sys.stderr, flush=True)
        for log in topic.shared.glob("*.log"):  # a variant's JVM logs ({shared}/...)
            shutil.copy(log, work / f"{name}-{log.name}")
    recorder.dump(work / f"{name}-recorder.json")
    return [s for s in recorder.starts if s["test"] == name]


def record_restart(measured: dict, command: str) -> None:
    """The default's median restart to its first commit on the node, as
    ``restart_to_first_commit_seconds`` in results/latest.json (with its steps and the
    command), and the goal table in bench/README.md."""
    from run import record_latest

    default = measured["restarts"]["default"]
    steps = {
        key: default[key]
        for key in ("starts", "seconds", "submit", "pod", *STEPS, "each")
        if key in default
    }
    record_latest(
        {"restart_to_first_commit_seconds": default["seconds"], "restart": steps},
        "restart",
        command,
        measured["date"],
    )


CLASS_LOG = (
    "classes=spark.driver.extraJavaOptions=-Xlog:class+load:file={shared}/driver.log "
    "spark.executor.extraJavaOptions=-Xlog:class+load:file={shared}/executor.log"
)


def not_archived(logs: list[Path]) -> set[str]:
    """The classes ``-Xlog:class+load`` logs show loaded from a jar or the JDK's modules (not
    from the archive, not generated at run time)."""
    names = set()
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            parts = line.split()
            if (
                len(parts) >= 4
                and parts[2] == "source:"
                and parts[3].startswith(("jrt:/", "file:"))
            ):
                names.add(parts[1])
    return names


def suite(path: Path) -> dict:
    return medians_of(json.loads(path.read_text()))


def medians_of(starts: list[dict]) -> dict:
    """The medians of starts as the suite records them (``tests/jobstarts.py``), per where."""
    out = {}
    for where in ("node", "local"):
        done = [s for s in starts if s["where"] == where and s["seconds"] is not None]
        if done:
            out[where] = {
                "starts": len([s for s in starts if s["where"] == where]),
                "committed": len(done),
                "seconds": round(statistics.median(s["seconds"] for s in done), 2),
                **{
                    step: round(statistics.median(v), 2)
                    for step in ("submit", "pod", *STEPS)
                    if (v := [s[step] for s in done if s.get(step) is not None])
                },
            }
    return out


def stack_env() -> dict[str, str]:
    """The local stack's connection settings (the stack started if it is not running), also
    in this process's environment."""
    from hack import stack as local_stack

    state, _ = local_stack.ensure_up()
    env = local_stack.connection_env(state)
    os.environ.update(env)
    return env


def main() -> int:
    # a bench stopped by SIGTERM still deletes its resource and stops its operator (finally)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--suite", type=Path)
    parser.add_argument("--node", type=int, default=0, help="restarts on the node, per variant")
    parser.add_argument("--node-variant", action="append", default=[])
    parser.add_argument(
        "--record",
        action="store_true",
        help="with --node-variant: still record the default's figure in results/latest.json",
    )
    parser.add_argument(
        "--node-rounds", type=int, default=1, help="the node's variants in turns, this many times"
    )
    parser.add_argument("--classes", type=Path, help="a class list to add to (see the doc)")
    parser.add_argument("--mode", choices=("append", "upsert"), default="append")
    args = parser.parse_args()

    path = ROOT / "bench" / "results" / "job-start.json"
    command = " ".join(["python bench/job_start.py", *sys.argv[1:]])
    out = json.loads(path.read_text()) if path.exists() else {}
    if args.starts:  # local starts, recorded per mode beside the other mode's
        import pyspark

        env = stack_env()
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        default = env.get("SPARK_SUBMIT_OPTS", "")
        variants = {"default": default}
        for text in args.variant:
            name, _, options = text.partition("=")
            variants[name] = "" if name == "no-cds" else f"{default} {options}".strip()
        out[args.mode] = {
            "command": command,
            "date": time.strftime("%Y-%m-%d"),
            "local": {
                name: variant(env, options, args.starts, args.mode)
                for name, options in variants.items()
            },
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "spark": pyspark.__version__,
            },
        }
    if args.node:
        env = stack_env()
        variants = {"default": ""}
        for text in args.node_variant:
            name, _, settings = text.partition("=")
            variants[name] = settings
        out["node"] = {
            "command": command,
            "date": time.strftime("%Y-%m-%d"),
            "restarts": node(env, variants, args.node, rounds=args.node_rounds)[0],
        }
        if not args.node_variant or args.record:
            record_restart(out["node"], command)
    if args.classes:
        env = stack_env()
        name, _, settings = CLASS_LOG.partition("=")
        _, work = node(env, {name: settings}, 1)
        known = set(args.classes.read_text().split()) if args.classes.exists() else set()
        found = not_archived(sorted(work.glob(f"{name}-*.log")))
        args.classes.write_text("".join(f"{c}\n" for c in sorted(known | found)))
        print(f"{len(found - known)} classes added to {args.classes} ({len(known | found)})")
        return 0
    if args.suite:
        out["suite"] = {"command": command, "date": time.strftime("%Y-%m-%d"), **suite(args.suite)}
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
