"""Pure functions from a KafkaIcebergTopic to the children the operator keeps in place.

Each resource gets a ConfigMap holding the job config and a SparkApplication
(sparkoperator.k8s.io/v1beta2) running ``python -m floe_sparkapp run`` on it; both are named
after the resource, owned by it, and mount the referenced Secrets as files.  The mounts are pod
templates, which kubeflow spark-operator passes to spark-submit as they are: nothing depends on
its mutating webhook.  Nothing here talks to the API server.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from dataclasses import dataclass, replace
from typing import Any

from floe_sparkapp.catalog import hadoop_reaches
from floe_sparkapp.config import JobConfig
from floe_sparkapp.contract import SecretRef, TopicSpec
from floe_sparkapp.units import size_bytes

from .names import GROUP, JOB_METRICS_PORT, KIND, OPERATION_KIND, PUBLISH, RESTART, VERSION
from .resource import KafkaIcebergTopicSpec, PodSpec
from .settings import OperatorSettings

JOB_CONFIG_KEY = "job.json"
JOB_CONFIG_DIR = "/etc/floe/job"
KAFKA_SECRET_DIR = "/etc/floe/secrets/kafka"
CATALOG_SECRET_DIR = "/etc/floe/secrets/catalog"
REGISTRY_SECRET_DIR = "/etc/floe/secrets/registry"
# Checkpoints of tables on stores Spark has no Hadoop file system for in the image (GCS, ADLS):
# an emptyDir of the driver's.  The table's offsets decide where a job is: a new driver starts
# from them, as after any lost checkpoint.
DRIVER_CHECKPOINTS = "/var/lib/floe/checkpoints"
SPARK_API = "sparkoperator.k8s.io/v1beta2"
MANAGED_BY = {"app.kubernetes.io/managed-by": "floe"}
APPLIED = f"{GROUP}/applied-hash"


def stamped(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A copy of the body annotated with a hash of itself, by which a later apply of the same
    body is seen to change nothing and is skipped (no write, no watch event)."""
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    body = copy.deepcopy(body)
    body["metadata"].setdefault("annotations", {})[APPLIED] = digest
    return body, digest


def bounded_name(base: str, suffix: str, limit: int, key: str) -> str:
    """``base + suffix`` when it fits in ``limit`` characters; otherwise ``base`` is cut and a
    digest of ``key`` (the resource's full name) goes before the suffix, so two long names
    that share a prefix still get names of their own, and each action keeps its suffix."""
    name = f"{base}{suffix}"
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    keep = limit - len(suffix) - len(digest) - 1
    return f"{base[:keep].rstrip('-.')}-{digest}{suffix}"


@dataclass(frozen=True)
class Topic:
    """A KafkaIcebergTopic as the render functions need it."""

    namespace: str
    name: str
    uid: str
    generation: int
    spec: KafkaIcebergTopicSpec
    restart: str | None = None  # the RESTART annotation: a new value restarts the job
    rolled_back_to: int | None = None  # the stable generation whose spec runs (autoRollback)
    publish: str | None = None  # the PUBLISH annotation: a new value publishes table.branch

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Topic:
        meta = body["metadata"]
        return cls(
            meta["namespace"],
            meta["name"],
            meta.get("uid", ""),
            int(meta.get("generation", 1)),
            KafkaIcebergTopicSpec.model_validate(body.get("spec", {})),
            (meta.get("annotations") or {}).get(RESTART) or None,
            publish=(meta.get("annotations") or {}).get(PUBLISH) or None,
        )

    def running(self, status: dict[str, Any]) -> Topic:
        """The topic as its job runs it: while its generation is rolled back
        (``status.autoRollback``), with the last stable spec (``status.stable``)."""
        rolled = status.get("autoRollback") or {}
        stable = status.get("stable") or {}
        if rolled.get("failedGeneration") != self.generation or not stable.get("spec"):
            return self
        return replace(
            self,
            spec=KafkaIcebergTopicSpec.model_validate(stable["spec"]),
            rolled_back_to=int(stable["generation"]),
        )

    @property
    def child_name(self) -> str:
        """The SparkApplication's name (a DNS label: spark-operator names Services after it)."""
        return bounded_name(f"floe-{self.name}", "", 63, self.name)

    @property
    def label(self) -> str:
        """The resource's name as a label value (at most 63 characters)."""
        return bounded_name(self.name, "", 63, self.name)

    @property
    def writer(self) -> str:
        return f"{self.namespace}/{self.name}"


def owner_reference(topic: Topic) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": topic.name,
        "uid": topic.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def spark_account(topic: Topic, name: str, role: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The driver's ServiceAccount and the RoleBinding that grants it ``role`` (a ClusterRole)
    in the resource's namespace, both owned by the resource among any others that use them:
    the garbage collector removes them with the last."""
    owner = {**owner_reference(topic), "controller": False, "blockOwnerDeletion": False}
    meta = {
        "name": name,
        "namespace": topic.namespace,
        "labels": {**MANAGED_BY, "app.kubernetes.io/name": "floe-spark"},
        "ownerReferences": [owner],
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": copy.deepcopy(meta)}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": copy.deepcopy(meta),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": topic.namespace}],
    }
    return account, binding


def _labels(topic: Topic) -> dict[str, str]:
    return {
        **MANAGED_BY,
        "app.kubernetes.io/name": "floe-job",
        "app.kubernetes.io/instance": topic.label,
        f"{GROUP}/topic": topic.label,
    }


def checkpoint_location(topic: Topic, settings: OperatorSettings) -> str:
    spec = topic.spec
    if spec.spark.checkpoint_location:
        return spec.spark.checkpoint_location
    root = settings.checkpoint_root or (
        f"{spec.table.catalog.warehouse.rstrip('/')}/_floe/checkpoints"
        if spec.table.catalog.warehouse
        else None
    )
    if root is None:
        raise ValueError(
            "spec.spark.checkpointLocation is required when the catalog has no "
            "warehouse and the operator has no checkpoint root"
        )
    if not hadoop_reaches(root):
        root = f"file://{DRIVER_CHECKPOINTS}"
    if root.startswith("s3://"):
        root = "s3a://" + root[len("s3://") :]  # Spark's checkpoints go through Hadoop's S3A
    return f"{root}/{topic.namespace}/{topic.name}"


def job_config(topic: Topic, settings: OperatorSettings) -> JobConfig:
    """The job's config: the resource's spec as it is (but for the pods' settings), the
    writer, the generation, the checkpoint, and where the referenced Secrets are mounted."""
    spec = topic.spec
    return JobConfig.model_validate(
        {
            **{name: getattr(spec, name) for name in TopicSpec.model_fields},
            "writer": topic.writer,
            "generation": topic.generation,
            "checkpoint_location": checkpoint_location(topic, settings),
            "secrets": {
                what: {"dir": path}
                for what, (ref, path) in secret_refs(topic).items()
                if ref is not None
            },
        }
    )


def config_map(topic: Topic, settings: OperatorSettings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{topic.child_name}-job",
            "namespace": topic.namespace,
            "labels": _labels(topic),
            "ownerReferences": [owner_reference(topic)],
        },
        "data": {JOB_CONFIG_KEY: job_config(topic, settings).to_json()},
    }


def secret_refs(topic: Topic) -> dict[str, tuple[SecretRef | None, str]]:
    """The Secrets the spec references, by what they hold (the job config's ``secrets``), each
    with where the pods mount it."""
    spec = topic.spec
    registry = spec.value.schema_registry
    return {
        "kafka": (spec.kafka.auth_secret_ref, KAFKA_SECRET_DIR),
        "catalog": (spec.table.catalog.secret_ref, CATALOG_SECRET_DIR),
        "registry": (registry.auth_secret_ref if registry else None, REGISTRY_SECRET_DIR),
    }


def _secret_mounts(topic: Topic) -> list[dict[str, str]]:
    """The referenced Secrets and where the job config expects their files."""
    return [
        {"name": ref.name, "path": path}
        for ref, path in secret_refs(topic).values()
        if ref is not None
    ]


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


def _placement(pod: PodSpec, security_context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The pod spec's fields that place the pod (those set only)."""
    placed = {
        "imagePullSecrets": [{"name": s.name} for s in pod.image_pull_secrets],
        "nodeSelector": pod.node_selector,
        "tolerations": pod.tolerations,
        "affinity": pod.affinity,
        "priorityClassName": pod.priority_class_name,
        "securityContext": {**(security_context or {}), **pod.pod_security_context},
    }
    return {key: value for key, value in placed.items() if value}


def _container(
    container: dict[str, Any], pod: PodSpec, security_context: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``container`` with the pod settings' environment and security context added."""
    own = {variable.get("name") for variable in pod.env}
    env = [v for v in container.get("env", []) if v["name"] not in own] + list(pod.env)
    added = {
        "env": env,
        "envFrom": pod.env_from,
        "securityContext": {**(security_context or {}), **pod.security_context},
    }
    return {**container, **{key: value for key, value in added.items() if value}}


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
            "containers": [_container({"name": container, "volumeMounts": mounts, **own}, pod)],
            "volumes": volumes,
            **_placement(pod),
        }
    }


def _logging_env(topic: Topic, settings: OperatorSettings) -> list[dict[str, str]]:
    """floe's log lines in a job's pods: the spec's level, the operator's format."""
    return [
        {"name": "FLOE_LOG_LEVEL", "value": topic.spec.spark.log_level},
        {"name": "FLOE_LOG_FORMAT", "value": settings.log_format},
    ]


def _spark_logging(settings: OperatorSettings) -> dict[str, str]:
    """Spark's own lines as JSON too, where floe's are (Spark's structured logging)."""
    json_lines = settings.log_format == "json"
    return {"spark.log.structuredLogging.enabled": "true"} if json_lines else {}


def _driver(topic: Topic, settings: OperatorSettings) -> dict[str, Any]:
    """The driver container's own fields: its metrics port, and how it logs."""
    return {
        "env": [
            {"name": "FLOE_METRICS_PORT", "value": str(JOB_METRICS_PORT)},
            *_logging_env(topic, settings),
        ],
        "ports": [{"name": "metrics", "containerPort": JOB_METRICS_PORT, "protocol": "TCP"}],
    }


def _driver_volumes(
    topic: Topic, settings: OperatorSettings
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pods' volumes, and the driver's checkpoint emptyDir when it keeps it itself."""
    volumes, mounts = _volumes(topic)
    if checkpoint_location(topic, settings).startswith(f"file://{DRIVER_CHECKPOINTS}/"):
        volumes.append({"name": "checkpoints", "emptyDir": {}})
        mounts.append({"name": "checkpoints", "mountPath": DRIVER_CHECKPOINTS})
    return volumes, mounts


def _pod_metadata(labels: dict[str, str], pod: PodSpec) -> dict[str, Any]:
    """The pods' labels (floe's own win) and annotations."""
    metadata: dict[str, Any] = {"labels": {**pod.pod_labels, **labels}}
    if pod.pod_annotations:
        metadata["annotations"] = dict(pod.pod_annotations)
    return metadata


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
    labels = _labels(topic)
    volumes, mounts = _volumes(topic)
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
            "sparkConf": {**SPARK_CONF_DEFAULTS, **_spark_logging(settings), **spec.spark.conf},
            # floe's failover is the only restart: spark-operator resubmitting first would
            # repeat an exit only the user can resolve (DataLoss) several times before floe
            # could see it, and stack two backoffs.
            "restartPolicy": {"type": "Never"},
            "driver": {
                **_pod_metadata(labels, pod),
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
                **_pod_metadata(labels, pod),
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
            **{k: v for k, v in spec[role]["labels"].items() if k not in _labels(topic)},
            **labels,
        }
    return app


# Maintenance action name in the spec -> the job's --action and the CronJob's suffix.
MAINTENANCE_ACTIONS = {
    "compaction": "compaction",
    "expire_snapshots": "expire-snapshots",
    "remove_orphans": "remove-orphans",
    "rewrite_manifests": "rewrite-manifests",
}
SPARK_SUBMIT = "/opt/spark/bin/spark-submit"


def cron_job_name(topic: Topic, action: str) -> str:
    # At most 52 characters: the CronJob controller appends 11 to name each Job.
    return bounded_name(f"floe-{topic.name}", f"-{action}", 52, topic.name)


def _volumes(topic: Topic) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The job ConfigMap, the referenced Secrets and the spec's own volumes, as pod volumes and
    their mounts (the same in the driver, the executors and the maintenance pods)."""
    volumes = [{"name": "job", "configMap": {"name": f"{topic.child_name}-job"}}]
    mounts = [{"name": "job", "mountPath": JOB_CONFIG_DIR, "readOnly": True}]
    for index, secret in enumerate(_secret_mounts(topic)):
        volumes.append({"name": f"secret-{index}", "secret": {"secretName": secret["name"]}})
        mounts.append({"name": f"secret-{index}", "mountPath": secret["path"], "readOnly": True})
    return (volumes + list(topic.spec.spark.volumes), mounts + list(topic.spec.spark.volume_mounts))


def cron_jobs(topic: Topic, settings: OperatorSettings) -> list[dict[str, Any]]:
    """One CronJob per enabled maintenance action; each runs Spark in local mode in its pod."""
    spec = topic.spec
    resources = spec.maintenance.resources
    memory_mi = round(size_bytes(resources.memory) * 1.4 / 1024**2)  # heap plus JVM overhead
    volumes, mounts = _volumes(topic)
    pod_settings = spec.spark.under(settings.spark_pod)
    volumes.append({"name": "tmp", "emptyDir": {}})
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    jobs = []
    for field, action in MAINTENANCE_ACTIONS.items():
        schedule = getattr(spec.maintenance, field)
        if not schedule.enabled:
            continue
        labels = {
            **_labels(topic),
            "app.kubernetes.io/name": "floe-maintenance",
            f"{GROUP}/action": action,
        }
        command = [
            SPARK_SUBMIT,
            "--master",
            f"local[{resources.cores}]",
            "--driver-memory",
            resources.memory,
            "--conf",
            "spark.ui.enabled=false",
            *(
                item
                for key, value in _spark_logging(settings).items()
                for item in ("--conf", f"{key}={value}")
            ),
            settings.job_main_file.removeprefix("local://"),
            "maintain",
            "--config",
            f"{JOB_CONFIG_DIR}/{JOB_CONFIG_KEY}",
            "--action",
            action,
        ]
        pod = {
            "restartPolicy": "Never",
            "serviceAccountName": spec.spark.service_account or settings.spark_service_account,
            "automountServiceAccountToken": False,
            **_placement(
                pod_settings, {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
            ),
            "containers": [
                _container(
                    {
                        "name": "maintain",
                        "image": spec.spark.image or settings.spark_image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": command,
                        "env": [{"name": "HOME", "value": "/tmp"}, *_logging_env(topic, settings)],
                        "resources": {
                            "requests": {"cpu": str(resources.cores), "memory": f"{memory_mi}Mi"},
                            "limits": {"memory": f"{memory_mi}Mi"},
                        },
                        "volumeMounts": mounts,
                    },
                    pod_settings,
                    {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                )
            ],
            "volumes": volumes,
        }
        jobs.append(
            {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": {
                    "name": cron_job_name(topic, action),
                    "namespace": topic.namespace,
                    "labels": labels,
                    "ownerReferences": [owner_reference(topic)],
                },
                "spec": {
                    "schedule": schedule.schedule,
                    "timeZone": "Etc/UTC",
                    "concurrencyPolicy": "Forbid",
                    "startingDeadlineSeconds": 600,
                    "successfulJobsHistoryLimit": 1,
                    "failedJobsHistoryLimit": 3,
                    "suspend": spec.suspend,
                    "jobTemplate": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "backoffLimit": 1,
                            "activeDeadlineSeconds": 6 * 3600,
                            "ttlSecondsAfterFinished": 7 * 86_400,
                            "template": {
                                "metadata": _pod_metadata(labels, pod_settings),
                                "spec": pod,
                            },
                        },
                    },
                },
            }
        )
    return jobs


@dataclass(frozen=True)
class Desired:
    """Everything the operator keeps for a resource, rendered once per spec: the job config and
    the children, each stamped with the hash it is applied with."""

    job: JobConfig
    config_map: dict[str, Any]
    config_map_digest: str
    spark_application: dict[str, Any]
    fingerprint: str
    cron_jobs: tuple[tuple[dict[str, Any], str], ...]


class _Rendered:
    """The renderings of the resources' current specs: a visit of an unchanged resource
    renders nothing again."""

    def __init__(self, size: int = 4096):
        self.size = size
        self.lock = threading.Lock()
        self.entries: dict[tuple[Any, ...], Desired] = {}

    def get(self, topic: Topic, settings: OperatorSettings) -> Desired:
        key = (
            topic.uid,
            topic.generation,
            topic.namespace,
            topic.name,
            topic.restart,
            topic.spec.model_dump_json(),
            settings.model_dump_json(),
        )
        with self.lock:
            found = self.entries.get(key)
        if found is not None:
            return found
        config_map_body, config_map_digest = stamped(config_map(topic, settings))
        app = spark_application(topic, settings)
        rendered = Desired(
            job=job_config(topic, settings),
            config_map=config_map_body,
            config_map_digest=config_map_digest,
            spark_application=app,
            fingerprint=app["metadata"]["annotations"][f"{GROUP}/job-fingerprint"],
            cron_jobs=tuple(stamped(c) for c in cron_jobs(topic, settings)),
        )
        with self.lock:
            if len(self.entries) >= self.size:
                self.entries.clear()
            self.entries[key] = rendered
        return rendered


_rendered = _Rendered()


def desired(topic: Topic, settings: OperatorSettings) -> Desired:
    """The job config and the children of ``topic`` (see :class:`Desired`)."""
    return _rendered.get(topic, settings)
