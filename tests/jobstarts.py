"""How many times each test started the job, and how long each start took to its first commit.

A start is one job process: a local ``python -m floe_sparkapp run`` whose log a test keeps under
its ``tmp_path``, or a driver pod on the node.  The job logs one ``floe.started`` line at its
first commit (``floe_sparkapp.metrics.report_start``): the process to Python's entry point
(``launch``: on the node, spark-submit's JVM starting Python), to the SparkSession, to the
query (tables loaded, offsets checked), to the first batch committed.  For a driver pod the API
server adds the steps before: the SparkApplication created, its driver pod created
(``submit``: spark-operator's spark-submit), the pod's container started (``pod``).

Each of the suite's processes (xdist's workers) keeps its own starts; the suite writes them all
to ``reports/job-starts.json`` and sums them up at its end. Only a worker that runs the node's
tests watches the driver pods, so a pod is counted under the test that made it.
"""

from __future__ import annotations

import json
import statistics
import threading
from collections import defaultdict
from collections.abc import Iterable
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import Any

STARTING, STARTED = '"event": "floe.starting"', '"event": "floe.started"'
STEPS = ("submit", "pod", "launch", "session", "tables", "first_batch")


def started_lines(text: str) -> list[dict[str, Any]]:
    """The ``floe.started`` lines of a job's log."""
    return [start for start in starts(text) if start is not None]


def starts(text: str) -> list[dict[str, Any] | None]:
    """Each start in a log of one job process after another: its ``floe.started`` line, or
    None when it never got to a first commit (killed, failed)."""
    found: list[dict[str, Any] | None] = []
    for line in text.splitlines():
        if STARTING in line:
            found.append(None)
        elif STARTED in line and found and found[-1] is None:
            try:
                found[-1] = json.loads(line[line.index("{") :])
            except ValueError:
                continue
    return found


def _epoch(stamp: Any) -> float | None:
    if stamp is None:
        return None
    if isinstance(stamp, datetime):
        return stamp.timestamp()
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


def _steps(line: dict[str, Any] | None) -> dict[str, float | None]:
    line = line or {}
    return {step: line.get(f"{step}_seconds") for step in STEPS[2:]}  # the job's own


class Recorder:
    """The starts of the whole session, each under the test that made it."""

    def __init__(self) -> None:
        self.test = ""
        self.starts: list[dict[str, Any]] = []
        self.pods: dict[str, dict[str, Any]] = {}  # by uid, while the watch polls them
        self.lock = threading.Lock()
        self.watcher: threading.Thread | None = None
        self.stopped = threading.Event()

    # --- local job processes ---------------------------------------------------------------

    def local(self, test: str, directory: Path | None) -> None:
        """The starts logged under a test's ``tmp_path`` (``*.log``)."""
        if directory is None or not directory.exists():
            return
        for log in sorted(directory.rglob("*.log")):
            try:
                text = log.read_text(errors="replace")
            except OSError:
                continue
            for line in starts(text):
                with self.lock:
                    self.starts.append(
                        {
                            "test": test,
                            "where": "local",
                            "log": log.name,
                            "submit": None,
                            "pod": None,
                            **_steps(line),
                            "seconds": (line or {}).get("seconds"),
                        }
                    )

    # --- driver pods on the node -----------------------------------------------------------

    def watch(self, api_client: Any) -> None:
        """Starts polling the node's driver pods (once per session)."""
        if self.watcher is None:
            self.watcher = threading.Thread(
                target=self._poll, args=(api_client,), daemon=True, name="job-starts"
            )
            self.watcher.start()

    def _poll(self, api_client: Any) -> None:
        from kubernetes import client

        core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
        while True:
            stopping = self.stopped.is_set()  # one visit more after the stop
            with suppress(Exception):  # the API server restarting: the next poll
                self._visit(core, custom)
            if stopping:
                return
            self.stopped.wait(2)

    def _visit(self, core: Any, custom: Any) -> None:
        pods = core.list_pod_for_all_namespaces(label_selector="spark-role=driver").items
        for pod in pods:
            uid = pod.metadata.uid
            entry = self.pods.get(uid)
            if entry is None:
                app_name = (pod.metadata.labels or {}).get("sparkoperator.k8s.io/app-name")
                app_created = None
                if app_name:
                    try:
                        app = custom.get_namespaced_custom_object(
                            "sparkoperator.k8s.io",
                            "v1beta2",
                            pod.metadata.namespace,
                            "sparkapplications",
                            app_name,
                        )
                        app_created = _epoch(app["metadata"]["creationTimestamp"])
                    except Exception:  # noqa: BLE001 - gone already
                        pass
                entry = self.pods[uid] = {
                    "test": self.test,
                    "where": "node",
                    "pod_name": pod.metadata.name,
                    "namespace": pod.metadata.namespace,
                    "app_created": app_created,
                    "pod_created": _epoch(pod.metadata.creation_timestamp),
                    "container_started": None,
                    "line": None,
                    "done": False,
                }
            if entry["done"]:
                continue
            for status in pod.status.container_statuses or []:
                if status.name == "spark-kubernetes-driver" and status.state.running:
                    entry["container_started"] = _epoch(status.state.running.started_at)
            if entry["container_started"] is not None and entry["line"] is None:
                try:
                    text = core.read_namespaced_pod_log(
                        pod.metadata.name,
                        pod.metadata.namespace,
                        container="spark-kubernetes-driver",
                    )
                except Exception:  # noqa: BLE001 - not up yet, or gone
                    text = ""
                lines = started_lines(text)
                if lines:
                    entry["line"] = lines[0]
                    entry["done"] = True
        seen = {pod.metadata.uid for pod in pods}
        for uid, entry in list(self.pods.items()):
            if uid not in seen:  # the pod is gone: what it got to is all there is
                entry["done"] = True
            if entry["done"] and not entry.get("recorded"):
                entry["recorded"] = True
                self._record_pod(entry)

    def _record_pod(self, entry: dict[str, Any]) -> None:
        line = entry["line"]
        submit = (
            entry["pod_created"] - entry["app_created"]
            if entry["app_created"] is not None
            else None
        )
        started = entry["container_started"]
        pod = started - entry["pod_created"] if started is not None else None
        seconds = None
        if line is not None and entry["app_created"] is not None:
            # The job's clock ran from its process start; the pod's time before that is added.
            seconds = round(line["process_started"] - entry["app_created"] + line["seconds"], 3)
        with self.lock:
            self.starts.append(
                {
                    "test": entry["test"],
                    "where": "node",
                    "pod_name": entry["pod_name"],
                    "submit": round(submit, 3) if submit is not None else None,
                    "pod": round(pod, 3) if pod is not None else None,
                    **_steps(line),
                    "seconds": seconds,
                }
            )

    # --- the session's end -----------------------------------------------------------------

    def dump(self, path: Path) -> None:
        """Writes this process's starts to ``path`` (one worker's part of the run)."""
        self.stopped.set()
        if self.watcher is not None:
            self.watcher.join(timeout=30)
        for entry in self.pods.values():  # still running when the suite ended
            if not entry.get("recorded"):
                entry["recorded"] = True
                self._record_pod(entry)
        path.write_text(json.dumps(self.starts) + "\n")

    @staticmethod
    def summarize(parts: Iterable[Path], path: Path) -> list[str]:
        """Writes every worker's starts to ``path``; the summary's lines."""
        all_starts: list[dict[str, Any]] = []
        for part in sorted(parts):
            all_starts.extend(json.loads(part.read_text()))
        if not all_starts:
            return []
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(all_starts, indent=1) + "\n")
        lines = [f"job starts: {len(all_starts)} (every start: {path})"]
        for where in ("node", "local"):
            starts = [s for s in all_starts if s["where"] == where]
            if not starts:
                continue
            committed = [s for s in starts if s["seconds"] is not None]
            medians = {
                step: statistics.median(values)
                for step in STEPS
                if (values := [s[step] for s in committed if s[step] is not None])
            }
            lines.append(
                f"  {where}: {len(starts)} starts, {len(committed)} reached a first commit; "
                f"median to first commit {statistics.median(s['seconds'] for s in committed):.1f} s"
                if committed
                else f"  {where}: {len(starts)} starts, none reached a commit"
            )
            if medians:
                lines.append(
                    "    median per step: "
                    + ", ".join(f"{step} {value:.1f} s" for step, value in medians.items())
                )
        per_test: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for start in all_starts:
            per_test[start["test"]].append(start)
        busiest = sorted(per_test.items(), key=lambda item: -len(item[1]))[:10]
        lines.append(
            "  most starts: "
            + "; ".join(f"{test.split('::')[-1][:60]} {len(starts)}" for test, starts in busiest)
        )
        return lines


recorder = Recorder()
