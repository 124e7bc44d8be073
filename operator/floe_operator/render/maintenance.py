"""The maintenance CronJobs: one per enabled action, each running Spark in local mode in its
pod (``python -m floe_sparkapp maintain``)."""

from __future__ import annotations

from typing import Any

from floe_sparkapp.units import size_bytes

from ..names import GROUP
from ..settings import OperatorSettings
from .config import JOB_CONFIG_DIR, JOB_CONFIG_KEY
from .pods import logging_env, placement, pod_container, pod_metadata, pod_volumes, spark_logging
from .topic import Topic, bounded_name, job_labels, owner_reference

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


def cron_jobs(topic: Topic, settings: OperatorSettings) -> list[dict[str, Any]]:
    """One CronJob per enabled maintenance action; each runs Spark in local mode in its pod."""
    spec = topic.spec
    resources = spec.maintenance.resources
    memory_mi = round(size_bytes(resources.memory) * 1.4 / 1024**2)  # heap plus JVM overhead
    volumes, mounts = pod_volumes(topic)
    pod_settings = spec.spark.under(settings.spark_pod)
    volumes.append({"name": "tmp", "emptyDir": {}})
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    jobs = []
    for field, action in MAINTENANCE_ACTIONS.items():
        schedule = getattr(spec.maintenance, field)
        if not schedule.enabled:
            continue
        labels = {
            **job_labels(topic),
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
                for key, value in spark_logging(settings).items()
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
            **placement(
                pod_settings, {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
            ),
            "containers": [
                pod_container(
                    {
                        "name": "maintain",
                        "image": spec.spark.image or settings.spark_image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": command,
                        "env": [{"name": "HOME", "value": "/tmp"}, *logging_env(topic, settings)],
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
                                "metadata": pod_metadata(labels, pod_settings),
                                "spec": pod,
                            },
                        },
                    },
                },
            }
        )
    return jobs
