"""A class-data-sharing archive for the local JVMs (the tests' Spark session, local jobs).

The Spark image makes its own at build (images/spark/Dockerfile); this is the same warm-up
(``images/spark/cds_warmup.py``) run once with pyspark's spark-submit and the connector jars on
the driver's class path, so the archive holds their classes too.  A JVM maps it when started
with ``SPARK_SUBMIT_OPTS=-XX:SharedArchiveFile=...`` and the same class path (``FLOE_SPARK_
CLASSPATH`` first); any other JVM ignores it.  The archive's name carries what it depends on
(the JDK, pyspark and where it is installed, the jars), so a change makes a new one.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import paths


@functools.lru_cache(maxsize=4)  # the JDK and the jars do not change while a process runs
def _key(classpath: str) -> str:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    # The archive holds the class path it was made with, pyspark's jars under this checkout's
    # virtualenv among them: a JVM of another checkout (another path) would ignore it.
    spec = importlib.util.find_spec("pyspark")
    pyspark_home = str(Path(spec.origin).parent) if spec and spec.origin else ""
    parts = [java, paths.pyspark_version(), pyspark_home, classpath]
    parts += [f"{p}:{os.path.getsize(p)}" for p in classpath.split(":") if os.path.exists(p)]
    parts += [
        (paths.REPO / "images" / "spark" / name).read_text()  # what the warm-up does
        for name in ("cds_warmup.py", "cds_classes.txt")
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def jit_options() -> str:
    """The Spark image's JIT thresholds (``FLOE_JIT_OPTS`` in images/spark/Dockerfile): the
    server compiler later than HotSpot's defaults.  The tests' session takes them too: over
    the same 19 tests it used 0.81x the CPU in the same wall clock (bench/results/
    suite_cpu.json), CPU its group's neighbours on the machine's two cores then have."""
    for line in (paths.REPO / "images" / "spark" / "Dockerfile").read_text().splitlines():
        if line.startswith("ENV FLOE_JIT_OPTS="):
            return line.split("=", 1)[1].strip('"')
    raise LookupError("images/spark/Dockerfile sets no FLOE_JIT_OPTS")


def archive_path(classpath: str) -> Path:
    return paths.CACHE / "cds" / f"local-{_key(classpath)}.jsa"


def ensure_archive(classpath: str) -> Path | None:
    """The archive for ``classpath``, made first if missing (about 20 s); None when this
    Python cannot run pyspark (provisioning's stdlib-only interpreter)."""
    archive = archive_path(classpath)
    if archive.exists():
        return archive
    if importlib.util.find_spec("pyspark") is None:
        return None
    archive.parent.mkdir(parents=True, exist_ok=True)
    for stale in archive.parent.glob("local-*.jsa"):
        stale.unlink()
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="floe-cds-"))
    partial = archive.with_suffix(".partial")
    env = {
        **os.environ,
        "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial}",
        "PYSPARK_SUBMIT_ARGS": f"--master local[2] --conf spark.ui.enabled=false "
        f"--driver-class-path {classpath} pyspark-shell",
    }
    try:
        done = subprocess.run(
            [
                sys.executable,
                str(paths.REPO / "images" / "spark" / "cds_warmup.py"),
                str(scratch / "work"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if done.returncode != 0 or not partial.exists():
        print(
            f"[stack] class-data-sharing archive not made (local JVMs start without it):\n"
            f"{(done.stdout + done.stderr)[-2000:]}",
            file=sys.stderr,
            flush=True,
        )
        partial.unlink(missing_ok=True)
        return None
    partial.rename(archive)
    print(
        f"[stack] class-data-sharing archive for local JVMs made in "
        f"{time.monotonic() - started:.0f}s",
        file=sys.stderr,
        flush=True,
    )
    return archive
