"""The SparkApplication (sparkoperator.k8s.io/v1beta2) of a topic's job, the job fingerprint
that says when it restarts, and an operation's attempts, Spark batches on the same job config."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..names import GROUP, JOB_METRICS_PORT, OPERATION_KIND, VERSION
from ..resource import PodSpec
from ..settings import OperatorSettings
from .config import (
    DRIVER_CHECKPOINTS,
    JOB_CONFIG_DIR,
    JOB_CONFIG_KEY,
    checkpoint_location,
    job_config,
)
from .pods import logging_env, placement, pod_container, pod_metadata, pod_volumes, spark_logging
from .topic import MANAGED_BY, Topic, bounded_name, job_labels, owner_reference

SPARK_API = "sparkoperator.k8s.io/v1beta2"


# What only the maintenance runs, the deletion or the operator use: changing it does not
# restart the job (the job expires snapshots itself, so their retention restarts it).
NOT_THE_JOBS: dict[str, Any] = {
    "generation": True,
    "suspend": True,
    "table": {"deletion_policy"},
    "maintenance": {
        "compaction": True,
        "remove_orphans": True,
        "rewrite_manifests": True,
        "resources": True,
        "expire_snapshots": {"schedule"},
    },
}


def job_fingerprint(topic: Topic, settings: OperatorSettings) -> str:
    """What the running job depends on: its config without :data:`NOT_THE_JOBS`, and the
    application. The job is restarted when this changes, not on every spec change."""
    config = job_config(topic, settings).model_dump(mode="json", exclude=NOT_THE_JOBS)
    app = spark_application(topic, settings, fingerprint="")["spec"]
    text = json.dumps([config, app, *([topic.restart] if topic.restart else [])], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# The containers Spark names in the pods it creates; pod templates name them to merge into.
DRIVER_CONTAINER = "spark-kubernetes-driver"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"


def _pod_template(
    container: str,
    volumes: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
    pod: PodSpec,
    **own: Any,
) -> dict[str, Any]:
    """A pod template Spark starts its driver or executors from: spark-operator hands it to
    spark-submit as it is, so any kind of volume mounts, and the pods are placed, without its
    webhook (Spark adds its own labels, volumes, ports and environment to the template's).
    ``own``: more of the container's fields."""
    return {
        "spec": {
            "containers": [pod_container({"name": container, "volumeMounts": mounts, **own}, pod)],
            "volumes": volumes,
            **placement(pod),
        }
    }


def _driver(topic: Topic, settings: OperatorSettings) -> dict[str, Any]:
    """The driver container's own fields: its metrics port, and how it logs."""
    return {
        "env": [
            {"name": "FLOE_METRICS_PORT", "value": str(JOB_METRICS_PORT)},
            *logging_env(topic, settings),
        ],
        "ports": [{"name": "metrics", "containerPort": JOB_METRICS_PORT, "protocol": "TCP"}],
    }


def _driver_volumes(
    topic: Topic, settings: OperatorSettings
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pods' volumes, and the driver's checkpoint emptyDir when it keeps it itself."""
    volumes, mounts = pod_volumes(topic)
    if checkpoint_location(topic, settings).startswith(f"file://{DRIVER_CHECKPOINTS}/"):
        volumes.append({"name": "checkpoints", "emptyDir": {}})
        mounts.append({"name": "checkpoints", "mountPath": DRIVER_CHECKPOINTS})
    return volumes, mounts


# A job's Spark settings unless its spark.conf sets them.  The driver goes on to load its tables
# and plan its first batch while its executors start, instead of waiting for them first (Spark
# on Kubernetes waits for 80 % of them by default): a start to the first commit overlaps the
# two, a second less on two cores (bench/README.md, "Job starts").
SPARK_CONF_DEFAULTS = {
    "spark.ui.showConsoleProgress": "false",
    "spark.scheduler.minRegisteredResourcesRatio": "0",
}


def spark_application(
    topic: Topic, settings: OperatorSettings, fingerprint: str | None = None
) -> dict[str, Any]:
    spec = topic.spec
    labels = job_labels(topic)
    volumes, mounts = pod_volumes(topic)
    pod = spec.spark.under(settings.spark_pod)
    return {
        "apiVersion": SPARK_API,
        "kind": "SparkApplication",
        "metadata": {
            "name": topic.child_name,
            "namespace": topic.namespace,
            "labels": labels,
            "annotations": {
                f"{GROUP}/generation": str(topic.generation),
                f"{GROUP}/job-fingerprint": (
                    job_fingerprint(topic, settings) if fingerprint is None else fingerprint
                ),
            },
            "ownerReferences": [owner_reference(topic)],
        },
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "image": spec.spark.image or settings.spark_image,
            "imagePullPolicy": "IfNotPresent",
            "mainApplicationFile": settings.job_main_file,
            "arguments": ["run", "--config", f"{JOB_CONFIG_DIR}/{JOB_CONFIG_KEY}"],
            "sparkVersion": spec.spark.spark_version,
            "sparkConf": {**SPARK_CONF_DEFAULTS, **spark_logging(settings), **spec.spark.conf},
            # floe's failover is the only restart: spark-operator resubmitting first would
            # repeat an exit only the user can resolve (DataLoss) several times before floe
            # could see it, and stack two backoffs.
            "restartPolicy": {"type": "Never"},
            "driver": {
                **pod_metadata(labels, pod),
                "cores": spec.spark.driver.cores,
                "memory": spec.spark.driver.memory,
                "serviceAccount": spec.spark.service_account or settings.spark_service_account,
                "template": _pod_template(
                    DRIVER_CONTAINER,
                    *_driver_volumes(topic, settings),
                    pod,
                    **_driver(topic, settings),
                ),
            },
            "executor": {
                **pod_metadata(labels, pod),
                "instances": spec.spark.executor.instances,
                "cores": spec.spark.executor.cores,
                "memory": spec.spark.executor.memory,
                "template": _pod_template(EXECUTOR_CONTAINER, volumes, mounts, pod),
            },
        },
    }


def operation_labels(name: str, uid: str) -> dict[str, str]:
    """The labels of an operation's SparkApplications and pods (not a topic's: the topic's
    visits never see them)."""
    return {
        **MANAGED_BY,
        "app.kubernetes.io/name": "floe-operation",
        "app.kubernetes.io/instance": bounded_name(name, "", 63, name),
        f"{GROUP}/operation-uid": uid,
    }


def operation_application(
    topic: Topic, settings: OperatorSettings, name: str, uid: str, attempt: int, request: str
) -> dict[str, Any]:
    """Attempt ``attempt`` of operation ``name`` (uid ``uid``) on ``topic``: a Spark batch on
    the topic's job config, its pods and its driver's account, running ``python -m
    floe_sparkapp operate`` with ``request`` (the operation, JSON); owned by the operation,
    which starts the next attempt itself when this one fails."""
    app = spark_application(topic, settings, fingerprint="")
    labels = {**operation_labels(name, uid), f"{GROUP}/attempt": str(attempt)}
    app["metadata"] = {
        "name": bounded_name(f"floe-op-{name}", f"-{attempt}", 63, f"{topic.namespace}/{name}"),
        "namespace": topic.namespace,
        "labels": labels,
        "annotations": {f"{GROUP}/operation": name},
        "ownerReferences": [
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": OPERATION_KIND,
                "name": name,
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    spec = app["spec"]
    spec["arguments"] = [
        "operate",
        "--config",
        f"{JOB_CONFIG_DIR}/{JOB_CONFIG_KEY}",
        "--operation",
        request,
    ]
    for role in ("driver", "executor"):  # the user's pod labels, the operation's for the job's
        spec[role]["labels"] = {
            **{k: v for k, v in spec[role]["labels"].items() if k not in job_labels(topic)},
            **labels,
        }
    return app
