"""A local stand-in for kubeflow spark-operator: runs SparkApplications as local processes.

There is no kubelet here, so this harness (tests and demo only) watches SparkApplications on the
API server and runs each driver as a local ``python -m floe_sparkapp`` process with Spark in
local mode, the way spark-operator would run it in a pod:

* the ConfigMap and Secret volumes of the driver's pod template are written to a directory per
  application and the mount paths in the arguments and in the mounted files are translated to
  it;
* ``status.applicationState.state`` goes SUBMITTED -> RUNNING -> COMPLETED | FAILING ->
  PENDING_RERUN -> ... | FAILED (retries spent), with
  ``submissionAttempts``, ``executionAttempts``, ``lastSubmissionAttemptTime``,
  ``terminationTime`` and an ``errorMessage`` holding the tail of the driver's log;
* ``restartPolicy`` OnFailure/Always resubmits after the retry interval, up to the retries;
* a changed spec resubmits; a deleted application has its driver killed.

Run: ``python hack/spark-operator/runner.py`` with KUBECONFIG and FLOE_SPARK_JARS set
(FLOE_RUNNER_NAMESPACE limits it to one namespace).
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "sparkoperator.k8s.io", "v1beta2", "sparkapplications"
log = logging.getLogger("spark-runner")


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Driver:
    namespace: str
    name: str
    uid: str
    generation: int
    process: subprocess.Popen | None = None
    log_path: Path | None = None
    submissions: int = 0
    executions: int = 0
    stopping: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class Runner:
    def __init__(self, work_dir: Path, jars: str):
        config.load_kube_config()
        self.custom = client.CustomObjectsApi()
        self.core = client.CoreV1Api()
        self.work_dir = work_dir
        self.jars = jars
        self.drivers: dict[tuple[str, str], Driver] = {}

    # --- status ---------------------------------------------------------------------------

    def _status(self, driver: Driver, state: str, error: str | None = None, **extra: Any) -> None:
        status: dict[str, Any] = {
            "applicationState": {"state": state, "errorMessage": error or ""},
            "driverInfo": {},  # required by spark-operator's CRD; there is no driver pod here
            "submissionAttempts": driver.submissions,
            "executionAttempts": driver.executions,
            **extra,
        }
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, driver.namespace, PLURAL, driver.name, {"status": status})
        except ApiException as failure:
            if failure.status != 404:
                raise

    # --- mounts ---------------------------------------------------------------------------

    def _materialize(self, driver: Driver, spec: dict[str, Any]) -> dict[str, str]:
        """Writes the ConfigMap and Secret volumes of the driver's pod template to disk (a
        hostPath is used where it is); returns mount path -> local dir."""
        root = self.work_dir / driver.namespace / driver.name
        if root.exists():
            shutil.rmtree(root)
        pod = spec.get("driver", {}).get("template", {}).get("spec", {})
        volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
        container_mounts = pod.get("containers", [{}])[0].get("volumeMounts", [])
        mounts: dict[str, str] = {}
        config_maps: list[tuple[str, Path]] = []
        for mount in container_mounts:
            volume = volumes[mount["name"]]
            target = root / mount["name"]
            if "secret" in volume:
                secret = self.core.read_namespaced_secret(volume["secret"]["secretName"],
                                                          driver.namespace)
                target.mkdir(parents=True)
                for key, value in (secret.data or {}).items():
                    (target / key).write_bytes(base64.b64decode(value))
            elif "configMap" in volume:
                target.mkdir(parents=True)
                config_maps.append((volume["configMap"]["name"], target))
            elif "hostPath" in volume:
                target = Path(volume["hostPath"]["path"])
            else:
                continue  # scratch space: the local process has its own
            mounts[mount["mountPath"]] = str(target)
        for name, target in config_maps:  # last: their contents name the other mounts
            config_map = self.core.read_namespaced_config_map(name, driver.namespace)
            for key, value in (config_map.data or {}).items():
                (target / key).write_text(self._translate(value, mounts))
        return mounts

    @staticmethod
    def _translate(text: str, mounts: dict[str, str]) -> str:
        for mount_path, local in sorted(mounts.items(), key=lambda m: -len(m[0])):
            text = text.replace(mount_path, local)
        return text

    # --- driver processes -----------------------------------------------------------------

    def _submit(self, driver: Driver, spec: dict[str, Any]) -> None:
        with driver.lock:
            driver.submissions += 1
            self._status(driver, "SUBMITTED", lastSubmissionAttemptTime=_now())
            try:
                mounts = self._materialize(driver, spec)
            except ApiException as failure:
                self._status(driver, "SUBMISSION_FAILED",
                             f"cannot mount {failure.reason}: {failure.body}")
                return
            arguments = [self._translate(a, mounts) for a in spec.get("arguments", [])]
            cores = spec.get("driver", {}).get("cores", 1)
            conf = " ".join(f"--conf {k}={v}" for k, v in spec.get("sparkConf", {}).items())
            submit_args = (f"--master local[{max(1, min(int(cores), 2))}] "
                           f"--driver-memory {spec.get('driver', {}).get('memory', '1g')} "
                           f"--conf spark.ui.enabled=false {conf} --jars {self.jars} pyspark-shell")
            driver.log_path = self.work_dir / driver.namespace / driver.name / "driver.log"
            driver.log_path.parent.mkdir(parents=True, exist_ok=True)
            with driver.log_path.open("a") as out:
                driver.process = subprocess.Popen(
                    [sys.executable, "-m", "floe_sparkapp", *arguments], stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                    env={**os.environ, "PYSPARK_SUBMIT_ARGS": submit_args,
                         "PYSPARK_PYTHON": sys.executable})
            driver.executions += 1
            driver.stopping = False
            self._status(driver, "RUNNING", sparkApplicationId=f"local-{driver.process.pid}",
                         driverInfo={"podName": f"{driver.name}-driver"})
        threading.Thread(target=self._wait, args=(driver, spec), daemon=True).start()

    def _wait(self, driver: Driver, spec: dict[str, Any]) -> None:
        process = driver.process
        assert process is not None
        code = process.wait()
        with driver.lock:
            if driver.stopping or driver.process is not process:
                return
            tail = ""
            if driver.log_path and driver.log_path.exists():
                tail = "\n".join(driver.log_path.read_text(errors="replace").splitlines()[-20:])
            if code == 0:
                self._status(driver, "COMPLETED", terminationTime=_now())
                return
            policy = spec.get("restartPolicy", {})
            retries = policy.get("onFailureRetries", 0)
            retrying = (policy.get("type") in ("OnFailure", "Always")
                        and driver.executions <= retries)
            # Like spark-operator: FAILING while retries are left, FAILED once they are spent.
            self._status(driver, "FAILING" if retrying else "FAILED",
                         f"driver exited with code {code}:\n{tail}", terminationTime=_now())
        if retrying:
            time.sleep(policy.get("onFailureRetryInterval", 5))
            if (driver.namespace, driver.name) in self.drivers and not driver.stopping:
                self._status(driver, "PENDING_RERUN")
                self._submit(driver, spec)

    def _kill(self, driver: Driver) -> None:
        with driver.lock:
            driver.stopping = True
            if driver.process and driver.process.poll() is None:
                os.killpg(driver.process.pid, signal.SIGKILL)
                driver.process.wait()

    # --- the watch loop -------------------------------------------------------------------

    def handle(self, kind: str, app: dict[str, Any]) -> None:
        meta = app["metadata"]
        key = (meta["namespace"], meta["name"])
        driver = self.drivers.get(key)
        if kind == "DELETED":
            if driver:
                self._kill(driver)
                del self.drivers[key]
            return
        generation = int(meta.get("generation", 1))
        if driver is not None and driver.uid == meta["uid"] and driver.generation == generation:
            return
        if driver is not None:
            self._kill(driver)  # a changed spec (or a recreated app) is resubmitted
        driver = Driver(meta["namespace"], meta["name"], meta["uid"], generation)
        self.drivers[key] = driver
        log.info("submitting %s/%s (generation %d)", *key, generation)
        self._submit(driver, app["spec"])

    def run(self, namespace: str | None = None) -> None:
        resource_version = ""
        if namespace:
            lister, scope = self.custom.list_namespaced_custom_object, (GROUP, VERSION, namespace)
        else:
            lister, scope = self.custom.list_cluster_custom_object, (GROUP, VERSION)
        while True:
            try:
                stream = watch.Watch().stream(lister, *scope, PLURAL,
                                              resource_version=resource_version,
                                              timeout_seconds=60)
                for event in stream:
                    app = event["object"]
                    resource_version = app["metadata"]["resourceVersion"]
                    self.handle(event["type"], app)
            except ApiException as failure:
                if failure.status == 410:  # our resource version expired: list again
                    resource_version = ""
                else:
                    log.warning("watch failed: %s", failure.reason)
                    time.sleep(1)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    work_dir = Path(os.environ.get("FLOE_RUNNER_DIR", "/tmp/floe-spark-runner"))
    runner = Runner(work_dir, os.environ["FLOE_SPARK_JARS"])

    def stop(*_: Any) -> None:
        for driver in list(runner.drivers.values()):
            runner._kill(driver)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    runner.run(os.environ.get("FLOE_RUNNER_NAMESPACE") or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
